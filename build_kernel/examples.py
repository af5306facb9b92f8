"""Bundled miniature projects (`example:NAME` repos) as real git repositories.

The folder `examples/NAME` is committed into `<cache>/examples/NAME` with a fixed author,
committer and date, so the same files always give the same commit SHA: recipes can pin
it like any upstream commit, and a changed miniature shows up as a moved pin.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git
from filelock import FileLock

from build_kernel.errors import FetchError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PREFIX = "example:"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "build-kernel", "GIT_AUTHOR_EMAIL": "examples@build-kernel.invalid",
    "GIT_COMMITTER_NAME": "build-kernel", "GIT_COMMITTER_EMAIL": "examples@build-kernel.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def is_example(repo: str) -> bool:
    return repo.startswith(PREFIX)


def materialize(repo: str, cache_dir: Path, examples: Path = EXAMPLES) -> Path:
    """Make (or refresh) the git repo for `example:NAME`; return its path."""
    name = repo[len(PREFIX):]
    source = examples / name
    if not source.is_dir():
        known = ", ".join(sorted(p.name for p in examples.iterdir())) if examples.is_dir() else "none"
        raise FetchError(f"{repo}: no folder {source}", hint=f"bundled examples: {known}")
    target = cache_dir / "examples" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build", "dist"))
        g = git.Repo.init(target, initial_branch="main").git
        g.add("--all")
        with g.custom_environment(**_IDENTITY):
            g.commit("--quiet", "--no-gpg-sign", "-m", f"{name}: bundled miniature")
    return target


def commit_of(repo: str, cache_dir: Path) -> str:
    return git.Repo(materialize(repo, cache_dir)).head.commit.hexsha
