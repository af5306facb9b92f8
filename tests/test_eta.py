"""Progress that tells the truth. Seen: a 9.0a build of the pruned recipe, whose order profile was measured
for 12.0a, showed "eta 49 s" from 291 s to 340 s of a 350 s build: the estimate neither re-estimated from
the work done nor said that the profile was for other archs. Then, with that rescaling (H200, 2026-12-03):
"eta 151 s" from 12 s to 220 s and "eta 655 s" at 486 s of a 494 s build (bench/eta/eta_replay.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.plan import Plan, resolve
from build_kernel.stages.builder import planner, scheduling
from tests.conftest import REPO_ROOT, run_cli
from tests.test_fetch_patch import RES


class Clock:
    """The build's seconds, set by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tus() -> list[planner.TU]:
    return [planner.TU("csrc/a.cu", 1, 100.0, "shipped profile", 0), planner.TU("csrc/b.cu", 1, 50.0, "shipped profile", 0)]


def test_eta_rescales_from_the_work_done_and_counts_down_between_lines() -> None:
    clock = Clock()
    eta = planner.EtaFromLines(_tus(), jobs=1, clock=clock)
    assert eta.remaining() == 150.0
    eta("[0/3] Re-checking globbed directories...")  # ninja's first line: the compile clock starts
    clock.now = 200.0  # a.cu took twice its recorded 100 s
    # Two thirds of the predicted work done: two thirds the build's pace (b.cu's 50 s at x2), one third the
    # profile (b.cu's 50 s as recorded).
    assert eta("[1/3] Building CUDA object csrc/a.cu.o") == pytest.approx(50 / 3 + 2 / 3 * 100)
    assert "x2.0 from the work done" in eta.describe()
    clock.now = 230.0  # a line that names no TU (a link) does not stop the countdown
    assert eta("[2/3] Linking CUDA shared module k.so") == pytest.approx(250 / 3)
    assert eta.remaining() == pytest.approx(250 / 3 - 30) and "eta 53 s" in eta.describe()
    clock.now = 200 + 250 / 3 + 30  # past the estimate: said, and still moving
    assert eta.remaining() == 0.0 and "30 s over the estimate" in eta.describe()
    clock.now += 1
    assert "31 s over the estimate" in eta.describe()


def test_eta_without_work_done_keeps_the_recorded_times() -> None:
    clock = Clock()
    eta = planner.EtaFromLines(_tus(), jobs=2, clock=clock)
    clock.now = 1.0
    assert eta("[1/9] Building CXX object csrc/other.cc.o") == 100.0  # nothing of the profile done yet
    assert "from the work done" not in eta.describe()


def test_eta_counts_this_builds_compiles_and_finds_a_dependencys(tmp_path: Path) -> None:
    # Seen on the H200 (bench/eta/results/eta-replay.json): a 9.0a build on a profile measured for 12.0a printed
    # "eta 655 s" at 486 s of a 494 s build. The profile's TUs this build never compiles (z.cu) never finished,
    # and a dependency's TU, compiled from a folder with a hash in its name, was never seen to finish.
    tus = [*_tus(), planner.TU("csrc/z.cu", 1, 40.0, "shipped profile", 0)]
    edges = tmp_path / "ninja-edges.json"
    edges.write_text(json.dumps({"sources": ["csrc/a.cu", "csrc/b.cu", "deps/repo-x/src/k.cu"]}))
    clock = Clock()
    eta = planner.EtaFromLines(tus, jobs=1, clock=clock, edges=edges)
    eta("[0/4] Re-checking globbed directories...")
    # k.cu is unknown to the profile: the median of what it knows, until the build's own pace says more.
    assert eta.work == {"csrc/a.cu": 100.0, "csrc/b.cu": 50.0, "deps/repo-x/src/k.cu": 100.0}
    assert "(profile knows 2 of 3 compiles)" in eta.describe()
    clock.now = 40.0
    eta("[1/4] Building CUDA object CMakeFiles/x.dir/tmp/c/deps/repo-x-0123456789ab-01234567/src/k.cu.o")
    assert eta.done == {"deps/repo-x/src/k.cu"}
    for i, name in enumerate(("a", "b"), 2):
        clock.now += 40
        eta(f"[{i}/4] Building CUDA object CMakeFiles/x.dir/csrc/{name}.cu.o")
    assert eta.remaining() == 0.0 and "over the estimate" not in eta.describe()  # z.cu is not this build's


def test_an_unknown_tu_costs_what_finished_ones_took(tmp_path: Path) -> None:
    tus = [planner.TU("csrc/a.cu", 1, 10.0, "shipped profile", 0), planner.TU("csrc/b.cu", 1, 10.0, "shipped profile", 0)]
    edges = tmp_path / "ninja-edges.json"
    edges.write_text(json.dumps({"sources": ["csrc/a.cu", "csrc/b.cu", "csrc/k.cu"]}))
    clock = Clock()
    eta = planner.EtaFromLines(tus, jobs=1, clock=clock, edges=edges)
    eta("[0/3] Re-checking globbed directories...")
    clock.now = 40.0  # a.cu took 40 s of the one job: k.cu, which the profile does not know, counts 40 s too
    got = eta("[1/3] Building CUDA object csrc/a.cu.o")
    assert eta.work["csrc/k.cu"] == 40.0 and eta.pace == 4.0
    # A sixth of the predicted work done (10 of 60): 5/6 the recorded 50 s left, 1/6 the pace's 200 s.
    assert got == pytest.approx(5 / 6 * 50 + 1 / 6 * 200)


def test_the_shipped_profile_says_what_it_was_measured_for(tmp_path: Path) -> None:
    shipped = REPO_ROOT / "recipes/nightly-cu130.profile.csv"
    measured = planner.measured_for(shipped)
    assert measured["archs"] == "12.0a" and measured["commit"].startswith("6ffc74ef") and measured["series"] == "sm120/v6"
    # An overlay of the pruned recipe built for 9.0a (fp4 off): the ETA's note says the profile is for 12.0a.
    overlay = tmp_path / "site" / "hopper.toml"
    overlay.parent.mkdir()
    overlay.write_text('extends = "nightly-cu130"\n[build]\narch = ["9.0a"]\n')
    plan = resolve(recipe.load(str(overlay)), env={}, resources=RES, cache_dir=tmp_path / "cache")
    note = scheduling.profile_note(plan)
    # The profile was measured with series v6; the recipe has moved to v8 (0009, 0010) since, and the note says both.
    assert note == ("the shipped order profile nightly-cu130.profile.csv was measured for 12.0a, series "
                    "sm120/v6, this build is for 9.0a, series sm120/v8: the ETA re-estimates from the work done")
    same = resolve(recipe.load("nightly-cu130"), env={}, resources=RES, cache_dir=tmp_path / "cache")
    assert scheduling.profile_note(same) == (
        "the shipped order profile nightly-cu130.profile.csv was measured for series sm120/v6, this build "
        "is for series sm120/v8: the ETA re-estimates from the work done")
    hopper = resolve(recipe.load(str(overlay)), env={}, resources=RES, cache_dir=tmp_path / "cache", arch="12.0a")
    assert "12.0a" not in (scheduling.profile_note(hopper) or "12.0a")  # same archs: only the series is named
    eta = planner.EtaFromLines(_tus(), jobs=1, clock=Clock(), note="profile for 12.0a")
    assert eta.describe().endswith("(profile for 12.0a)")


def test_no_estimate_from_the_whole_profile_before_the_build_lists_its_compiles(tmp_path: Path) -> None:
    # Seen on the 2-core box (2026-12-06): "[0/2] 6 s, eta 5106 s" for a build of ~900 s, the sum of every TU the
    # machine's profile knows (other archs, pins and series), before ninja_order had listed this build's.
    tus = [*_tus(), planner.TU("csrc/z.cu", 1, 4000.0, "machine profile", 0)]
    edges = tmp_path / "ninja-edges.json"
    clock = Clock()
    eta = planner.EtaFromLines(tus, jobs=1, clock=clock, edges=edges)
    assert eta.remaining() is None and eta("[0/2] Re-checking globbed directories...") is None
    edges.write_text(json.dumps({"sources": ["csrc/a.cu", "csrc/b.cu"]}))  # the wrapper lists them
    clock.now = 5.0
    assert eta("[1/3] Building CXX object csrc/gen.cc.o") == 150.0  # a.cu + b.cu: z.cu is not this build's
    # A build whose ninja is not wrapped lists nothing: the first compile of the profile that finishes brings
    # the profile's estimate back.
    unlisted = planner.EtaFromLines(tus, jobs=1, clock=Clock(), edges=tmp_path / "never-written.json")
    assert unlisted("[0/3] Re-checking globbed directories...") is None
    assert unlisted("[1/3] Building CUDA object csrc/b.cu.o") == 4100.0


# --- plan's forecast: how long the build's compiles will take on this host, before the build (issue 66 item 7) ---


def test_the_forecast_is_the_eta_model_with_a_list_schedule_bound_above() -> None:
    from build_kernel.stages.builder import forecast

    recorded = {"csrc/a.cu": 100.0, "csrc/b.cu": 50.0}
    # A known pair on 2 jobs: low = the progress bar's first estimate (sum over the jobs, not below the longest);
    # high = Graham's bound for any list schedule, sum/2 + (1 - 1/2) x longest.
    low, high, unknown, _, _ = forecast.estimate(recorded, ["csrc/a.cu", "csrc/b.cu"], jobs=2)
    assert (low, high, unknown) == (planner.spread([100.0, 50.0], 2), 75.0 + 50.0, 0) == (100.0, 125.0, 0)
    # An unknown compile: at the median of the known ones at the low end (as EtaFromLines counts it), at the longest
    # at the high end; and the host factor widens the high end only.
    low, high, unknown, typical, longest = forecast.estimate(recorded, ["csrc/a.cu", "csrc/b.cu", "csrc/k.cu"],
                                                             jobs=2, factor=2.0)
    assert (low, high, unknown, typical, longest) == (125.0, (250 / 2 + 50) * 2, 1, 100.0, 100.0)
    assert forecast.estimate({}, ["csrc/k.cu"], jobs=2)[:2] == (None, None)


def _cu130(tmp_path: Path) -> Plan:
    return resolve(recipe.load("nightly-cu130"), env={}, resources=RES, cache_dir=tmp_path / "cache")


def test_plan_forecasts_from_the_shipped_profile_and_says_where_it_was_measured(tmp_path: Path) -> None:
    from build_kernel.stages.builder import forecast, ninja_order

    plan = _cu130(tmp_path)
    shipped = ninja_order.read_shipped(REPO_ROOT / "recipes/nightly-cu130.profile.csv")
    f = forecast.forecast(plan)
    assert (f.compiles, f.unknown, f.jobs, f.cpus, f.factor) == (len(shipped), 0, plan.jobs.jobs, RES.cpus, 2.0)
    assert f.low_s == pytest.approx(max(sum(shipped.values()) / plan.jobs.jobs, *shipped.values()))
    m = plan.jobs.jobs
    assert f.high_s == pytest.approx((sum(shipped.values()) / m + (1 - 1 / m) * max(shipped.values())) * 2)
    assert "times from nightly-cu130.profile.csv, measured on a 16-core H200 host (15 jobs), x1-x2 for this host" \
        in f.line()
    assert "profile nightly-cu130.profile.csv was measured for series sm120/v6, this build is for series sm120/v8" \
        in f.line()


def test_compiles_the_profile_does_not_know_widen_the_range_and_are_counted(tmp_path: Path) -> None:
    from build_kernel.stages.builder import forecast, key_history, ninja_order

    plan = _cu130(tmp_path)
    before = forecast.forecast(plan)
    # The last build of this recipe for these archs listed its compiles (ninja_order's edges file): two are new.
    folder = plan.cache_dir / "build" / "0123abcd"
    key_history.record(folder, plan.recipe.name, plan.arch_list, {})
    shipped = list(ninja_order.read_shipped(REPO_ROOT / "recipes/nightly-cu130.profile.csv"))
    (folder / "bin").mkdir()
    (folder / "bin" / ninja_order.EDGES).write_text(json.dumps({"sources": [*shipped, "csrc/new_a.cu", "csrc/new_b.cu"]}))
    f = forecast.forecast(plan)
    assert (f.compiles, f.unknown, f.compiles_from) == (len(shipped) + 2, 2, "the last build's list (0123abcd)")
    assert f.low_s is not None and before.low_s is not None and f.high_s is not None and before.high_s is not None
    assert f.high_s - before.high_s > f.low_s - before.low_s > 0  # wider, above more than below
    assert f"; 2 compile(s) the profile does not know, counted at {f.typical_s:.0f}-{f.longest_s:.0f} s each" in f.line()
    # Another arch list's build is not this one's.
    nine = resolve(recipe.load("nightly-cu130"), env={}, resources=RES, cache_dir=tmp_path / "cache", arch="9.0a")
    assert forecast.forecast(nine).unknown == 0


def test_plan_shows_the_build_time_in_its_first_screen_and_in_json(tmp_path: Path) -> None:
    args = ("--cache-dir", str(tmp_path / "cache"), "plan", "--recipe", "nightly-cu130")
    text = run_cli(*args, env={"ARCH": "", "TORCH_CUDA_ARCH_LIST": ""})
    data = run_cli("--json", *args, env={"ARCH": "", "TORCH_CUDA_ARCH_LIST": ""})
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    lines = text.stdout.splitlines()
    [row] = [i for i, line in enumerate(lines) if line.startswith("build time ")]
    assert row < 28  # the first screen
    took = json.loads(data.stdout)["build_time"]
    assert lines[row].split(None, 2)[2] == took["line"]  # the same words
    assert took["low_s"] < took["high_s"] and took["compiles"] == 50 and took["unknown"] == 0
    # No profile at all (the demo records one on its first build): said, not guessed.
    demo = json.loads(run_cli("--json", "--cache-dir", str(tmp_path / "cache"), "plan", "--recipe", "demo").stdout)
    assert demo["build_time"]["low_s"] is None and demo["build_time"]["line"].startswith("not known: no compile times")
