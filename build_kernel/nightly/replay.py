"""Replay: the nights of a past upstream range, one after the other, without waiting for a clock.

    build-kernel nightly-replay --recipe R --state-dir D A..B

The nights are A itself, then for each day the last first-parent commit of upstream that touched the
package's folder (what a nightly at midnight would have found), B last. Each night, as a real night would:
  plan      the package version at that commit, the recipe's archs;
  series    the newest version of the recipe's series that applies whole there (versions carrying a patch the
            recipe lists in [patches.omitted] are not candidates), checked with patch health's own per-commit
            machinery (health._Tree: the package's files at that commit, every patch on a private index);
  conflict  none applying: the last good night's series' first patch that does not apply, its hunk, and the first
            upstream commit from which it does not (bisected over the first-parent commits that touch the package
            between the last good night and this one);
  retired   patches of the last good series upstream made unnecessary: its reverse applies, their Applied-Upstream
            commit is now in the history, or the version chosen tonight no longer carries them;
  lock      the torch / flashinfer / kernel pins of sglang's python/pyproject.toml at that commit, and what moved.
Each night is written as a record of the nightly contract (`<state>/nights/<YYYYMMDD>-<commit12>.json`), outcome
`unchanged` with the reason `replay: planned, not built` unless a build is given for it (`builds`), and the
replay's own detail per night (candidates checked, health's verdict) to `<state>/replay.json`.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from build_kernel import atomic, log
from build_kernel.errors import BuildKernelError
from build_kernel.nightly import record as night_record
from build_kernel.plan import Plan
from build_kernel.series import Series, load_series
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch import apply as patches
from build_kernel.stages.patch import health, upstreamed
from build_kernel.stages.patch.mirrorgit import git, out, rev_parse

_WHOLE = (patches.APPLIES, patches.OFFSET)
_PINS = {"torch": r"torch", "flashinfer_python": r"flashinfer[-_]python", "sgl-kernel": r"(?:sgl|sglang)[-_]kernel"}


@dataclass(frozen=True)
class Night:
    date: str
    commit: str


def parse_range(text: str) -> tuple[str, str]:
    start, sep, end = text.partition("..")
    if not sep or not start or not end or "." in start + end:
        raise BuildKernelError(f"--replay {text!r} is not a range A..B",
                               hint="pass two upstream commits (or tags) as A..B, e.g. 6ffc74ef..0753182b")
    return start, end


def candidates(plan: Plan) -> list[Series]:
    """The recipe's series versions `vN`, newest first, without those carrying a patch the recipe omits."""
    folder = plan.series.directory.parent
    omitted = set(plan.recipe.patches.omitted)
    found = []
    for directory in folder.iterdir():
        if re.fullmatch(r"v\d+", directory.name) and (directory / "series").is_file():
            series = load_series(directory)
            if not any(p.name.removesuffix(".patch") in omitted for p in series.patches):
                found.append(series)
    return sorted(found, key=lambda s: -int(s.directory.name[1:]))


def _applies(statuses: Sequence[patches.PatchStatus]) -> bool:
    return all(s.state in _WHOLE for s in statuses)


def nights_of(mirror: Path, start: str, end: str, subdir: str, env: Mapping[str, str]) -> list[Night]:
    days: dict[str, str] = {}
    for line in out(mirror, "log", "--first-parent", "--reverse", "--format=%H %cs", f"{start}..{end}", "--",
                    subdir or ".", env=env).splitlines():
        sha, day = line.split()
        days[day] = sha  # oldest first: the day's last commit stays
    first = Night(out(mirror, "log", "-1", "--format=%cs", start, env=env).strip(), start)
    rest = [Night(day, sha) for day, sha in days.items()]
    if not rest or rest[-1].commit != end:
        rest.append(Night(out(mirror, "log", "-1", "--format=%cs", end, env=env).strip(), end))
    return [first, *rest]


def _pins(mirror: Path, sha: str, get: health._Fetcher, env: Mapping[str, str]) -> dict[str, str]:
    """The pins sglang's python/pyproject.toml names at `sha` (its lock of torch, flashinfer and the kernel)."""
    oid = git(mirror, "rev-parse", "--verify", "--quiet", f"{sha}:python/pyproject.toml", env=env).stdout.strip()
    if not oid:
        return {}
    get.objects([oid])
    text = out(mirror, "cat-file", "blob", oid, env=env)
    pins = {}
    for name, pattern in _PINS.items():
        match = re.search(rf'"{pattern}\s*(==|>=|~=)\s*([^",;\s]+)', text)
        if match:
            pins[name] = f"{match.group(1)}{match.group(2)}"
    return pins


class _Replay:
    def __init__(self, plan: Plan, get: health._Fetcher, mirror: Path, tree: health._Tree) -> None:
        self.plan, self.get, self.mirror, self.tree, self.env = plan, get, mirror, tree, plan.env
        self.subdir = plan.recipe.source.subdir
        self.cands = candidates(plan)
        self.bisected: dict[tuple[str, str], str | None] = {}

    def choose(self, sha: str) -> tuple[Series | None, dict[str, str]]:
        """The newest candidate that applies whole; each checked one's verdict (newest first)."""
        seen = {}
        for series in self.cands:
            statuses = self.tree.check(sha, series)
            seen[series.name] = "applies" if _applies(statuses) else next(
                f"{s.name} {s.state}" for s in statuses if s.state not in _WHOLE)
            if _applies(statuses):
                return series, seen
        return None, seen

    def first_bad(self, series: Series, good: str, bad: str) -> str | None:
        """The first first-parent commit after `good` touching the package at which `series` stops applying."""
        if (series.name, good) in self.bisected:
            cached = self.bisected[(series.name, good)]
            if cached and git(self.mirror, "merge-base", "--is-ancestor", cached, bad, env=self.env).returncode == 0:
                return cached
        commits = out(self.mirror, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}", "--",
                      self.subdir or ".", env=self.env).split()
        lo, hi = 0, len(commits) - 1  # invariant: commits[hi] does not apply; before lo, all apply
        if not commits or _applies(self.tree.check(commits[hi], series)):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if _applies(self.tree.check(commits[mid], series)):
                lo = mid + 1
            else:
                hi = mid
        self.bisected[(series.name, good)] = commits[lo]
        return commits[lo]


def _record(plan: Plan, night: Night, started: str, **fields: Any) -> dict[str, Any]:
    return {"schema": 1, "recipe": plan.recipe.name, "night": night.date, "started": started,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields}


def replay(plan: Plan, start: str, end: str, state_dir: Path, *, offline: bool = False,
           builds: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every night of start..end, oldest first; their records written under `state_dir`. `builds`: the build,
    wheel and logs of the nights that were really built, by commit (the sample), merged into their records."""
    src = plan.recipe.source
    url = fetch.resolve_url(src.repo, plan.cache_dir, plan.recipe.root)
    get = health._Fetcher(plan, url, offline)
    pyproject = f"{src.subdir}/pyproject.toml" if src.subdir else "pyproject.toml"
    mirror, end_sha = get(end, (pyproject,), floating=True)
    start_sha = rev_parse(mirror, start, plan.env) or get(start, (pyproject,), floating=True)[1]
    end_sha = rev_parse(mirror, end_sha, plan.env) or end_sha
    nights = nights_of(mirror, start_sha, end_sha, src.subdir, plan.env)
    records, details = [], []
    with tempfile.TemporaryDirectory(prefix="bk-replay-") as tmp:
        tree = health._Tree(get, mirror, Path(tmp) / "tree", pyproject)
        run = _Replay(plan, get, mirror, tree)
        fixes = upstreamed.resolve(plan.series.patches, tree)
        good: tuple[str, Series] | None = None  # the last good night's commit and series
        was_fixed: set[str] = set()
        pins_before: dict[str, str] | None = None
        with log.step(f"replay: {len(nights)} night(s) of {start_sha[:12]}..{end_sha[:12]}"):
            for i, night in enumerate(nights):
                started = datetime.now(timezone.utc).isoformat(timespec="seconds")
                chosen, seen = run.choose(night.commit)
                conflict, retired = None, []
                ref = good[1] if good else plan.series
                if chosen is None:
                    statuses = tree.check(night.commit, ref)
                    stop = next(s for s in statuses if s.state not in _WHOLE)
                    conflict = {"patch": stop.name, "hunk": stop.detail or stop.state,
                                "first_bad_commit": run.first_bad(ref, good[0], night.commit) if good else None}
                else:
                    if good and good[1].name != chosen.name:
                        kept = {p.name for p in chosen.patches}
                        retired = [p.name for p in good[1].patches if p.name not in kept]
                fixed = set(upstreamed.fixed_at(night.commit, fixes, tree))
                retired = sorted({*retired, *(fixed - was_fixed)})
                was_fixed |= fixed
                pins = _pins(mirror, night.commit, get, plan.env)
                changes = [{"pin": k, "from": (pins_before or {}).get(k), "to": v} for k, v in sorted(pins.items())
                           if pins_before is not None and pins_before.get(k) != v]
                pins_before = pins
                commits_since = (len(out(mirror, "rev-list", "--first-parent", f"{good[0]}..{night.commit}",
                                         env=plan.env).split()) if good else 0)
                built = (builds or {}).get(night.commit)
                name = f"{chosen.directory.parent.name}" if chosen else ref.directory.parent.name
                reason = (f"{conflict['patch']} conflicts with upstream; the last good wheel stays the index's newest"
                          if conflict else built.get("reason", "built") if built
                          else f"replay: planned, not built (series {chosen.name if chosen else ''} applies)")
                record = _record(
                    plan, night, started,
                    outcome="conflict" if conflict else "built" if built else "unchanged", reason=reason,
                    upstream={"ref": src.ref or "main", "commit": night.commit,
                              "previous_good": good[0] if good else None, "commits_since": commits_since},
                    series={"name": name, "version": chosen.directory.name if chosen else None, "retired": retired,
                            "conflict": conflict},
                    lock_changes=changes, build=(built or {}).get("build"),
                    tests={"ran": False, "why_not": "no GPU on the replay host", "per_file": {}},
                    wheel=(built or {}).get("wheel"), logs=dict((built or {}).get("logs", {})))
                records.append(record)
                details.append({"night": night.date, "commit": night.commit, "package_version": _version(
                    mirror, night.commit, pyproject, get), "archs": [a.name for a in plan.archs],
                    "candidates": seen, "pins": pins})
                if chosen is not None:
                    good = (night.commit, chosen)
                log.info(f"  {i + 1}/{len(nights)} {night.date} {night.commit[:12]}: "
                         + (f"conflict {conflict['patch']}" if conflict else f"series {chosen.name if chosen else ''}")
                         + (f", retired {', '.join(retired)}" if retired else ""))
    for record in records:
        night_record.write(state_dir, record)  # type: ignore[arg-type]  # built as a dict, checked by write
    atomic.write_text(state_dir / "replay.json",
                      json.dumps({"schema": 1, "recipe": plan.recipe.name, "range": f"{start_sha}..{end_sha}",
                                  "nights": details}, indent=1, sort_keys=True) + "\n")
    return records


def _version(mirror: Path, sha: str, pyproject: str, get: health._Fetcher) -> str | None:
    oid = git(mirror, "rev-parse", "--verify", "--quiet", f"{sha}:{pyproject}", env=get.env).stdout.strip()
    if not oid:
        return None
    get.objects([oid])
    return health._version(out(mirror, "cat-file", "blob", oid, env=get.env))
