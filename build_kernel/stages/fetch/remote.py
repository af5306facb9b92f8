"""Fetch: a partial mirror per repository holding only what builds need, and sparse checkouts.

A pinned commit is fetched by its SHA alone (`--depth=1 --filter=blob:none`: the commit
and its trees, no history, no blobs), then only the blobs under the paths the build reads
(`[source] subdir`, `[deps.NAME] paths`). Branches, tags and pull-request refs are
fetched only when the server refuses a SHA (then the one ref whose tip it is, else
branches and tags, else pull-request heads). For sglang that is ~1 MB instead of a
~1.2 GB full mirror. A commit already in the mirror needs no network (`offline=True`
enforces that).

Every mutation of a mirror happens under a file lock; checkouts are made in a temporary
folder and renamed into place only when complete, so an interrupted run leaves nothing
a later run would trust. The mirror itself (where it lives, how it is made, local queries,
checkouts) is in mirror.py; `checkout` and `NO_NETWORK` are importable from here too.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import git
from filelock import FileLock

from build_kernel import examples, network
from build_kernel.errors import FetchError
from build_kernel.mirrors import Mirrors, Rewrite, is_url
from build_kernel.recipe import SHA_RE
from build_kernel.stages.fetch import mirror, transfer
from build_kernel.stages.fetch.mirror import NO_NETWORK as NO_NETWORK
from build_kernel.stages.fetch.mirror import checkout as checkout

MARKER = ".build-kernel.json"
PIN_REF = "refs/build-kernel/pins/"
FLOATING_REF = "refs/build-kernel/refs/"
# History without a depth limit, said as a depth: a plain fetch into a partial clone from a
# shallow server lazily fetches the missing parents in a child git and deadlocks (git 2.39);
# an "infinite" depth (what --unshallow sends) takes the server's own boundary instead.
_ALL_HISTORY = "--depth=2147483647"
# Messages of servers that refuse a want by SHA (unadvertised object).
_REFUSED = ("not our ref", "unadvertised object", "allow request for unadvertised")


def resolve_url(repo: str, cache_dir: Path, base: Path | None = None) -> str:
    """`example:NAME` -> its materialized repo; a relative path -> absolute; URLs as is."""
    if examples.is_example(repo):
        return str(examples.materialize(repo, cache_dir))
    if not is_url(repo):
        path = Path(repo)
        if not path.is_absolute() and base is not None:
            path = base / path
        return str(path.resolve())
    return repo


def _where(rw: Rewrite) -> str:
    """The repository as the user should read it in an error: the mirror and what it stands for."""
    return f"mirror {rw.fetch_url} (for {rw.url}, set in {rw.rule.origin})" if rw.rule else rw.url


def _refused(exc: git.GitCommandError) -> bool:
    """The server refused to serve an object by id (not a network or URL problem)."""
    return any(s in str(exc.stderr) for s in _REFUSED)


def _needed_blobs(repo: git.Repo, sha: str, paths: Sequence[str]) -> set[str]:
    """Blobs a sparse checkout of `paths` reads: the files under them, plus the .gitignore and
    .gitattributes files of their parent folders (git reads those from the index)."""
    spec = [p.strip("/") for p in paths if p.strip("/")]
    wanted: set[str] = set()
    if spec:
        parents = {""}
        for p in spec:
            parts = p.split("/")
            parents.update("/".join(parts[:i]) for i in range(1, len(parts)))
        meta = [f"{d}/{name}" if d else name for d in parents for name in (".gitignore", ".gitattributes")]
        meta.append(".gitmodules")  # where a dependency's submodules come from
        listing = mirror.local(repo, "ls-tree", "-r", "--full-tree", sha, "--", *spec, *meta)
    else:
        listing = mirror.local(repo, "ls-tree", "-r", "--full-tree", sha)
    for line in listing.splitlines():
        info, _, _ = line.partition("\t")
        _mode, kind, oid = info.split()
        if kind == "blob":  # not "commit": a submodule is not ours to fetch
            wanted.add(oid)
    return wanted


def _missing_blobs(repo: git.Repo, sha: str, paths: Sequence[str]) -> set[str]:
    # --missing=print lists absent objects without fetching them.
    listing = mirror.local(repo, "rev-list", "--objects", "--missing=print", "--no-walk", sha)
    missing = {line[1:].split()[0] for line in listing.splitlines() if line.startswith("?")}
    return missing & _needed_blobs(repo, sha, paths) if missing else set()


_H, _T, _P = "refs/build-kernel/heads/", "refs/build-kernel/tags/", "refs/build-kernel/pull/"
_FALLBACK_REFS = {_H: ("refs/heads/", ""), _T: ("refs/tags/", ""), _P: ("refs/pull/", "/head")}


def _containing_ref(repo: git.Repo, sha: str) -> tuple[str, str] | None:
    """(server ref, our ref) of a fallback-fetched ref that holds `sha`."""
    for ours in mirror.local(repo, "for-each-ref", "--contains", sha, "--format=%(refname)").split():
        for prefix, (theirs, suffix) in _FALLBACK_REFS.items():
            if ours.startswith(prefix):
                return theirs + ours[len(prefix):] + suffix, ours
    return None


def _tips(repo: git.Repo, sha: str, net: network.Settings) -> list[str]:
    """The refs of the server whose tip is `sha` (a branch, a tag, refs/pull/N/head)."""
    advertised = transfer.git_net(repo, ["ls-remote", "origin"], net)
    return [line.split("\t")[1] for line in advertised.splitlines() if line.startswith(sha)]


def _fetch_pin(repo: git.Repo, sha: str, where: str, config: str, net: network.Settings) -> None:
    """The commit alone if the server serves it by SHA; else the smallest set of refs that has it."""
    pin = f"+{sha}:{PIN_REF}{sha}"
    try:
        transfer.fetch(repo, "--depth=1", "origin", pin, net=net)
        return
    except git.GitCommandError as exc:
        if not _refused(exc):
            raise transfer.fetch_error(sha, where, exc, config, net) from None
    tips = _tips(repo, sha, net)
    if tips:  # the tip of some ref (a branch, a tag, refs/pull/N/head): that ref alone
        transfer.fetch(repo, "--depth=1", "origin", f"+{tips[0]}:{PIN_REF}{sha}", net=net)
        return
    for refspecs in ([f"+refs/heads/*:{_H}*", f"+refs/tags/*:{_T}*"], [f"+refs/pull/*/head:{_P}*"]):
        try:
            transfer.fetch(repo, _ALL_HISTORY, "origin", *refspecs, net=net)
        except git.GitCommandError:
            continue  # e.g. a server with no pull-request refs at all
        if mirror.has_commit(repo, sha):
            repo.git.update_ref(PIN_REF + sha, sha)
            return


def ensure_commit(url: str, commit: str, cache_dir: Path, *, offline: bool, allow_floating: bool = False,
                  paths: Sequence[str] = (), mirrors: Mirrors | None = None, history: bool = True,
                  net: network.Settings = network.DEFAULT) -> tuple[Path, str]:
    """Make sure the mirror of `url` holds `commit` and the blobs under `paths` (all, when
    empty); return (mirror path, full SHA). `mirrors` may redirect where it is fetched from.
    A branch or tag comes with its history unless `history` is false (a dependency's tag);
    `net`: the timeouts (network.settings of the plan's environment)."""
    mirrors = mirrors or Mirrors()
    rw, config = mirrors.rewrite(url), mirrors.config_words()
    path = mirror.path_for(cache_dir, url)
    floating = not SHA_RE.match(commit)
    if floating and not allow_floating:
        raise FetchError(f"{commit!r} is not a full commit SHA", hint="pin a 40-hex SHA, or set allow_floating = true in [source]")
    if offline and not path.exists():
        # Said before the lock file and its folder are made: an offline run (a dry run's) leaves the cache as it was.
        raise FetchError(f"{url} is not in the cache and --offline forbids fetching it",
                         hint=f"run once without --offline, or map it to a local mirror ({config})")
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        created = not path.exists()
        if created:
            if offline:
                raise FetchError(f"{url} is not in the cache and --offline forbids fetching it",
                                 hint=f"run once without --offline, or map it to a local mirror ({config})")
            mirror.init(path)
        else:  # a killed run's git left its locks (SIGKILL runs no except): a stale shallow.lock refuses every fetch
            transfer.remove_leftovers(git.Repo(path))
        try:
            return _ensure_locked(git.Repo(path), path, url, rw, commit, floating, offline, paths, history, config,
                                  net)
        except BaseException:
            if created:  # nothing of a failed first fetch stays behind
                shutil.rmtree(path, ignore_errors=True)
            raise


def _ensure_locked(repo: git.Repo, path: Path, url: str, rw: Rewrite, commit: str, floating: bool, offline: bool,
                   paths: Sequence[str], history: bool, config: str, net: network.Settings) -> tuple[Path, str]:
    where = _where(rw)
    if not offline:
        repo.git.remote("set-url", "origin", rw.fetch_url)
    try:
        sha = _resolve_floating(repo, commit, where, offline, history, config, net) if floating else commit
        if not mirror.has_commit(repo, sha):
            if offline:
                raise FetchError(f"{sha} is not in the cached mirror of {url} and --offline forbids fetching",
                                 hint="run once without --offline")
            _fetch_pin(repo, sha, where, config, net)
            if not mirror.has_commit(repo, sha):
                if rw.rule:
                    raise FetchError(f"commit {sha} is not in {where}",
                                     hint="update the mirror from upstream, or remove its [mirrors] entry")
                raise FetchError(f"commit {sha} is not in {where}: force-pushed away?",
                                 hint="pin another commit, or add a mirror that still has it "
                                      "([deps.NAME] path/repo for dependencies)")
        _ensure_blobs(repo, sha, paths, url, where, offline, net)
    except git.GitCommandError as exc:
        raise transfer.fetch_error(commit, where, exc, config, net) from None
    return path, sha


def _ensure_blobs(repo: git.Repo, sha: str, paths: Sequence[str], url: str, where: str, offline: bool,
                  net: network.Settings) -> None:
    """The files a checkout of `paths` needs, fetched by id in one request."""
    missing = _missing_blobs(repo, sha, paths)
    if not missing:
        return
    if offline:
        raise FetchError(f"{len(missing)} files of {sha[:12]} are not in the cached mirror of {url} and "
                         "--offline forbids fetching them", hint="run once without --offline")
    try:
        transfer.fetch(repo, "origin", stdin=sorted(missing), net=net)
    except git.GitCommandError as exc:
        if not _refused(exc):
            raise
        # A server that serves no object by id: whole trees, through the ref the commit came by.
        tips = _tips(repo, sha, net)
        if tips:
            transfer.fetch(repo, "--refetch", "--depth=1", "origin", f"+{tips[0]}:{PIN_REF}{sha}", blobs=True, net=net)
        else:
            ref = _containing_ref(repo, sha)
            if ref is None:
                raise FetchError(f"{where} serves neither objects by id nor a ref at {sha[:12]}",
                                 hint="allow uploadpack.allowAnySHA1InWant on the server, or use a mirror that does") from None
            transfer.fetch(repo, "--refetch", "origin", f"+{ref[0]}:{ref[1]}", blobs=True, net=net)
    still = _missing_blobs(repo, sha, paths)
    if still:
        raise FetchError(f"{where} did not send {len(still)} files of {sha[:12]} (e.g. {sorted(still)[0]})",
                         hint="the server must serve objects by id (uploadpack.allowFilter, uploadpack.allowAnySHA1InWant)")


def fetch_objects(url: str, oids: Sequence[str], cache_dir: Path, *, offline: bool,
                  mirrors: Mirrors | None = None, net: network.Settings = network.DEFAULT) -> None:
    """Objects of an existing mirror fetched by id in one request (e.g. one file across many
    commits); what is already there is not asked for again."""
    rw = (mirrors or Mirrors()).rewrite(url)
    path = mirror.path_for(cache_dir, url)
    with FileLock(str(path) + ".lock"):
        repo = git.Repo(path)
        present = mirror.local(repo, "cat-file", "--batch-check=%(objectname)", "--batch-all-objects").split()
        missing = sorted(set(oids) - set(present))
        if not missing:
            return
        if offline:
            raise FetchError(f"{len(missing)} objects are not in the cached mirror of {url} and --offline forbids "
                             "fetching them", hint="run once without --offline")
        try:
            repo.git.remote("set-url", "origin", rw.fetch_url)
            transfer.fetch(repo, "origin", stdin=missing, net=net)
        except git.GitCommandError as exc:
            raise FetchError(f"cannot fetch {len(missing)} objects from {_where(rw)}: {transfer.git_error(exc)}",
                             hint="the server must serve objects by id (uploadpack.allowFilter, "
                                  "uploadpack.allowAnySHA1InWant)") from None


# git's words for a repository it could not reach or read at all (the URL or mirror is wrong, not the ref).
_UNREACHABLE = ("does not appear to be a git repository", "repository not found", "could not read from remote",
                "could not resolve host", "unable to access", "no such file or directory", "connection refused",
                "not found")


def _floating_error(ref: str, where: str, said: str, config: str) -> FetchError:
    """Why a branch/tag could not be fetched, pointing at what to fix: an abbreviated SHA (a server fetches
    commits by full SHA only), the repository or mirror itself, else the ref."""
    if re.fullmatch(r"[0-9a-fA-F]{7,39}", ref):
        return FetchError(f"{ref!r} looks like an abbreviated commit SHA, and {where} fetches commits by their full "
                          f"SHA only: {said}", hint="pin the full 40-hex SHA (`git rev-parse " + ref + "` in a clone "
                          "prints it), and drop allow_floating")
    if any(s in said.lower() for s in _UNREACHABLE) and "remote ref" not in said.lower():
        fix = ("fix or create the mirror, or remove its [mirrors] entry" if where.startswith("mirror ")
               else f"check [source] repo / [deps.NAME] repo, your network and {config}")
        return FetchError(f"cannot read {where}: {said}", hint=fix)
    return FetchError(f"{ref!r} is neither a branch, tag nor commit of {where}: {said}",
                      hint="check the ref")


def _resolve_floating(repo: git.Repo, ref: str, where: str, offline: bool, history: bool, config: str,
                      net: network.Settings) -> str:
    """A branch or tag (with its history of commits and trees, no blobs), kept under our own ref."""
    local = FLOATING_REF + ref
    if not offline:
        try:
            transfer.fetch(repo, _ALL_HISTORY if history else "--depth=1", "origin", f"+{ref}:{local}", net=net)
        except git.GitCommandError as exc:
            raise _floating_error(ref, where, transfer.git_error(exc), config) from None
    # An annotated tag names a tag object: the commit it points at is what gets checked out.
    sha = mirror.local(repo, "for-each-ref", "--format=%(objectname)", local).strip()
    if sha:
        sha = mirror.local(repo, "rev-parse", "--verify", "--quiet", f"{local}^{{commit}}").strip() or sha
    if not sha:
        raise FetchError(f"{ref!r} is not in the cached mirror of {where} and --offline forbids fetching it",
                         hint="run once without --offline")
    return sha


def cached_ref(url: str, ref: str, cache_dir: Path) -> str | None:
    """The commit a branch or tag resolved to when it was last fetched into the cache (None: never), read
    without the network and without taking the mirror's lock (a ref update is atomic)."""
    path = mirror.path_for(cache_dir, url)
    if not path.is_dir():
        return None
    repo = git.Repo(path)
    try:
        return mirror.local(repo, "rev-parse", "--verify", "--quiet", f"{FLOATING_REF}{ref}^{{commit}}").strip() or None
    except git.GitCommandError:
        return None
    finally:
        repo.close()


def worktree_key(commit: str, series_digest: str, paths: Sequence[str] = ()) -> str:
    """One tree per commit, series and checked-out paths (a sparse tree is not a whole one)."""
    key = f"{commit[:12]}-{series_digest[:12]}"
    return f"{key}-{hashlib.sha256(chr(0).join(paths).encode()).hexdigest()[:8]}" if paths else key
