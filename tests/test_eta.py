"""Progress that tells the truth. Seen: a 9.0a build of the pruned recipe, whose order profile was measured
for 12.0a, showed "eta 49 s" from 291 s to 340 s of a 350 s build: the estimate neither re-estimated from
the work done nor said that the profile was for other archs. Then, with that rescaling (H200, 2026-12-03):
"eta 151 s" from 12 s to 220 s and "eta 655 s" at 486 s of a 494 s build (bench/eta/eta_replay.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.plan import resolve
from build_kernel.stages.builder import planner, scheduling
from tests.conftest import REPO_ROOT
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
