"""Fetch: a bare mirror per repository, and a clean checkout of the pinned commit.

A commit already in the mirror needs no network (`offline=True` enforces that). Every
mutation of the mirror happens under a file lock, and checkouts are made in a temporary
folder and renamed into place only when complete, so an interrupted run leaves nothing
a later run would trust.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from pathlib import Path

import git
from filelock import FileLock

from build_kernel import examples
from build_kernel.errors import FetchError
from build_kernel.recipe import SHA_RE

MARKER = ".build-kernel.json"


def _slug(url: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").split("/")[-1].removesuffix(".git"))
    return f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def resolve_url(repo: str, cache_dir: Path, base: Path | None = None) -> str:
    """`example:NAME` -> its materialized repo; a relative path -> absolute; URLs as is."""
    if examples.is_example(repo):
        return str(examples.materialize(repo, cache_dir))
    if "://" not in repo and not repo.startswith("git@"):
        path = Path(repo)
        if not path.is_absolute() and base is not None:
            path = base / path
        return str(path.resolve())
    return repo


def _has_commit(mirror: git.Repo, sha: str) -> bool:
    try:
        mirror.git.cat_file("-e", f"{sha}^{{commit}}")
        return True
    except git.GitCommandError:
        return False


def _git_error(exc: git.GitCommandError) -> str:
    """git's own `fatal:`/`error:` line, without GitPython's wrapping."""
    lines = [re.sub(r"^stderr:\s*", "", l.strip()).strip("'").strip() for l in str(exc.stderr or exc).splitlines()]
    lines = [l for l in lines if l]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else f"git exited {exc.status}"


def ensure_commit(url: str, commit: str, cache_dir: Path, *, offline: bool, allow_floating: bool = False) -> tuple[Path, str]:
    """Make sure the mirror of `url` holds `commit`; return (mirror path, full SHA)."""
    mirrors = cache_dir / "mirrors"
    mirrors.mkdir(parents=True, exist_ok=True)
    path = mirrors / f"{_slug(url)}.git"
    floating = not SHA_RE.match(commit)
    if floating and not allow_floating:
        raise FetchError(f"{commit!r} is not a full commit SHA", hint="pin a 40-hex SHA, or pass --allow-floating")
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            if offline:
                raise FetchError(f"{url} is not in the cache and --offline forbids fetching it",
                                 hint="run once without --offline, or point the recipe at a local mirror")
            tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=mirrors))
            try:
                git.Repo.clone_from(url, tmp, mirror=True)
            except git.GitCommandError as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                raise FetchError(f"cannot clone {url}: {_git_error(exc)}", hint="check the URL and your network, or use a mirror") from None
            tmp.rename(path)
        mirror = git.Repo(path)
        if not floating and _has_commit(mirror, commit):
            return path, commit
        if offline:
            raise FetchError(f"{commit} is not in the cached mirror of {url} and --offline forbids fetching",
                             hint="run once without --offline")
        try:
            mirror.git.fetch("--prune", "origin", "+refs/*:refs/*")
            if not floating and not _has_commit(mirror, commit):
                # Hosts that allow it serve unadvertised commits by SHA.
                mirror.git.fetch("origin", commit)
        except git.GitCommandError as exc:
            if floating:
                raise FetchError(f"cannot fetch {url}: {_git_error(exc)}", hint="check the URL and your network") from None
        if floating:
            try:
                return path, mirror.git.rev_parse(f"{commit}^{{commit}}")
            except git.GitCommandError:
                raise FetchError(f"{commit!r} is neither a branch, tag nor commit of {url}", hint="check the ref") from None
        if not _has_commit(mirror, commit):
            raise FetchError(
                f"commit {commit} is not in {url}: force-pushed away?",
                hint="pin another commit, or add a mirror that still has it ([deps.NAME] path/repo for dependencies)",
            )
        return path, commit


def checkout(mirror: Path, commit: str, dest: Path) -> git.Repo:
    """A clean checkout of `commit` at `dest` (which must not exist); HEAD verified."""
    repo = git.Repo.clone_from(str(mirror), dest, shared=True, no_checkout=True)
    repo.git.checkout("--quiet", "--detach", commit)
    head = repo.head.commit.hexsha
    if head != commit:
        raise FetchError(f"checkout of {commit} in {dest} gave HEAD {head}", hint="delete the cache folder and retry")
    return repo


def worktree_key(commit: str, series_digest: str) -> str:
    return f"{commit[:12]}-{series_digest[:12]}"


def temp_dir_for(final: Path) -> Path:
    """A fresh sibling of `final`, renamed into place when complete."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))


