"""Which series version a night builds: the newest of the recipe's series that applies whole at tonight's commit
(patch health's machinery: the same scratch clone, `check_series`, the Applied-Upstream headers); the patches
upstream made unnecessary (retired); and, when none applies, the conflicting patch and hunk with the first
upstream commit that broke it, bisected between the last good night and tonight as `git bisect` would, over
the first-parent commits that touch the series' files (the series' state can change only where one does).

Versions are the folders `patches/<series>/v<N><rest>` with the recipe's own `<rest>` (`v12-unpruned` is
compared with `v11-unpruned`, never with `v12`), newest N first.

No silent downgrade: a version older than the reference (the last good night's, else the recipe's own) is a
candidate only when every patch of the reference it lacks that the recipe's own version carries (a patch is the
same across versions by its name, as the pool keeps it) is retired at tonight's commit: upstream has it verbatim
or its Applied-Upstream fix is in the history. A patch only a newer version than the recipe's carries (an
experiment such as v13's header diet) is no promise the recipe made: a night may leave it out, and `tried` says so. Otherwise it is passed over (`tried` says which patches it would leave out), and where no candidate is
left the night is the reference's conflict: its patch, hunk and first bad commit. Retired patches are those of the
reference and of the recipe's own version (a night on an older reference still says when the recipe's patch went
upstream).

The recipe's refusals stand: a version carrying a patch the recipe lists in [patches.omitted] (left out with a reason,
e.g. v13's header diet "not taken yet") is no candidate, whichever is newer; `tried` says which patch and why. A
night builds what the recipe would build with a newer version, never a patch its author declined.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from build_kernel import log
from build_kernel.plan import Plan
from build_kernel.series import Series, load_series, patch_stem
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch import apply as patches
from build_kernel.stages.patch import upstreamed
from build_kernel.stages.patch.health import Fetcher, Tree
from build_kernel.stages.patch.healthrows import SeriesAt
from build_kernel.stages.patch.mirrorgit import is_ancestor, out

_VERSION = re.compile(r"^v(\d+)(.*)$")
_WHOLE = (patches.APPLIES, patches.OFFSET)


@dataclass(frozen=True)
class Conflict:
    patch: str
    hunk: str
    first_bad_commit: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {"patch": self.patch, "hunk": self.hunk, "first_bad_commit": self.first_bad_commit}


@dataclass(frozen=True)
class Choice:
    chosen: Series | None
    reference: Series  # the last good night's series (else the recipe's): what retired and conflicts are of
    retired: tuple[str, ...]  # of the reference and of the recipe's own version
    conflict: Conflict | None
    tried: tuple[tuple[str, str], ...] = field(default=())  # (version, why not) of the versions passed over
    downgrades: tuple[str, ...] = field(default=())  # the versions of `tried` refused as silent downgrades
    declined: tuple[str, ...] = field(default=())  # the versions of `tried` carrying a patch the recipe omits

    def to_dict(self) -> dict[str, object]:
        return {"name": self.chosen.name if self.chosen else None,
                "version": self.chosen.directory.name if self.chosen else None,
                "retired": list(self.retired), "conflict": self.conflict.to_dict() if self.conflict else None,
                "reference": self.reference.name, "tried": [{"version": v, "why_not": w} for v, w in self.tried]}


def versions(plan: Plan) -> list[Series]:
    """The recipe's series' versions of its own shape, newest first (the recipe's alone when it is not `vN...`)."""
    own = plan.series.directory
    m = _VERSION.match(own.name)
    if m is None:
        return [plan.series]
    found = []
    for folder in own.parent.iterdir():
        v = _VERSION.match(folder.name)
        if v and v.group(2) == m.group(2) and (folder / "series").is_file():
            found.append((int(v.group(1)), folder))
    return [load_series(folder) for _, folder in sorted(found, reverse=True)]


def series_named(plan: Plan, version: str) -> Series:
    return load_series(plan.series.directory.parent / version)


def _files(series: Series, subdir: str) -> list[str]:
    names = {f.path for p in series.patches for f in patches.read_diff(p.path)}
    return sorted(f"{subdir}/{n}" if subdir else n for n in names)


def first_bad(tree: Tree, series: Series, good: str, bad: str, subdir: str) -> str | None:
    """The first first-parent commit after `good` (applies) up to `bad` (does not) where `series` stops applying;
    None when `good` is no ancestor of `bad` (a rewritten branch: nothing to bisect)."""
    env = tree.env
    if not is_ancestor(tree.mirror, good, bad, env):
        return None
    commits = out(tree.mirror, "log", "--first-parent", "--format=%H", "--reverse", f"{good}..{bad}", "--",
                  *_files(series, subdir), env=env).split()
    if not commits:
        return bad
    lo, hi, checked = 0, len(commits) - 1, 0
    while lo < hi:  # the state at `bad` is the state at the last commit that touched the files
        mid, checked = (lo + hi) // 2, checked + 1
        if SeriesAt(series.name, tree.check(commits[mid], series)).applies:
            lo = mid + 1
        else:
            hi = mid
    log.info(f"  first bad commit: {commits[lo][:12]} (of {len(commits)} commit(s) touching the series' files "
             f"after {good[:12]}, {checked} checked)")
    return commits[lo]


def _retired(tree: Tree, series: Series, statuses: Sequence[patches.PatchStatus], commit: str) -> tuple[str, ...]:
    """The series' patches upstream has at `commit`: verbatim (reverse applies) or by its declared fix."""
    fixes = upstreamed.resolve(series.patches, tree)
    declared = set(upstreamed.fixed_at(commit, fixes, tree))
    return tuple(s.name for s in statuses if s.state == patches.UPSTREAM or s.name in declared)


def number(series: Series) -> int | None:
    """N of a `vN...` version folder (None for a series that is not versioned so)."""
    m = _VERSION.match(series.directory.name)
    return int(m.group(1)) if m else None


def lacking(candidate: Series, reference: Series) -> list[str]:
    """The reference's patches (by name: a patch's identity across versions) that `candidate` does not carry."""
    carried = {p.name for p in candidate.patches}
    return [p.name for p in reference.patches if p.name not in carried]


def _older_why_not(candidate: Series, reference: Series, retired: set[str], required: set[str]) -> str | None:
    """Why `candidate` may not replace `reference` (None: it may): older, and lacking patches the recipe's own
    version carries (`required`) that upstream lacks too."""
    n, ref = number(candidate), number(reference)
    if n is None or ref is None or n >= ref:
        return None
    kept_out = [name for name in lacking(candidate, reference) if name in required and name not in retired]
    if not kept_out:
        return None
    return (f"older than {reference.directory.name} and lacks {', '.join(kept_out)}, which upstream does not have "
            "(a downgrade would silently drop them)")


def _omitted_why_not(candidate: Series, omitted: dict[str, str]) -> str | None:
    """Why `candidate` may not be built (None: it may): it carries patches the recipe leaves out on purpose."""
    declined = [p.name for p in candidate.patches if patch_stem(p.name) in omitted]
    if not declined:
        return None
    return (f"carries {', '.join(declined)}, which the recipe leaves out ([patches.omitted]: "
            + "; ".join(omitted[patch_stem(n)] for n in declined) + ")")


def choose(plan: Plan, commit: str, *, reference: Series, good: str | None, offline: bool = False,
           candidates: Sequence[Series] | None = None) -> Choice:
    """The newest version that applies whole at `commit` and is no silent downgrade of `reference`; else the
    reference's conflict and its first bad commit after `good` (the last good night's commit, or None: nothing to
    bisect from). `candidates`: the versions to choose from, newest first (default: `versions(plan)` now; a replay
    fixes them at its start)."""
    src = plan.recipe.source
    url = fetch.resolve_url(src.repo, plan.cache_dir, plan.recipe.root)
    get = Fetcher(plan, url, offline)
    pyproject = f"{src.subdir}/pyproject.toml" if src.subdir else "pyproject.toml"
    mirror, _ = get(commit, src.paths)
    tried: list[tuple[str, str]] = []
    downgrades: list[str] = []
    declined: list[str] = []
    candidates = list(candidates if candidates is not None else versions(plan))
    with tempfile.TemporaryDirectory(prefix="bk-nightly-") as tmp:
        tree = Tree(get, mirror, Path(tmp) / "tree", pyproject)
        ref_statuses = tree.check(commit, reference)
        retired = list(_retired(tree, reference, ref_statuses, commit))
        if plan.series.directory != reference.directory:
            own = _retired(tree, plan.series, tree.check(commit, plan.series), commit)
            retired += [name for name in own if name not in retired]
        chosen = None
        required = {p.name for p in plan.series.patches}  # what the recipe's own version promises
        omitted = {patch_stem(k): v for k, v in plan.recipe.patches.omitted.items()}
        for series in candidates:
            why_not = _older_why_not(series, reference, set(retired), required)
            if why_not is not None:
                downgrades.append(series.directory.name)
            else:
                why_not = _omitted_why_not(series, omitted)
                if why_not is not None:
                    declined.append(series.directory.name)
            if why_not is None:
                at = SeriesAt(series.name, tree.check(commit, series))
                if at.applies:
                    chosen = series
                    break
                why_not = at.why_not()
            tried.append((series.directory.name, why_not))
        conflict = None
        if chosen is None:
            # The reference's first patch that stops it (else, where it applies but is no candidate, the newest's).
            failing = [s for s in ref_statuses if s.state not in _WHOLE] or [
                s for s in tree.check(commit, candidates[0]) if s.state not in _WHOLE]
            if failing:
                stop = failing[0]
                bad = first_bad(tree, reference, good, commit, src.subdir) if good else None
                conflict = Conflict(stop.name, stop.detail or stop.state, bad)
            else:  # every version that applies carries a patch the recipe leaves out
                left_out = next((p.name for p in candidates[0].patches if patch_stem(p.name) in omitted),
                                reference.name)
                conflict = Conflict(left_out, "the recipe leaves it out ([patches.omitted])", None)
    for version, why in tried:
        log.info(f"  series {version}: {why}")
    return Choice(chosen, reference, tuple(retired), conflict, tuple(tried), tuple(downgrades), tuple(declined))
