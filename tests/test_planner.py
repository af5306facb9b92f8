"""The planner: per-TU predictions from the recorded profile (or the default, and `plan` says which),
the ETA from recorded times, and how the build wires the recorder and the governor in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.errors import RecipeError
from build_kernel.plan import Plan, resolve
from build_kernel.resources import Resources
from build_kernel.stages.builder import ninja_order, planner, profile, scheduling
from tests.conftest import copy_series, demo_recipe_text, run_cli, write_recipe

GiB, MiB = 1024**3, 1024**2
RES = Resources(cpus=16, cpus_why="test", memory_bytes=64 * GiB, memory_why="test")
PATCHES = sorted((Path(__file__).parent.parent / "patches/minikernel/v1/series").read_text().split())


def _row(source: str, peak_mb: float, wall: float, digest: str = "d", exit_: int = 0) -> profile.Compile:
    return profile.Compile(0.0, source, "", "nvcc", digest, "sm_120a", 1, wall, wall, wall, 0.0, peak_mb, peak_mb, 5,
                           exit_, 0, int(exit_ == 137), 0, "/")


def test_plan_tus_profile_or_default_and_heaviest_first(tmp_path: Path) -> None:
    db = tmp_path / "profile.sqlite"
    profile.insert(db, [_row("csrc/light.cu", 2000, 50), _row("csrc/heavy.cu", 14000, 200),
                        _row("csrc/heavy.cu", 14500, 210), _row("csrc/mid.cu", 10000, 160)])
    tus = planner.plan_tus(db, 4 * GiB, [("csrc/light.cu", "d"), ("csrc/mid.cu", "other"), ("csrc/new.cu", None)])
    assert [(t.source, t.how) for t in tus] == [("csrc/light.cu", "profile"), ("csrc/mid.cu", "profile (other flags)"),
                                                ("csrc/new.cu", "default")]
    assert tus[2].peak_bytes == 4 * GiB and tus[2].wall_s is None
    known = planner.plan_tus(db, 4 * GiB)
    assert [t.source for t in planner.heaviest_first(known)] == ["csrc/heavy.cu", "csrc/mid.cu", "csrc/light.cu"]
    heavy = next(t for t in known if t.source == "csrc/heavy.cu")
    assert heavy.peak_bytes == int(14500 * MiB) and heavy.runs == 2
    assert "14.2 GB, 210 s (profile, 2 run(s))" in heavy.describe()


def test_shipped_peaks_predict_what_this_machine_has_not_compiled(project: Path, tmp_path: Path) -> None:
    db = tmp_path / "profile.sqlite"
    profile.insert(db, [_row("csrc/light.cu", 2000, 50)])
    shipped = {"csrc/light.cu": (40.0, 9.0), "csrc/heavy.cu": (300.0, 14.0)}
    tus = {t.source: t for t in planner.plan_tus(db, 4 * GiB, shipped=shipped)}
    # This machine's own run wins; the shipped profile's peak covers the TU it has not compiled yet.
    assert (tus["csrc/light.cu"].how, tus["csrc/light.cu"].peak_bytes) == ("profile", int(2000 * MiB))
    assert (tus["csrc/heavy.cu"].how, tus["csrc/heavy.cu"].peak_bytes, tus["csrc/heavy.cu"].wall_s) == (
        "shipped profile", 14 * GiB, 300.0)
    # Through a recipe: the order profile's peak_gb column reaches the governor and `plan`.
    copy_series(project, PATCHES, "v1")
    (project / "recipes" / "r.profile.csv").write_text("# measured\nsource,seconds,peak_gb\ncsrc/activation.cu,30,6.5\n"
                                                      "csrc/comm/comm.cu,2,\n")
    path = write_recipe(project, "r", demo_recipe_text(extra_build='order_profile = "r.profile.csv"\n'))
    plan = resolve(recipe.load(str(path)), env={}, resources=RES, cache_dir=tmp_path / "cache")
    assert scheduling.shipped_tus(plan) == {"csrc/activation.cu": (30.0, 6.5)}  # a row without a peak gives none
    chosen = scheduling.choose(plan, "1.13.2", tmp_path / "work")
    assert chosen.governor is not None and chosen.governor.predictions["csrc/activation.cu"] == int(6.5 * GiB)
    assert "0 TU(s) predicted from the profile, 1 from the shipped profile" in chosen.why


def test_eta_from_recorded_times() -> None:
    tus = [planner.TU("a.cu", GiB, 100.0, "profile", 1), planner.TU("b.cu", GiB, 30.0, "profile", 1),
           planner.TU("c.cu", GiB, 30.0, "profile", 1), planner.TU("d.cu", GiB, None, "default", 0)]
    assert planner.eta_s(tus, [], jobs=4) == 100.0  # the longest left bounds it
    assert planner.eta_s(tus, ["a.cu"], jobs=1) == 60.0
    assert planner.eta_s(tus, ["a.cu", "b.cu", "c.cu"], jobs=2) is None
    eta = planner.EtaFromLines(tus, jobs=1)
    assert eta("[1/9] Building CUDA object CMakeFiles/k.dir/csrc/b.cu.o") == 130.0
    assert eta("[2/9] Linking CXX shared module k.so") == 130.0 and eta.done == {"b.cu"}


def _plan(project: Path, tmp_path: Path, extra: str = "", name: str = "r") -> Plan:
    if not (project / "patches" / "minikernel" / "v1").is_dir():
        copy_series(project, PATCHES, "v1")
    path = write_recipe(project, name, demo_recipe_text(extra_build=extra))
    return resolve(recipe.load(str(path)), env={}, resources=RES, cache_dir=tmp_path / "cache")


def test_recorder_composes_with_the_cache_launcher(project: Path, tmp_path: Path) -> None:
    plan = _plan(project, tmp_path)
    src = tmp_path / "src"
    out = scheduling.launcher_defines(plan, "/py", src, {"CMAKE_CUDA_COMPILER_LAUNCHER": "/usr/bin/sccache", "X": "1"})
    head = f"/py;-S;{scheduling.RECORDER};--db;{tmp_path / 'cache' / 'profile.sqlite'};--project;example:minikernel;--strip;{src};--"
    assert out["CMAKE_CUDA_COMPILER_LAUNCHER"] == f"{head};/usr/bin/sccache"
    assert out["CMAKE_CXX_COMPILER_LAUNCHER"] == head and out["X"] == "1"


def test_profile_off_leaves_the_launchers(project: Path, tmp_path: Path) -> None:
    plan = _plan(project, tmp_path, "profile = false\n")
    assert scheduling.launcher_defines(plan, "/py", tmp_path, {"CMAKE_CXX_COMPILER_LAUNCHER": "ccache"}) == {
        "CMAKE_CXX_COMPILER_LAUNCHER": "ccache"}


def test_governor_falls_back_on_old_ninja_and_says_so(project: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(project, tmp_path, 'scheduler = "governor"\n')
    old = scheduling.choose(plan, "1.12.1", tmp_path / "work")
    assert old.governor is None and "needs ninja >= 1.13" in old.why and plan.jobs.derivation in old.why
    new = scheduling.choose(plan, "1.13.2", tmp_path / "work")
    assert new.governor is not None and new.why.startswith("governor:")
    assert new.governor.budget == RES.memory_bytes - int(plan.recipe.build.reserve_gb * GiB)
    with scheduling.running(new) as env:
        assert env == {"MAKEFLAGS": f"--jobserver-auth=fifo:{tmp_path / 'work' / 'jobserver' / 'jobserver.fifo'}",
                       "CMAKE_BUILD_PARALLEL_LEVEL": ""}
    # An unknown scheduler is a recipe error at load, with the file and line.
    with pytest.raises(RecipeError, match=r"bad.toml:\d+: build\.scheduler: 'fast' is not one of auto, static, governor"):
        _plan(project, tmp_path / "c", 'scheduler = "fast"\n', name="bad")


def test_auto_is_the_governor_where_ninja_follows_a_jobserver(project: Path, tmp_path: Path) -> None:
    plan = _plan(project, tmp_path)
    assert plan.recipe.build.scheduler == "auto" and scheduling.setting(plan) == ("auto", "the default")
    new = scheduling.choose(plan, "1.13.2", tmp_path / "work")
    assert new.governor is not None and new.why.startswith("governor: jobserver FIFO")
    assert "(scheduler auto: ninja 1.13.2 is a jobserver client)" in new.why
    # The governor as shipped: unknown TUs may come until the ninja wrapper lists the configured build's.
    assert new.governor.complete is False and new.governor.max_jobs == RES.cpus
    assert new.governor.edges == tmp_path / "work" / "bin" / ninja_order.EDGES
    old = scheduling.choose(plan, "1.12.1", tmp_path / "work")
    assert old.governor is None and old.why.startswith("scheduler auto: static job count, ninja 1.12.1 is older")
    # A job count given by hand stays a ceiling under the governor; the environment (--compile-scheduler) wins.
    by_hand = resolve(plan.recipe, env={}, jobs=3, resources=RES, cache_dir=tmp_path / "cache")
    gov = scheduling.choose(by_hand, "1.13.2", tmp_path / "work").governor
    assert gov is not None and gov.max_jobs == 3
    static = resolve(plan.recipe, env={"BUILD_KERNEL_SCHEDULER": "static"}, resources=RES, cache_dir=tmp_path / "cache")
    assert scheduling.choose(static, "1.13.2", tmp_path / "work").governor is None
    bad = resolve(plan.recipe, env={"BUILD_KERNEL_SCHEDULER": "fast"}, resources=RES, cache_dir=tmp_path / "cache")
    with pytest.raises(RecipeError, match=r"environment BUILD_KERNEL_SCHEDULER \(--compile-scheduler\): scheduler 'fast' is not"):
        scheduling.choose(bad, "1.13.2", tmp_path / "work")


def test_plan_says_where_each_estimate_comes_from(project: Path, tmp_path: Path) -> None:
    copy_series(project, PATCHES, "v1")
    path = write_recipe(project, "r", demo_recipe_text())
    cache = tmp_path / "cache"
    profile.insert(cache / "profile.sqlite", [_row("csrc/nvfp4_quant.cu", 900, 40)])
    proc = run_cli("--cache-dir", str(cache), "--json", "plan", "--recipe", str(path))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["scheduling"]
    assert data["tus"] == [{"source": "csrc/nvfp4_quant.cu", "peak_gb": 0.88, "wall_s": 40.0,
                            "from": "profile, 1 run(s)"}]
    assert data["scheduler"] == "auto" and data["in_effect"] in ("governor", "static") and data["default_gb"] > 0
    text = run_cli("--cache-dir", str(cache), "plan", "--recipe", str(path)).stdout
    assert "heaviest csrc/nvfp4_quant.cu 0.88 GB (profile, 1 run(s)); 1 TUs known, any other" in text
    text = run_cli("--cache-dir", str(cache), "plan", "--explain", "--recipe", str(path)).stdout
    assert "csrc/nvfp4_quant.cu: 0.88 GB (profile, 1 run(s))" in text and "any other TU" in text
    forced = json.loads(run_cli("--cache-dir", str(cache), "--json", "plan", "--recipe", str(path),
                                "--compile-scheduler", "static").stdout)["scheduling"]
    assert (forced["scheduler"], forced["in_effect"]) == ("static", "static")
    assert forced["scheduler_from"] == "environment BUILD_KERNEL_SCHEDULER (--compile-scheduler)"


@pytest.mark.slow
def test_real_build_under_the_governor_records_every_compile(project: Path, tmp_path: Path) -> None:
    """The miniature built by the CLI with scheduler = "governor": ninja follows the FIFO, the recorder (in front
    of every compile) fills the profile, and `plan` then predicts those TUs from it."""
    copy_series(project, PATCHES, "v1")
    path = write_recipe(project, "g", demo_recipe_text(extra_build='scheduler = "governor"\n'))
    cache = tmp_path / "cache"
    proc = run_cli("--cache-dir", str(cache), "--output-dir", str(project / "wheels"), "--json", "build", "--recipe",
                   str(path))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    log = Path(result["log"]).read_text()
    if "needs ninja >= 1.13" in log:
        pytest.skip("the build environment's ninja is older than 1.13")
    assert "# governor: jobserver FIFO" in log and "Jobserver mode detected: --jobserver-auth=fifo:" in log
    # ninja ran through ninja_order's script (nothing recorded yet: CMake's order, said so).
    assert "build-kernel: build.ninja: no prediction for its " in log, log
    rows = profile.rows(cache / "profile.sqlite")
    sources = {r.source for r in rows}
    assert {"csrc/activation.cu", "csrc/nvfp4_quant.cu"} <= sources, sources
    cu = next(r for r in rows if r.source == "csrc/activation.cu")
    assert cu.exit == 0 and cu.compiler == "nvcc" and "sm_120a" in cu.archs and cu.tree_peak_mb > 50
    plan = json.loads(run_cli("--cache-dir", str(cache), "--json", "plan", "--recipe", str(path)).stdout)
    assert {t["source"]: t["from"] for t in plan["scheduling"]["tus"]}["csrc/activation.cu"] == "profile, 1 run(s)"
