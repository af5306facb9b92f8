"""Talking to a remote: git with the timeouts of network.py, one retry of a transfer that broke, nothing
half-written left in the mirror, and the error that says which of those happened (remote.py decides what to
fetch; this is how)."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

import git

from build_kernel import log, network
from build_kernel.errors import FetchError


def git_error(exc: git.GitCommandError) -> str:
    """git's own `fatal:`/`error:` line, without GitPython's wrapping."""
    lines = [re.sub(r"^stderr:\s*", "", l.strip()).strip("'").strip() for l in str(exc.stderr or exc).splitlines()]
    lines = [l for l in lines if l]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else f"git exited {exc.status}"


# What a fetch that failed leaves in the mirror: the part of a pack received before the connection broke
# (index-pack keeps its tmp_pack_*), and, when the fetch timeout killed git, its locks (a stale lock refuses
# every later fetch), or a SIGKILLed run's git (remote.ensure removes those before its first git). Never part of
# the mirror's objects or refs; removed under the mirror's lock (no git of ours runs in it then).
_LEFTOVERS = ("shallow.lock", "packed-refs.lock", "config.lock", "HEAD.lock", "objects/pack/tmp_*",
                   "objects/incoming-*", "refs/**/*.lock")


def remove_leftovers(repo: git.Repo) -> None:
    for pattern in _LEFTOVERS:
        for path in Path(repo.git_dir).glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def git_net(repo: git.Repo, args: Sequence[str], net: network.Settings, istream: BinaryIO | None = None) -> str:
    """git that talks to the remote: git's HTTP stall timeout, and the fetch timeout for every protocol (a
    `git://` or ssh server that accepts and never answers holds git forever); a timeout reads as git's `fatal:`."""
    try:
        return str(repo.git.execute(["git", "-C", repo.git_dir, *net.git_options(), *args], istream=istream,
                                    kill_after_timeout=net.fetch_cap_s))
    except git.GitCommandError as exc:
        remove_leftovers(repo)
        if "did not complete in" in str(exc.stderr):
            raise git.GitCommandError(exc.command, exc.status, f"fatal: no answer in {net.fetch_cap_s:g} s "
                                      f"(the fetch timeout, {network.FETCH_TIMEOUT_ENV})") from None
        raise


def fetch(repo: git.Repo, *args: str, net: network.Settings, stdin: Iterable[str] = (), blobs: bool = False) -> None:
    """One fetch, tried again once when the connection broke mid-transfer (network.py says why that is safe)."""
    cmd = ["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--no-tags", "--no-write-fetch-head",
           "--recurse-submodules=no", "--no-filter" if blobs else "--filter=blob:none", *args]
    lines = list(stdin)
    for attempt in range(1, network.FETCH_ATTEMPTS + 1):
        try:
            if lines:
                with tempfile.TemporaryFile() as fh:
                    fh.write(("\n".join(lines) + "\n").encode())
                    fh.seek(0)
                    git_net(repo, [*cmd, "--stdin"], net, istream=fh)
            else:
                git_net(repo, cmd, net)
            return
        except git.GitCommandError as exc:
            if attempt == network.FETCH_ATTEMPTS or not network.broken_transfer(str(exc.stderr)):
                raise
            log.warn(f"fetch from {repo.git.remote('get-url', 'origin')} broke ({git_error(exc)}); trying once more")


def fetch_error(what: str, where: str, exc: git.GitCommandError, config: str,
                net: network.Settings = network.DEFAULT) -> FetchError:
    """`cannot fetch WHAT from WHERE: git's line (what to do)`, the fix by what went wrong: the transfer broke
    (nothing of it was kept), no answer in time, or (else) the URL, network or mirror."""
    said = git_error(exc)
    if "(the fetch timeout" in said:
        hint = f"the server accepted and never answered: check it and your network, or raise {network.FETCH_TIMEOUT_ENV}"
    elif network.broken_transfer(said):
        hint = (f"the connection broke {network.FETCH_ATTEMPTS} times mid-transfer, and no part of the transfer was "
                "kept: run the same command again when the server is back")
    else:
        hint = f"check the URL, your network and {config}"
    return FetchError(f"cannot fetch {what} from {where}: {said}", hint=hint)
