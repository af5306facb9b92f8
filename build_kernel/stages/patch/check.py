"""Patch-series maintenance: check a series against any upstream commit, and the
edit loop (`patch worktree` -> edit -> commit -> `patch refresh`)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import git
from unidiff import PatchSet

from build_kernel import atomic, process
from build_kernel.errors import PatchError
from build_kernel.plan import Plan
from build_kernel.series import write_lock
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch import apply as patches

_IDENTITY = {"GIT_AUTHOR_NAME": "build-kernel", "GIT_AUTHOR_EMAIL": "patches@build-kernel.invalid",
             "GIT_COMMITTER_NAME": "build-kernel", "GIT_COMMITTER_EMAIL": "patches@build-kernel.invalid"}


def _checkout(plan: Plan, commit: str | None, dest: Path, offline: bool) -> str:
    r = plan.recipe
    url = fetch.resolve_url(r.source.repo, plan.cache_dir, r.root)
    mirror, sha = fetch.ensure_commit(url, commit or r.source.commit, plan.cache_dir, offline=offline,
                                      allow_floating=r.source.allow_floating or commit is not None,
                                      paths=r.source.paths, mirrors=plan.mirrors)
    fetch.checkout(mirror, sha, dest, paths=r.source.paths).close()
    return sha


def check(plan: Plan, *, commit: str | None = None, offline: bool = False) -> list[patches.PatchStatus]:
    """The state of each patch against `commit` (default: the recipe's pin)."""
    with tempfile.TemporaryDirectory(prefix="bk-check-") as tmp:
        tree = Path(tmp) / "tree"
        _checkout(plan, commit, tree, offline)
        return patches.check_series(tree, plan.series, plan.recipe.source.subdir, env=plan.env)


def dev_worktree(plan: Plan, dest: Path, *, offline: bool = False) -> None:
    """Checkout with one commit per patch, message = patch file name."""
    if dest.exists():
        raise PatchError(f"{dest} already exists", hint="choose a new folder or delete it")
    try:
        _checkout(plan, None, dest, offline)
        repo = git.Repo(dest)
        repo.git.checkout("--quiet", "-b", "series")
        subdir = plan.recipe.source.subdir
        for patch in plan.series.patches:
            args = ["git", "-C", str(dest), "apply", "-p1", *([f"--directory={subdir}"] if subdir else []), str(patch.path)]
            proc = process.run(args, error=PatchError, what=f"applying {patch.name}", env=plan.env, check=False)
            if proc.returncode:
                lines = (proc.stderr or proc.stdout).strip().splitlines()
                why = lines[-1].strip() if lines else f"git apply exited {proc.returncode} and said nothing"
                raise PatchError(f"{patch.name} does not apply: {why}", hint="run `build-kernel patch check` first")
            repo.git.add("--all")
            with repo.git.custom_environment(**_IDENTITY):
                repo.git.commit("--quiet", "--no-gpg-sign", "-m", patch.name)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _changes(text: str) -> list[tuple[str, str, list[tuple[int | None, int | None, list[str], list[str]]]]]:
    """A diff's change alone: per file, each run of removed/added lines with where its first removed line was
    (source) and its first added line is (target). Two diffs of the same change with other amounts of context
    (our patches keep little; git diff -U3 more) are equal here."""
    out = []
    for f in PatchSet(text):
        blocks: list[tuple[int | None, int | None, list[str], list[str]]] = []
        run: list[Any] | None = None
        for h in f:
            for line in [*h, None]:  # None ends the hunk's last run
                if line is None or line.is_context:
                    if run:
                        blocks.append((run[0], run[1], run[2], run[3]))
                    run = None
                    continue
                run = run or [None, None, [], []]
                if line.is_removed:
                    run[0] = run[0] if run[0] is not None else line.source_line_no
                    run[2].append(line.value)
                else:
                    run[1] = run[1] if run[1] is not None else line.target_line_no
                    run[3].append(line.value)
        out.append((f.source_file, f.target_file, blocks))
    return out


def refresh(plan: Plan, worktree: Path) -> list[str]:
    """Rewrite each patch's diff from the worktree's commits; keep its header; relock (a changed patch of a
    pooled series becomes a new pool file; the old one stays while another version uses it)."""
    repo = git.Repo(worktree)
    base = plan.recipe.source.commit
    commits = list(reversed(list(repo.iter_commits(f"{base}..HEAD"))))
    series = plan.series
    if len(commits) != len(series.patches):
        raise PatchError(
            f"{worktree} has {len(commits)} commit(s) on top of {base[:12]}, the series has {len(series.patches)} patches",
            hint="keep exactly one commit per patch (squash fixups into their patch's commit)",
        )
    subdir = plan.recipe.source.subdir
    changed = []
    parent = base
    new_texts = []
    for commit, patch in zip(commits, series.patches, strict=True):
        rel = ["--relative=" + subdir] if subdir else []
        diff = repo.git.diff("-U3", "--no-color", "--no-ext-diff", *rel, parent, commit.hexsha) + "\n"
        text = patch.path.read_text()
        start = text.find("diff --git ")
        if start < 0:
            start = text.find("--- a/")
        header = text[:start] if start >= 0 else text
        new_texts.append((patch, header + diff))
        parent = commit.hexsha
    for patch, text in new_texts:
        if _changes(text) != _changes(patch.path.read_text()):
            # Into the version folder, never over patch.path: with a pool that file may be another
            # version's too. Locking moves it into the pool as a new content.
            atomic.write_text(series.directory / patch.name, text)
            changed.append(patch.name)
    write_lock(series.directory)
    return changed
