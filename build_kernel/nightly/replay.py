"""Replay: the nights of a past upstream range, one after the other, without waiting for a clock.

    build-kernel nightly --replay A..B --recipe R --state-dir D     (or: build-kernel nightly-replay ... A..B)

The nights are A itself, then for each day the last first-parent commit of upstream that touched the
package's folder (what a nightly at midnight would have found), B last. Each night, as a real night would:
  plan      the package version at that commit, the recipe's archs;
  series    the newest version of the recipe's series that applies whole there and is no silent downgrade (an
            older version than the last good night's only where every patch it lacks is retired), checked with
            patch health's own per-commit machinery (health.Tree: the package's files at that commit, every patch
            on a private index); the versions are those in patches/ when the replay starts (one added while it
            runs does not change its later nights);
  conflict  none applying: the last good night's series' first patch that does not apply, its hunk, and the first
            upstream commit from which it does not (bisected over the first-parent commits that touch the package
            between the last good night and this one);
  retired   patches of the last good night's series and of the recipe's own version upstream made unnecessary: their
            reverse applies, or their Applied-Upstream commit is now in the history;
  lock      the torch / flashinfer / kernel pins of sglang's python/pyproject.toml at that commit, and what moved.
Each night is written as a record of the nightly contract (`<state>/nights/<YYYYMMDD>-<commit12>.json`), outcome
`unchanged` with the reason `replay: planned, not built` unless a build is given for it (`builds`), and the
replay's own detail per night (candidates checked, health's verdict) to `<state>/replay.json`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from build_kernel import atomic, log
from build_kernel.errors import BuildKernelError
from build_kernel.nightly import record as night_record
from build_kernel.nightly import series_choice
from build_kernel.plan import Plan, resolve
from build_kernel.series import Series
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch import apply as patches
from build_kernel.stages.patch import check, health, upstreamed
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


def nights_of(mirror: Path, start: str, end: str, subdir: str, env: Mapping[str, str]) -> list[Night]:
    days: dict[str, str] = {}
    latest = ""
    for line in out(mirror, "log", "--first-parent", "--reverse", "--format=%H %cs", f"{start}..{end}", "--",
                    subdir or ".", env=env).splitlines():
        sha, day = line.split()
        # Oldest first, the day's last commit stays. A commit dated before the one merged ahead of it (its
        # committer's clock, a late merge) reached main after it: it belongs to the later night.
        latest = max(latest, day)
        days[latest] = sha
    first = Night(out(mirror, "log", "-1", "--format=%cs", start, env=env).strip(), start)
    rest = [Night(day, sha) for day, sha in days.items()]
    if not rest or rest[-1].commit != end:
        rest.append(Night(out(mirror, "log", "-1", "--format=%cs", end, env=env).strip(), end))
    return [first, *rest]


def _pins(mirror: Path, sha: str, get: health.Fetcher, env: Mapping[str, str]) -> dict[str, str]:
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


def _record(plan: Plan, night: Night, started: str, **fields: Any) -> dict[str, Any]:
    return {"schema": 1, "recipe": plan.recipe.name, "night": night.date, "started": started,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields}


def _plan_with(plan: Plan, version: str) -> Plan | str:
    """The recipe's plan with series `version` (what the night would build), or why the plan refuses it."""
    recipe = replace(plan.recipe, patches=replace(plan.recipe.patches, version=version))
    try:
        return resolve(recipe, env=plan.env, cache_dir=plan.cache_dir, output_dir=plan.output_dir,
                       resources=plan.resources, arch=",".join(a.torch for a in plan.archs))
    except BuildKernelError as exc:
        return exc.render().splitlines()[0]


def _health_rows(plan: Plan, mirror: Path, start: str, end: str, offline: bool, candidates: list[Series],
                 pyproject: str) -> dict[str, list[str]]:
    """`patch health --series <every version>` over the range (the library call the command makes): commit ->
    the versions that apply whole there, at each commit that changed the package version."""
    others = tuple(s for s in candidates if s.name != plan.series.name)
    since = rev_parse(mirror, f"{start}^", plan.env)
    if since is None and not offline:  # a mirror holding the pins alone has no parents: fetch the branch's history
        get = health.Fetcher(plan, fetch.resolve_url(plan.recipe.source.repo, plan.cache_dir, plan.recipe.root),
                              offline)
        get("HEAD", (pyproject,), floating=True)
        since = rev_parse(mirror, f"{start}^", plan.env)  # None still: the range starts at upstream's first commit
    walked = health.walk(plan, since=since, until=end, offline=offline, also=others)
    return {row.commit: [c.name for c in row.compared if c.applies] for row in walked.rows}


def built_from(state_dir: Path) -> dict[str, dict[str, Any]]:
    """The nights really built in a nightly's state folder (`nightly --night D` run with upstream at the night's
    commit), by commit: what `replay(builds=...)` merges into the replay's records (reason, build, wheel, logs, and
    the series the night built, which the replay compares with its own choice)."""
    return {r["upstream"]["commit"]: {"reason": r["reason"], "build": r["build"], "wheel": r["wheel"],
                                      "logs": r["logs"], "series_version": r["series"]["version"], "night": r["night"]}
            for r in night_record.read_all(state_dir) if r["outcome"] == "built"}


def replay(plan: Plan, start: str, end: str, state_dir: Path, *, offline: bool = False,
           builds: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every night of start..end, oldest first; their records written under `state_dir`. `builds`: the build,
    wheel and logs of the nights that were really built, by commit (the sample), merged into their records."""
    src = plan.recipe.source
    url = fetch.resolve_url(src.repo, plan.cache_dir, plan.recipe.root)
    get = health.Fetcher(plan, url, offline)
    pyproject = f"{src.subdir}/pyproject.toml" if src.subdir else "pyproject.toml"
    mirror, end_sha = get(end, (pyproject,), floating=True)
    start_sha = rev_parse(mirror, start, plan.env) or get(start, (pyproject,), floating=True)[1]
    end_sha = rev_parse(mirror, end_sha, plan.env) or end_sha
    # First: the walk fetches the range's history when the mirror has a pin alone (a shallow fetch).
    candidates = series_choice.versions(plan)  # fixed here: a version added to patches/ mid-run changes nothing
    log.info(f"series versions: {', '.join(s.directory.name for s in candidates)}")
    rows = _health_rows(plan, mirror, start_sha, end_sha, offline, candidates, pyproject)
    nights = nights_of(mirror, start_sha, end_sha, src.subdir, plan.env)
    records, details = [], []
    # Beside the choice: which of the recipe's own patches upstream has (Applied-Upstream in the night's history),
    # whatever series the nights chose: what a version without them leaves out for a reason, not by accident.
    where = health.Tree(get, mirror, state_dir / ".replay-unused-tree", pyproject)  # its mirror only: no checkout
    fixes = upstreamed.resolve(plan.series.patches, where)
    good: tuple[str, Series] | None = None  # the last good night's commit and series
    pins_before: dict[str, str] | None = None
    with log.step(f"replay: {len(nights)} night(s) of {start_sha[:12]}..{end_sha[:12]}"):
        for i, night in enumerate(nights):
            started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            reference = good[1] if good else plan.series
            choice = series_choice.choose(plan, night.commit, reference=reference, good=good[0] if good else None,
                                          offline=offline, candidates=candidates)
            chosen = choice.chosen
            planned = _plan_with(plan, chosen.directory.name) if chosen else None
            # patch check --commit of the chosen version (its own checkout): every patch applies there.
            checked = (all(s.state in _WHOLE for s in check.check(planned, commit=night.commit, offline=offline))
                       if isinstance(planned, Plan) else None)
            at_row = rows.get(night.commit)
            newest = next((n for n in [s.name for s in candidates] if n in (at_row or [])), None)
            # What the choice should be by health's verdict: its newest applying version that is no silent downgrade
            # and carries no patch the recipe omits.
            allowed = next((s.name for s in candidates if s.name in (at_row or [])
                            and s.directory.name not in choice.downgrades + choice.declined), None)
            pins = _pins(mirror, night.commit, get, plan.env)
            changes = [{"pin": k, "from": (pins_before or {}).get(k), "to": v} for k, v in sorted(pins.items())
                       if pins_before is not None and pins_before.get(k) != v]
            pins_before = pins
            commits_since = (len(out(mirror, "rev-list", "--first-parent", f"{good[0]}..{night.commit}",
                                     env=plan.env).split()) if good else 0)
            built = (builds or {}).get(night.commit)
            conflict = choice.conflict
            if conflict:
                passed = (f"; {', '.join(choice.downgrades)} passed over (older, lacking patches upstream does not "
                          "have)" if choice.downgrades else "")
                outcome, reason = "conflict", (f"{conflict.patch} does not apply{passed}; the last good wheel stays "
                                               "the index's newest")
            elif isinstance(planned, str):
                outcome, reason = "failed", f"the plan refuses series {chosen.name if chosen else ''}: {planned}"
            elif built and built.get("series_version") not in (None, chosen.directory.name if chosen else None):
                raise BuildKernelError(
                    f"the night built at {night.commit[:12]} is series {built.get('series_version')}, the replay "
                    f"chooses {chosen.directory.name if chosen else 'none'} there: not the same night",
                    hint="build that night again with this tree's series choice, or leave it out of the builds")
            elif built:
                outcome, reason = "built", str(built.get("reason", "built"))
            else:
                outcome, reason = "unchanged", f"replay: planned, not built (series {chosen.name if chosen else ''})"
            records.append(_record(
                plan, night, started, outcome=outcome, reason=reason,
                upstream={"ref": src.ref or "main", "commit": night.commit,
                          "previous_good": good[0] if good else None, "commits_since": commits_since},
                series=choice.to_dict(), lock_changes=changes, build=(built or {}).get("build"),
                tests={"ran": False, "why_not": "no GPU on the replay host", "per_file": {}},
                wheel=(built or {}).get("wheel"), logs=dict((built or {}).get("logs", {}))))
            details.append({
                "night": night.date, "commit": night.commit, "archs": [a.torch for a in plan.archs],
                "package_version": _version(mirror, night.commit, pyproject, get), "pins": pins,
                "chosen": chosen.name if chosen else None, "tried": [list(t) for t in choice.tried],
                "recipe_patches_upstream": list(upstreamed.fixed_at(night.commit, fixes, where)),
                "plan": "ok" if isinstance(planned, Plan) else planned,
                "patch_check": checked,
                "patch_health": None if at_row is None else {"applies": at_row, "newest": newest,
                                                             "newest_no_downgrade": allowed,
                                                             "agrees": allowed == (chosen.name if chosen else None)}})
            if chosen is not None and outcome != "failed":
                good = (night.commit, chosen)
            log.info(f"  {i + 1}/{len(nights)} {night.date} {night.commit[:12]} {outcome}: "
                     + (f"{conflict.patch}" if conflict else f"series {chosen.name if chosen else ''}")
                     + (f", retired {', '.join(choice.retired)}" if choice.retired else ""))
    for record in records:
        night_record.write(state_dir, record)  # type: ignore[arg-type]  # built as a dict, checked by write
    atomic.write_text(state_dir / "replay.json",
                      json.dumps({"schema": 1, "recipe": plan.recipe.name, "range": f"{start_sha}..{end_sha}",
                                  "nights": details}, indent=1, sort_keys=True) + "\n")
    return records


def _version(mirror: Path, sha: str, pyproject: str, get: health.Fetcher) -> str | None:
    oid = git(mirror, "rev-parse", "--verify", "--quiet", f"{sha}:{pyproject}", env=get.env).stdout.strip()
    if not oid:
        return None
    get.objects([oid])
    return health.pyproject_version(out(mirror, "cat-file", "blob", oid, env=get.env))


def lines(records: list[dict[str, Any]]) -> str:
    """The replay's nights, a line each (what the command prints without --json)."""
    return "\n".join(f"{r['night']} {r['upstream']['commit'][:12]} {r['outcome']:9} "
                     f"{r['series']['version'] or '-':4} {r['reason']}" for r in records)
