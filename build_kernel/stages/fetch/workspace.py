"""The patched source tree of a plan: fetch + patch, cached by (commit, series digest).

A finished tree carries a marker file; it is built in a `.partial-` sibling and renamed
into place only after every patch applied, so an interrupted or failed run leaves no
tree that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import git
from filelock import FileLock

from build_kernel import atomic, network
from build_kernel.errors import FetchError, PatchError
from build_kernel.mirrors import is_url
from build_kernel.plan import Plan
from build_kernel.recipe import SHA_RE, Dep
from build_kernel.stages.fetch import pins
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch import apply as patches

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Tree:
    root: Path  # the checkout
    project: Path  # root / subdir: what gets built
    commit: str
    series_digest: str
    cached: bool
    patches: tuple[patches.PatchStatus, ...]
    dep_dirs: dict[str, Path]

    def fetchcontent_defines(self) -> dict[str, str]:
        return {f"FETCHCONTENT_SOURCE_DIR_{name.upper()}": str(path) for name, path in self.dep_dirs.items()}


def upstream_version(project: Path) -> str:
    """The package version upstream declares ([project] version in pyproject.toml)."""
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file():
        return ""
    return str(tomllib.loads(pyproject.read_text()).get("project", {}).get("version", ""))


def check_applicability(plan: Plan, commit: str, version: str) -> None:
    """The series says which upstream commits/versions it was made for; refuse others."""
    series = plan.series
    if not series.applies_to_commits and not series.applies_to_versions:
        return
    if commit in series.applies_to_commits:
        return
    if series.applies_to_versions and version:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        if Version(version) in SpecifierSet(series.applies_to_versions):
            return
    made_for = ", ".join(c[:12] for c in series.applies_to_commits) or series.applies_to_versions
    raise PatchError(
        f"series {plan.recipe.patches.series}/{plan.recipe.patches.version} is made for {made_for}, "
        f"not {commit[:12]} (version {version or '?'})",
        hint=f"run `build-kernel patch check --recipe {plan.recipe.name} --commit {commit}`; if it applies, "
             f"add the commit to {series.directory}/info.toml",
    )


def prepare(plan: Plan, *, offline: bool = False, commit: str | None = None) -> Tree:
    """Return the patched tree for the plan, making it if it is not cached."""
    r = plan.recipe
    url = fetch.resolve_url(r.source.repo, plan.cache_dir, r.root)
    ref = commit or r.source.commit
    floating = commit is None and r.source.allow_floating and not SHA_RE.match(ref)
    if floating:  # a branch: its recorded commit offline
        ref = pins.for_fetch(plan, "source", "commit", r.source.repo, url, ref, offline=offline)
    mirror, sha = fetch.ensure_commit(url, ref, plan.cache_dir, offline=offline,
                                      allow_floating=r.source.allow_floating, paths=r.source.paths,
                                      mirrors=plan.mirrors,
                                      net=network.settings(plan.env))
    if floating and not offline:
        pins.record(plan, "source", "commit", r.source.repo, r.source.commit, sha)
    dep_dirs = prepare_deps(plan, offline=offline)
    # A submodule (and which of its folders) makes another tree: part of the key.
    shape = (*r.source.paths, *(f"{s}:{','.join(r.source.sparse_paths)}" for s in r.source.submodules))
    final = plan.cache_dir / "src" / fetch.worktree_key(sha, plan.series.digest, shape)
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        marker = final / fetch.MARKER
        if marker.is_file():
            data = json.loads(marker.read_text())
            head = git.Repo(final).head.commit.hexsha
            if head == sha and data.get("series_digest") == plan.series.digest:
                statuses = tuple(patches.PatchStatus(**s) for s in data["patches"])
                return Tree(final, final / r.source.subdir, sha, plan.series.digest, True, statuses, dep_dirs)
            shutil.rmtree(final)  # does not match its key: never trust it
        elif final.exists():
            shutil.rmtree(final)  # no marker: left by an interrupted run
        atomic.sweep(final)
        applied: list[patches.PatchStatus] = []

        def fill(tmp: Path) -> dict[str, object]:
            fetch.checkout(mirror, sha, tmp, paths=r.source.paths).close()  # no git process outlives the fill
            for sub in r.source.submodules:
                _add_submodule(plan, "source", r.source.repo, tmp, sub, r.source.sparse_paths, offline)
            check_applicability(plan, sha, upstream_version(tmp / r.source.subdir))
            applied.extend(patches.apply_series(tmp, plan.series, r.source.subdir, env=plan.env))
            return {"commit": sha, "series_digest": plan.series.digest, "repo": url,
                    "patches": [s.to_dict() for s in applied]}

        _make_atomically(final, fill)
    return Tree(final, final / r.source.subdir, sha, plan.series.digest, False, tuple(applied), dep_dirs)


def _make_atomically(final: Path, fill: Callable[[Path], dict[str, object]]) -> None:
    """Fill a `.partial-` sibling, mark it complete, then rename it into place; never half."""
    with atomic.folder(final) as tmp:
        marker = fill(tmp)
        (tmp / fetch.MARKER).write_text(json.dumps(marker, indent=2))


def prepare_deps(plan: Plan, *, offline: bool = False) -> dict[str, Path]:
    """Pre-fetch the FetchContent dependencies the recipe overrides; name -> source dir."""
    return {dep.name: _prepare_dep(plan, dep, offline) for dep in plan.recipe.deps}


def _prepare_dep(plan: Plan, dep: Dep, offline: bool) -> Path:
    if dep.path:
        path = Path(dep.path)
        path = path if path.is_absolute() else (plan.recipe.root / path)
        if not path.is_dir():
            raise FetchError(f"[deps.{dep.name}] path {path} does not exist", hint="fix the path in the recipe")
        return path.resolve()
    url = fetch.resolve_url(dep.repo, plan.cache_dir, plan.recipe.root)
    key = f"deps.{dep.name}"
    ref = pins.for_fetch(plan, key, "tag", dep.repo, url, dep.tag, offline=offline) if dep.tag else dep.commit
    mirror, sha = fetch.ensure_commit(url, ref, plan.cache_dir, offline=offline, paths=dep.paths,
                                      mirrors=plan.mirrors, allow_floating=bool(dep.tag), history=False,
                                      net=network.settings(plan.env))
    if dep.tag and not offline:
        pins.record(plan, key, "tag", dep.repo, dep.tag, sha)
    # A sparse checkout is a different tree: its paths (and submodules) are part of the key.
    shape = "\n".join(dep.paths) + "\0" + "\n".join(dep.submodules)
    scope = "-" + hashlib.sha256(shape.encode()).hexdigest()[:8] if dep.paths or dep.submodules else ""
    final = plan.cache_dir / "deps" / f"{dep.name}-{sha[:12]}{scope}"
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / fetch.MARKER).is_file():
            return final
        shutil.rmtree(final, ignore_errors=True)
        atomic.sweep(final)

        def fill(tmp: Path) -> dict[str, object]:
            fetch.checkout(mirror, sha, tmp, paths=dep.paths).close()
            subs = {sub: _add_submodule(plan, f"deps.{dep.name}", dep.repo, tmp, sub, dep.paths, offline)
                    for sub in dep.submodules}
            return {"commit": sha, "tag": dep.tag, "repo": url, "paths": list(dep.paths), "submodules": subs}

        _make_atomically(final, fill)
    return final


def _add_submodule(plan: Plan, table: str, repo_name: str, tree: Path, sub: str, wanted: Sequence[str],
                   offline: bool) -> str:
    """Check out the commit the gitlink at `sub` names (of a dependency, as FetchContent's clone would:
    GIT_SUBMODULES defaults to all; or of the source itself), fetched like any dependency; `wanted`
    paths below `sub` make it sparse. `table` names the recipe table in messages. Returns its commit."""
    repo = git.Repo(tree)
    listing = repo.git.ls_tree("HEAD", "--", sub).split()
    if len(listing) < 3 or listing[1] != "commit":
        raise FetchError(f"[{table}] submodules: {sub!r} is not a submodule of {repo_name} at {repo.head.commit.hexsha[:12]}",
                         hint="list the gitlink paths of its .gitmodules")
    sha = str(listing[2])
    url = ""
    try:  # read from the commit: a sparse checkout may not have .gitmodules on disk
        entries = repo.git.config("--blob", "HEAD:.gitmodules", "--get-regexp", r"^submodule\..*\.path$")
    except git.GitCommandError:
        entries = ""
    for line in entries.splitlines():
        key, _, path = line.partition(" ")
        if path == sub:
            url = repo.git.config("--blob", "HEAD:.gitmodules", "--get", key[: -len(".path")] + ".url")
    if not is_url(url):
        raise FetchError(f"[{table}] submodules: no absolute URL for {sub!r} in its .gitmodules ({url or 'none'})",
                         hint=f"give {sub} as a [deps] entry of its own instead")
    prefix = sub.rstrip("/") + "/"
    paths = [p[len(prefix):] for p in wanted if p.startswith(prefix)]
    mirror, _ = fetch.ensure_commit(url, sha, plan.cache_dir, offline=offline, paths=paths, mirrors=plan.mirrors,
                                      net=network.settings(plan.env))
    dest = tree / sub
    if dest.is_dir() and not any(dest.iterdir()):
        dest.rmdir()
    fetch.checkout(mirror, sha, dest, paths=paths).close()
    return sha
