"""git in fetch's mirror for patch health, never reaching a remote: health's walk and the search for
where upstream caught up (upstreamed) both read the history this way, so neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from build_kernel import process
from build_kernel.errors import FetchError
from build_kernel.stages.fetch.mirror import NO_NETWORK


def git(repo: Path, *args: str, env: Mapping[str, str], stdin: str | None = None,
        check: bool = False) -> process.CompletedProcess[str]:
    """git in `repo`, in `env` (the plan's); a failure with `check` is a one-line FetchError."""
    # Never a lazy fetch: the mirror is a partial clone, and what it lacks is fetched by fetch.ensure_commit.
    return process.run(["git", "-C", repo, *args], error=FetchError, what=f"git {args[0]} in {repo}",
                       fix="delete the mirror from the cache and retry" if check else None,
                       env={**env, **NO_NETWORK}, stdin=stdin, check=check)


def out(repo: Path, *args: str, env: Mapping[str, str]) -> str:
    return git(repo, *args, env=env, check=True).stdout


def rev_parse(mirror: Path, ref: str, env: Mapping[str, str]) -> str | None:
    """The commit `ref` names in the mirror (a SHA, abbreviated or not; a tag: its commit), None when absent."""
    proc = git(mirror, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", env=env)
    return proc.stdout.strip() if proc.returncode == 0 else None


def is_ancestor(mirror: Path, older: str, newer: str, env: Mapping[str, str]) -> bool:
    """`older` is in the history of `newer` (a commit is its own ancestor)."""
    return git(mirror, "merge-base", "--is-ancestor", older, newer, env=env).returncode == 0


def date(mirror: Path, sha: str, env: Mapping[str, str]) -> str:
    """The commit date, as the walk's rows give it (YYYY-MM-DD)."""
    return out(mirror, "log", "-1", "--format=%cs", sha, "--", env=env).strip()
