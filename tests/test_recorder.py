"""The profile recorder: real compiles through the launcher, and the rows they leave.

- a real nvcc compile: source, flags digest, arch, threads, wall, CPU, the tree's peak RSS;
- a real nvcc compile whose cicc the kernel's OOM killer ends inside a capped cgroup;
- a compiler killed outright by SIGKILL: signal 9 recorded, 137 passed on, a line the runner reads;
- what the planner reads back (percentile, OOM-killed peaks as lower bounds, the default).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_kernel.stages.builder import profile, recorder, runner
from tests.test_oom import (
    GXX_CAP,
    HEAVY_CC,
    HEAVY_CU,
    NVCC_CAP,
    NVCC_HEAVY,
    in_cgroup,
    memory_cgroup,
    nvcc_gencode,
    oom_kills,
)

__all__ = ["nvcc_gencode"]  # a fixture, shared with test_oom
MiB = 1024 * 1024
RECORDER = [sys.executable, "-S", recorder.__file__]


def _cmake_nvcc(root: str, gencode: str, threads: int = 1) -> list[str]:
    """An nvcc command as CMake's Ninja generator writes it, for a build under `root`."""
    return ["/usr/local/cuda/bin/nvcc", "-forward-unknown-to-host-compiler", "-DENABLE_NVFP4=1",
            f"-I{root}/src/include", "-isystem", f"{root}/src/third_party", "-O3", "-std=c++17", "-gencode", gencode,
            "--threads", str(threads), "-MD", "-MT", "CMakeFiles/k.dir/csrc/gemm.cu.o", "-MF",
            "CMakeFiles/k.dir/csrc/gemm.cu.o.d", "-x", "cu", "-c", f"{root}/src/csrc/gemm.cu", "-o",
            "CMakeFiles/k.dir/csrc/gemm.cu.o"]


def test_describe_is_stable_across_build_folders() -> None:
    code = "arch=compute_120a,code=sm_120a"
    a = recorder.describe(_cmake_nvcc("/c/build/k1", code), strip=["/c/build/k1/src"])
    b = recorder.describe(["sccache", *_cmake_nvcc("/c/build/k2", code)], strip=["/c/build/k2/src"])
    assert a == b
    assert (a.source, a.compiler, a.archs, a.threads) == ("csrc/gemm.cu", "nvcc", "sm_120a", 1)
    assert a.output == "CMakeFiles/k.dir/csrc/gemm.cu.o"
    other = recorder.describe(_cmake_nvcc("/c/build/k1", code, threads=4), strip=["/c/build/k1/src"])
    assert other.flags_digest != a.flags_digest and other.threads == 4
    many = recorder.describe(["nvcc", "-gencode", "arch=compute_90a,code=[sm_90a,compute_90a]", "-gencode",
                              "arch=compute_120a,code=sm_120a", "-c", "x.cu"])
    assert many.archs == "sm_120a,sm_90a"


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          check=False)


@pytest.mark.slow
def test_records_a_real_nvcc_compile(nvcc_gencode: tuple[str, str], tmp_path: Path) -> None:
    nvcc, gencode = nvcc_gencode
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "k.cu"
    source.write_text(HEAVY_CU)
    db = tmp_path / "profile.sqlite"
    cmd = [nvcc, "-O2", "-gencode", gencode, "--threads", "1", "-DCOUNT=500", "-c", str(source), "-o",
           str(tmp_path / "k.o")]
    proc = _run([*RECORDER, "--db", str(db), "--strip", str(tmp_path / "src"), "--", *cmd])
    assert proc.returncode == 0, proc.stdout
    [row] = profile.rows(db)
    assert (row.source, row.output, row.compiler, row.exit, row.signal, row.oom_kill) == (
        "k.cu", str(tmp_path / "k.o"), "nvcc", 0, 0, 0)
    assert row.archs == gencode.split("code=")[1] and row.threads == 1
    assert row.flags_digest == recorder.describe(cmd, [str(tmp_path / "src")]).flags_digest
    assert 0.5 < row.wall_s < 120 and 0.3 < row.cpu_s <= row.wall_s * 2 + 1
    # nvcc + cicc/cudafe++/ptxas/fatbinary: the tree, not nvcc alone (a few MB) is what was measured.
    assert row.peak_procs >= 2 and row.tree_peak_mb >= row.max_rss_mb > 50
    assert (tmp_path / "k.o").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.xdist_group("memory")  # a memory cap: one xdist worker with test_oom's (tests/xdist_groups.py)
def test_records_a_compile_killed_by_a_real_cgroup_oom(nvcc_gencode: tuple[str, str], tmp_path: Path) -> None:
    """cicc, inside a 320 MiB cgroup, wants ~660 MB: the kernel kills it; the row says so."""
    nvcc, gencode = nvcc_gencode
    source, db = tmp_path / "heavy.cu", tmp_path / "profile.sqlite"
    source.write_text(HEAVY_CU)

    def compile_(count: int) -> list[str]:
        return [*RECORDER, "--db", str(db), "--interval", "0.05", "--", nvcc, "-gencode", gencode,
                f"-DCOUNT={count}", "-c", str(source), "-o", str(tmp_path / "heavy.o")]

    warm = _run(compile_(1))  # page cache charged outside the capped group (see test_oom)
    assert warm.returncode == 0, warm.stdout
    with memory_cgroup(NVCC_CAP, "recorder-oom") as group:
        heavy = _run(in_cgroup(group, compile_(NVCC_HEAVY)))
        kills = oom_kills(group)
    assert kills >= 1, heavy.stdout
    light, killed = profile.rows(db)
    assert light.exit == 0 and light.oom_kill == 0
    # dash (Debian's /bin/sh) forks cicc and reports its SIGKILL as exit 137; bash makes nvcc exit 9.
    assert killed.exit in (137, 9) and heavy.returncode == killed.exit, heavy.stdout
    assert killed.oom_kill == 1 and killed.cgroup_oom_kills >= 1
    assert killed.tree_peak_mb > light.tree_peak_mb
    assert runner.oom_killed(heavy.stdout) is not None
    est = profile.estimate([light, killed], str(source), killed.flags_digest, default_mb=4096)
    assert est.source == "profile" and est.peak_mb >= killed.tree_peak_mb  # the kill raises the estimate


@pytest.mark.slow
def test_oom_kill_of_a_step_named_only_in_the_compilers_words(tmp_path: Path) -> None:
    """g++ survives its cc1plus's kill and exits 1; the cgroup is not the recorder's own (only the compile
    was moved into it): what marks the row is g++'s `Killed signal terminated program cc1plus`."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++")
    source, db = tmp_path / "heavy.cc", tmp_path / "p.sqlite"
    source.write_text(HEAVY_CC)
    light = tmp_path / "light.cc"
    light.write_text(HEAVY_CC.replace("5000", "1"))
    subprocess.run([gxx, "-std=c++17", "-c", str(light), "-o", str(tmp_path / "light.o")], check=True)  # page cache
    with memory_cgroup(GXX_CAP, "recorder-gxx") as group:
        proc = _run([*RECORDER, "--db", str(db), "--", *in_cgroup(group, ["timeout", "-s", "KILL", "120", gxx,
                     "-std=c++17", "-c", str(source), "-o", str(tmp_path / "heavy.o")])])
        kills = oom_kills(group)
    [row] = profile.rows(db)
    assert kills >= 1 and "Killed signal terminated program cc1plus" in proc.stdout  # passed through
    assert (row.exit, row.signal, row.oom_kill, row.cgroup_oom_kills) == (1, 0, 1, 0) and proc.returncode == 1
    assert row.source == str(source) and row.compiler == "sh"


ALLOCATE = "import time; b = bytearray({n}); b[::4096] = b'x' * len(b[::4096]); time.sleep(5)"


@pytest.mark.slow
def test_sigkilled_compiler_is_signal_9_and_exit_137(tmp_path: Path) -> None:
    db = tmp_path / "p.sqlite"
    with memory_cgroup(200 * MiB, "recorder-kill") as group:
        proc = _run(in_cgroup(group, [*RECORDER, "--db", str(db), "--", sys.executable, "-c",
                                      ALLOCATE.format(n=400 * MiB), "fake.cu"]), timeout=60)
    [row] = profile.rows(db)
    assert (row.exit, row.signal, row.oom_kill) == (-9, 9, 1) and proc.returncode == 137
    name = Path(sys.executable).name
    assert runner.oom_killed(proc.stdout) == f"build-kernel recorder: {name} (fake.cu) killed by signal 9"
    assert 100 < row.tree_peak_mb < 220


def _row(peak: float, *, exit_: int = 0, digest: str = "d1", wall: float = 10.0) -> profile.Compile:
    return profile.Compile(0.0, "k.cu", "k.o", "nvcc", digest, "sm_120a", 1, wall, wall, wall, 0.0, peak, peak, 5,
                           exit_, 9 if exit_ else 0, int(exit_ != 0), 0, "/")


def test_estimate_percentile_flags_and_default(tmp_path: Path) -> None:
    runs = [_row(p) for p in (1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800, 5000)]
    assert profile.estimate(runs, "k.cu", "d1", default_mb=4096).peak_mb == 1800  # p90, not the outlier
    assert profile.estimate(runs, "k.cu", "d2", default_mb=4096).source == "profile (other flags)"
    assert profile.estimate(runs, "other.cu", "d1", default_mb=4096) == profile.Estimate(4096, None, 0, "default")
    killed = profile.estimate([_row(900), _row(2500, exit_=137)], "k.cu", "d1", default_mb=4096)
    assert killed.peak_mb == 2500 and killed.wall_s == 10.0
    db = tmp_path / "p.sqlite"
    profile.insert(db, runs[:3])
    assert profile.rows(db) == runs[:3] and profile.rows(db, "nope.cu") == []


def test_recorder_starts_without_the_package(tmp_path: Path) -> None:
    """Run by path with -S (no site-packages), it cannot import build_kernel: it needs only the stdlib,
    which keeps its start-up (paid once per compile) near the interpreter's own."""
    proc = subprocess.run([*RECORDER, "--db", str(tmp_path / "p.sqlite"), "--", "true"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    [row] = profile.rows(tmp_path / "p.sqlite")
    assert row.compiler == "true" and row.exit == 0
    failing = subprocess.run([*RECORDER, "--db", str(tmp_path / "p.sqlite"), "--", "false"], check=False)
    assert failing.returncode == 1 and profile.rows(tmp_path / "p.sqlite")[-1].exit == 1


# The profile's table as recorded before rows said whose compile they were (19 columns, no `project`).
_OLD_TABLE = ("CREATE TABLE compiles (id INTEGER PRIMARY KEY, at REAL, source TEXT, output TEXT, compiler TEXT, "
              "flags_digest TEXT, archs TEXT, threads INTEGER, wall_s REAL, cpu_s REAL, user_s REAL, sys_s REAL, "
              "tree_peak_mb REAL, max_rss_mb REAL, peak_procs INTEGER, exit INTEGER, signal INTEGER, oom_kill INTEGER, "
              "cgroup_oom_kills INTEGER, cwd TEXT)")


def test_two_projects_in_one_cache_keep_their_own_predictions(tmp_path: Path) -> None:
    """Sources are named relative to the tree, so two projects' `csrc/kernel.cu` met in one profile and each
    was predicted from the other's compiles. Rows now say whose they are; a moved checkout is the same project;
    a profile written before that is still read."""
    import sqlite3

    from build_kernel.stages.builder import planner, scheduling

    db = tmp_path / "cache" / "profile.sqlite"
    db.parent.mkdir()
    old = sqlite3.connect(db)
    old.execute(_OLD_TABLE)
    old.execute("INSERT INTO compiles (at, source, output, compiler, flags_digest, archs, threads, wall_s, cpu_s, "
                "user_s, sys_s, tree_peak_mb, max_rss_mb, peak_procs, exit, signal, oom_kill, cgroup_oom_kills, cwd) "
                "VALUES (0, 'csrc/old.cu', 'old.o', 'nvcc', 'd', 'sm_120a', 1, 30, 30, 30, 0, 3000, 3000, 5, 0, 0, 0, "
                "0, '/')")
    old.commit()
    old.close()
    heavy = scheduling.project_key("https://github.com/sgl-project/sglang.git", "sgl-kernel")
    light = scheduling.project_key("https://github.com/Dao-AILab/flash-attention", "")
    assert heavy == scheduling.project_key("git@github.com:sgl-project/sglang", "sgl-kernel/") == \
        "github.com/sgl-project/sglang/sgl-kernel"
    assert scheduling.project_key("/home/a/minikernel/") == scheduling.project_key("file:///srv/minikernel.git") == \
        "local:minikernel"
    assert scheduling.project_key("example:minikernel") == "example:minikernel"

    def compile_in(tree: Path, project: str, mb: int) -> None:
        (tree / "csrc").mkdir(parents=True, exist_ok=True)
        proc = _run([*RECORDER, "--db", str(db), "--project", project, "--strip", str(tree), "--", sys.executable,
                     "-c", ALLOCATE.format(n=mb * MiB).replace("time.sleep(5)", "time.sleep(1)"),
                     str(tree / "csrc" / "kernel.cu")])
        assert proc.returncode == 0, proc.stdout

    compile_in(tmp_path / "build" / "k1" / "src", heavy, 400)
    compile_in(tmp_path / "build" / "k2" / "src", light, 20)
    compile_in(tmp_path / "moved" / "src", heavy, 400)  # the same project, checked out and built elsewhere

    def predicted(project: str, source: str) -> planner.TU:
        [tu] = planner.plan_tus(db, 4 << 30, [(source, None)], project=project)
        return tu

    assert predicted(heavy, "csrc/kernel.cu").runs == 2 and predicted(heavy, "csrc/kernel.cu").peak_bytes > 400 * MiB
    assert predicted(light, "csrc/kernel.cu").runs == 1 and predicted(light, "csrc/kernel.cu").peak_bytes < 200 * MiB
    # The old row has no project: read for both (each has no row of its own for that source).
    assert predicted(light, "csrc/old.cu").peak_bytes == predicted(heavy, "csrc/old.cu").peak_bytes == 3000 * MiB
    # What a build of one project starts from lists none of the other's TUs, and orders by its own times.
    assert sorted(t.source for t in planner.plan_tus(db, 4 << 30, project=light)) == ["csrc/kernel.cu", "csrc/old.cu"]
    assert [r.project for r in profile.rows(db)] == ["", heavy, light, heavy]
