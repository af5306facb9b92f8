"""Progress that tells the truth. Seen: a 9.0a build of the pruned recipe, whose order profile was measured
for 12.0a, showed "eta 49 s" from 291 s to 340 s of a 350 s build: the estimate neither re-estimated from
the work done nor said that the profile was for other archs."""

from __future__ import annotations

from pathlib import Path

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
    clock.now = 200.0  # a.cu took twice its recorded 100 s: b.cu will too
    assert eta("[1/2] Building CUDA object csrc/a.cu.o") == 100.0
    clock.now = 250.0  # no line for 50 s: the estimate does not stand still
    assert eta.remaining() == 50.0 and "eta 50 s" in eta.describe()
    assert "x2.0 from the work done" in eta.describe()
    clock.now = 330.0  # past the estimate: said, and still moving
    assert eta.remaining() == 0.0 and "30 s over the estimate" in eta.describe()
    clock.now = 331.0
    assert "31 s over the estimate" in eta.describe()


def test_eta_without_work_done_keeps_the_recorded_times() -> None:
    clock = Clock()
    eta = planner.EtaFromLines(_tus(), jobs=2, clock=clock)
    clock.now = 1.0
    assert eta("[1/9] Building CXX object csrc/other.cc.o") == 100.0  # nothing of the profile done yet
    assert "from the work done" not in eta.describe()


def test_the_shipped_profile_says_what_it_was_measured_for(tmp_path: Path) -> None:
    shipped = REPO_ROOT / "recipes/nightly-cu130-pruned.profile.csv"
    measured = planner.measured_for(shipped)
    assert measured["archs"] == "12.0a" and measured["commit"].startswith("6ffc74ef") and measured["series"] == "sm120/v6"
    # An overlay of the pruned recipe built for 9.0a (fp4 off): the ETA's note says the profile is for 12.0a.
    overlay = tmp_path / "site" / "hopper.toml"
    overlay.parent.mkdir()
    overlay.write_text('extends = "nightly-cu130-pruned"\n[build]\narch = ["9.0a"]\nfp4 = false\n')
    plan = resolve(recipe.load(str(overlay)), env={}, resources=RES, cache_dir=tmp_path / "cache")
    note = scheduling.profile_note(plan)
    # The profile was measured with series v6; the recipe has moved to v8 (0009, 0010) since, and the note says both.
    assert note == ("the shipped order profile nightly-cu130-pruned.profile.csv was measured for 12.0a, series "
                    "sm120/v6, this build is for 9.0a, series sm120/v8: the ETA re-estimates from the work done")
    same = resolve(recipe.load("nightly-cu130-pruned"), env={}, resources=RES, cache_dir=tmp_path / "cache")
    assert scheduling.profile_note(same) == (
        "the shipped order profile nightly-cu130-pruned.profile.csv was measured for series sm120/v6, this build "
        "is for series sm120/v8: the ETA re-estimates from the work done")
    hopper = resolve(recipe.load(str(overlay)), env={}, resources=RES, cache_dir=tmp_path / "cache", arch="12.0a")
    assert "12.0a" not in (scheduling.profile_note(hopper) or "12.0a")  # same archs: only the series is named
    eta = planner.EtaFromLines(_tus(), jobs=1, clock=Clock(), note="profile for 12.0a")
    assert eta.describe().endswith("(profile for 12.0a)")
