"""One night of a recipe, start to end: upstream -> series -> nightly pins -> the pipeline's stages -> record.

The stages are the pipeline's own objects (stages.pipeline(): fetch, patch, build, verify, test, publish; serve
left out), run by `stages.run` on a plan whose [source] commit is tonight's, whose series version is the one
chosen, and whose wheel version carries the night (`X.Y.Z.devYYYYMMDD+<local>`: Plan.version_dev). Each stage
is idempotent and cached by its inputs, so resuming an interrupted night is running the same night again:
current.json keeps what the night decided (commit, series, date) until it ends, and the same command takes it
up instead of asking upstream anew. A record is written when the night starts (`interrupted`, finished null:
what a killed night leaves) and replaced when it ends. Only a night whose wheel verified, tested (where a GPU
is) and installed back from the index becomes the last good one; publish takes back a wheel that did not
install back, so a failed night never replaces the index's newest.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from build_kernel import atomic, gpus, log, stages
from build_kernel import lock as pins
from build_kernel.errors import BuildKernelError, Interrupted, PatchError
from build_kernel.nightly import facts, retention, series_choice, state, upstream
from build_kernel.nightly import record as records
from build_kernel.plan import Plan
from build_kernel.series import load_series

INTERRUPTED_REASON = "the night did not end (stopped, killed or the host went down): the same command resumes it"


@dataclass(frozen=True)
class Options:
    state_dir: Path
    night: str  # YYYY-MM-DD
    ref: str | None = None  # --upstream
    keep: int = retention.DEFAULT_KEEP
    to: str | None = None  # --to: the publish target (else the recipe's [publish] target)
    dry_run: bool = False
    offline: bool = False


@dataclass
class Result:
    record: dict[str, Any]
    exit_code: int = 0
    dry_run: bool = False


def today() -> str:
    return dt.datetime.now(dt.timezone.utc).date().isoformat()


class _NightLog:
    """The night's own lines (what it decided and why), on the console and in `<state>/logs/<night>.log`."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.path: Path | None = None

    def __call__(self, line: str) -> None:
        log.info(line)
        self.lines.append(line)
        if self.path is not None:
            atomic.write_text(self.path, "\n".join(self.lines) + "\n")

    def to(self, path: Path) -> None:
        self.path = path
        if path.is_file():  # a resumed night: its first part's lines stay above
            self.lines = [*path.read_text().splitlines(), *self.lines]
        atomic.write_text(path, "\n".join(self.lines) + "\n")


def for_night(plan: Plan, commit: str, version: str, night: str) -> Plan:
    """The plan of tonight: the recipe at `commit` with series `version`, the wheel versioned for `night`."""
    r = plan.recipe
    raw = {**r.raw, "source": {**r.raw.get("source", {}), "commit": commit},
           "patches": {**r.raw.get("patches", {}), "version": version}}
    recipe = replace(r, source=replace(r.source, commit=commit), patches=replace(r.patches, version=version), raw=raw)
    series = load_series(recipe.series_dir)
    # The series choice checked that this version applies whole at `commit` (what `patch check --commit` tells before
    # a commit goes into info.toml's applies_to_commits): tonight's commit is one it was made for, in this plan only.
    if series.applies_to_commits and commit not in series.applies_to_commits:
        series = replace(series, applies_to_commits=(*series.applies_to_commits, commit))
    return replace(plan, recipe=recipe, series=series, version_dev=night.replace("-", ""))


def _skeleton(plan: Plan, opts: Options, started: str, tonight: dict[str, Any]) -> dict[str, Any]:
    return {"schema": records.SCHEMA, "recipe": plan.recipe.name, "night": opts.night, "started": started,
            "finished": None, "outcome": "interrupted", "reason": INTERRUPTED_REASON, "upstream": tonight,
            "series": {"name": None, "version": None, "retired": [], "conflict": None}, "lock_changes": [],
            "build": None, "tests": {"ran": False, "why_not": "nothing built tonight", "per_file": {}}, "wheel": None,
            "logs": {}}


def _finish(state_dir: Path, record: dict[str, Any], outcome: str, reason: str) -> dict[str, Any]:
    record.update(outcome=outcome, reason=reason, finished=state.now())
    if outcome != "built":  # the index's newest, which tonight left as it was
        record["newest_wheel"] = ((state.last_good(state_dir) or {}).get("wheel") or {}).get("name")
    path = records.path_for(state_dir, record["night"], record["upstream"]["commit"])
    if outcome == "unchanged" and path.is_file():
        return record  # the same night run again: the record of what it did first stays (a built one, say)
    records.write(state_dir, record)  # type: ignore[arg-type]  # built as a dict; write checks the contract
    return record


def run(plan: Plan, opts: Options) -> Result:
    """One night (or, with dry_run, what it would do); the record and the exit code the command ends with."""
    if opts.dry_run:
        from build_kernel.nightly import preview

        return Result(preview.tonight(plan, opts.state_dir, opts.night, opts.ref), dry_run=True)
    with state.hold(opts.state_dir, plan.recipe.name, opts.night):
        resumed = state.current(opts.state_dir)
        if resumed is not None:
            return _resume(plan, opts, resumed)
        return _new_night(plan, opts)


def _decide(plan: Plan, opts: Options, say: _NightLog) -> tuple[upstream.Tonight, series_choice.Choice | None,
                                                               list[pins.Entry], dict[str, Any] | None]:
    """Tonight's upstream, the series choice (None: nothing new), the nightly pins that move, the last good night."""
    good = state.last_good(opts.state_dir)
    ref = upstream.followed(plan, opts.ref)
    tonight = upstream.resolve(plan, ref, good["commit"] if good else None, offline=opts.offline)
    say(f"upstream {ref}: {tonight.commit[:12]}" + (f", {tonight.commits_since} commit(s) since the last good night "
                                                    f"{tonight.previous_good[:12]}" if tonight.previous_good else
                                                    " (no good night before)"))
    moved = [e for e in pins.nightly(plan) if e.write is not None]
    for entry in moved:
        say(f"lock: {entry.line}")
    newest = series_choice.versions(plan)[0].directory.name
    if good and not tonight.new and not moved and good.get("series_version") == newest:
        return tonight, None, moved, good
    reference = plan.series
    if good and (plan.series.directory.parent / str(good.get("series_version"))).is_dir():
        reference = series_choice.series_named(plan, str(good["series_version"]))
    with log.step(f"series: the newest of {plan.recipe.patches.series} that applies at {tonight.commit[:12]}"):
        choice = series_choice.choose(plan, tonight.commit, reference=reference,
                                      good=good["commit"] if good else None, offline=opts.offline)
    return tonight, choice, moved, good


def _lock_changes(moved: list[pins.Entry]) -> list[dict[str, Any]]:
    return [{"pin": e.key, "from": e.before, "to": e.after or ""} for e in moved]


def _new_night(plan: Plan, opts: Options) -> Result:
    started, say = state.now(), _NightLog()
    tonight, choice, moved, good = _decide(plan, opts, say)
    record = _skeleton(plan, opts, started, tonight.to_dict())
    say.to(state.log_path(opts.state_dir, opts.night, tonight.commit))
    record["logs"]["night"] = str(say.path)
    record["lock_changes"] = _lock_changes(moved)
    if choice is None:
        assert good is not None
        record["series"] = {"name": f"{plan.recipe.patches.series}/{good['series_version']}",
                            "version": good["series_version"], "retired": [], "conflict": None}
        why = (f"nothing new since the last good night ({good['night']}): upstream {tonight.ref} is still at "
               f"{tonight.commit[:12]}, series {good['series_version']}, no nightly pin moved; its wheel stays the newest")
        say(why)
        return Result(_finish(opts.state_dir, record, "unchanged", why))
    record["series"] = choice.to_dict()
    if choice.retired:
        say(f"retired (upstream has them now): {', '.join(choice.retired)}")
    if choice.chosen is None:
        assert choice.conflict is not None
        c = choice.conflict
        bad = f"; first bad upstream commit {c.first_bad_commit[:12]}" if c.first_bad_commit else ""
        passed = (f" (older {', '.join(choice.downgrades)} passed over: they lack patches upstream does not have)"
                  if choice.downgrades else "")
        why = (f"no version of series {plan.recipe.patches.series} applies at {tonight.commit[:12]}{passed}: {c.patch} "
               f"({c.hunk}){bad}; nothing compiled, the index's newest wheel stays "
               + (good["wheel"]["name"] if good and good.get("wheel") else "as it was"))
        say(why)
        return Result(_finish(opts.state_dir, record, "conflict", why), PatchError.exit_code)
    for entry in moved:  # the pins move only for a night that builds with them
        assert entry.write is not None
        entry.write()
    current = {"night": opts.night, "started": started, "commit": tonight.commit, "upstream": tonight.to_dict(),
               "series": record["series"], "lock_changes": record["lock_changes"], "resumed": 0}
    state.begin(opts.state_dir, current)
    records.write(opts.state_dir, record)  # type: ignore[arg-type]  # `interrupted` until the night ends
    say(f"series {choice.chosen.name} applies: building {plan.arch_list} as the night of {opts.night}")
    return _build(plan, opts, record, say)


def _resume(plan: Plan, opts: Options, current: dict[str, Any]) -> Result:
    say = _NightLog()
    current["resumed"] = int(current.get("resumed", 0)) + 1
    state.begin(opts.state_dir, current)
    opts = replace(opts, night=current["night"])  # the night it was: its wheel's version, its record's name
    record = _skeleton(plan, opts, current["started"], current["upstream"])
    say.to(state.log_path(opts.state_dir, opts.night, current["commit"]))
    record.update(series=current["series"], lock_changes=current["lock_changes"], resumed=current["resumed"])
    record["logs"]["night"] = str(say.path)
    say(f"resuming the night of {opts.night} at {current['commit'][:12]} (series {current['series']['name']}; "
        f"resume {current['resumed']})")
    return _build(plan, opts, record, say)


def _stages(ctx: stages.Context, to: str | None, say: _NightLog) -> tuple[list[stages.Stage], Any, str | None]:
    from build_kernel.stages.publish.stage import PublishStage
    from build_kernel.stages.upstream_tests import TestStage

    found = gpus.present()
    why_not = None
    if not ctx.plan.recipe.test.paths:
        why_not = f"recipe {ctx.plan.recipe.name} names no [test] paths"
    elif not found:
        why_not = ("no GPU on this host (the driver reports none)" if found == () else
                   "no GPU on this host (no CUDA driver to ask)") + ": upstream's tests not run"
    chosen: list[stages.Stage] = []
    test_stage: Any = None
    for stage in stages.pipeline():
        if stage.name == "serve" or (stage.name == "test" and why_not):
            continue
        if stage.name == "test":
            test_stage = TestStage()
            stage = test_stage
        if stage.name == "publish":
            stage = PublishStage(to=to, in_pipeline=to is None)
        chosen.append(stage)
    if why_not:
        say(f"tests: {why_not}")
    return chosen, test_stage, why_not


def _build(plan: Plan, opts: Options, record: dict[str, Any], say: _NightLog) -> Result:
    night_plan = for_night(plan, record["upstream"]["commit"], record["series"]["version"], opts.night)
    ctx = stages.Context(night_plan, offline=opts.offline)
    chosen, test_stage, why_not = _stages(ctx, opts.to, say)
    record["tests"] = {"ran": False, "why_not": why_not, "per_file": {}}
    since = time.time()
    try:
        stages.run(ctx, chosen)
    except (KeyboardInterrupt, Interrupted):
        facts.logs(ctx, record["logs"], since)
        _finish(opts.state_dir, record, "interrupted", INTERRUPTED_REASON)
        raise
    except BuildKernelError as exc:
        facts.logs(ctx, record["logs"], since)
        if ctx.build is not None:  # built, then verify or publish failed: what the compile cost is still the night's
            record["build"] = facts.build(ctx)
        state.end(opts.state_dir)  # a failed night is over: the next one starts from the last good again
        why = f"{type(exc).__name__}: {exc.render()}; the last good wheel stays the newest"
        say(f"failed: {why}")
        return Result(_finish(opts.state_dir, record, "failed", why), exc.exit_code)
    facts.logs(ctx, record["logs"], since)
    assert ctx.build is not None
    record["build"] = facts.build(ctx)
    if test_stage is not None:
        record["tests"] = {"ran": True, "why_not": None, "per_file": facts.per_file(test_stage.record)}
    wheel = facts.wheel(ctx, opts.state_dir)
    record["wheel"] = wheel
    state.set_last_good(opts.state_dir, {"night": opts.night, "commit": record["upstream"]["commit"],
                                         "series_version": record["series"]["version"], "wheel": wheel})
    record["retention"] = retention.apply(opts.state_dir, plan, opts.keep, to=opts.to, say=say)
    state.end(opts.state_dir)
    why = f"built {wheel['name']}" + (f", published to {wheel['published_to']}" if wheel["published_to"] else
                                      " (no publish target: kept in the state folder)")
    say(why)
    return Result(_finish(opts.state_dir, record, "built", why))
