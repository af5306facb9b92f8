"""The partial bare mirror of a repository: where it lives, how it is made, what it holds.

A mirror is a bare partial clone of `origin` (commits and trees, blobs only where fetched);
what to fetch into it, and when, is remote's. Git run here never reaches a remote
(`NO_NETWORK`). Checkouts borrow the mirror's objects (alternates) and are partial clones
of upstream themselves, so git never needs the blobs outside their paths.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import git

from build_kernel import atomic
from build_kernel.errors import FetchError

# For git that must never reach a remote: in a partial clone a missing object would otherwise
# be fetched lazily (and `--offline` must mean offline).
NO_NETWORK = {"GIT_ALLOW_PROTOCOL": "none"}


def _slug(url: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").split("/")[-1].removesuffix(".git"))
    return f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def path_for(cache_dir: Path, url: str) -> Path:
    """Where the mirror of `url` lives in the cache."""
    return cache_dir / "mirrors" / f"{_slug(url)}.git"


def _make_partial(repo: git.Repo, origin: str, *, blob_filter: str = "") -> None:
    """Mark `repo` a partial clone of `origin`: objects it lacks are promised, not an error;
    `blob_filter` is the default filter of later fetches."""
    with repo.config_writer() as cfg:
        cfg.set_value("core", "repositoryformatversion", "1")
        cfg.set_value("extensions", "partialClone", "origin")
        cfg.set_value('remote "origin"', "url", origin)
        cfg.set_value('remote "origin"', "promisor", "true")
        if blob_filter:
            cfg.set_value('remote "origin"', "partialclonefilter", blob_filter)


def init(path: Path) -> None:
    """An empty bare repository that may lack blobs (a partial clone of `origin`)."""
    with atomic.folder(path) as tmp:
        _make_partial(git.Repo.init(tmp, bare=True), "unset", blob_filter="blob:none")


def local(repo: git.Repo, *args: str) -> str:
    """git in the mirror that never reaches a remote (NO_NETWORK)."""
    return str(repo.git.execute(["git", "--git-dir", repo.git_dir, *args], env=NO_NETWORK))


def has_commit(repo: git.Repo, sha: str) -> bool:
    try:
        local(repo, "cat-file", "-e", f"{sha}^{{commit}}")
        return True
    except git.GitCommandError:
        return False


def _is_shallow(repo: git.Repo) -> bool:
    return (Path(repo.git_dir) / "shallow").is_file()


def checkout(mirror: Path, commit: str, dest: Path, *, paths: Sequence[str] = ()) -> git.Repo:
    """A checkout of `commit` at `dest` (which must not exist), only `paths` when given; HEAD
    verified. It borrows the mirror's objects and, like `git clone --filter=blob:none
    --sparse`, is a partial clone of upstream, so the absent blobs are no error."""
    source = git.Repo(mirror)
    repo = git.Repo.init(dest)
    (Path(repo.git_dir) / "objects" / "info" / "alternates").write_text(str(mirror.resolve() / "objects") + "\n")
    if _is_shallow(source):
        shutil.copyfile(Path(source.git_dir) / "shallow", Path(repo.git_dir) / "shallow")
    _make_partial(repo, source.git.remote("get-url", "origin"))
    repo.git.config("advice.detachedHead", "false")
    spec = [p.strip("/") for p in paths if p.strip("/")]
    if spec:
        repo.git.sparse_checkout("set", "--no-cone", *(f"/{p}" for p in spec))  # a folder or a file
    repo.git.execute(["git", "-C", str(dest), "checkout", "--quiet", "--detach", commit],
                     env=NO_NETWORK)  # every blob it needs is in the mirror
    head = repo.head.commit.hexsha
    if head != commit:
        raise FetchError(f"checkout of {commit} in {dest} gave HEAD {head}", hint="delete the cache folder and retry")
    return repo
