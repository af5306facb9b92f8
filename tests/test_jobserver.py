"""The governor: ninja as a jobserver client, tokens only while memory allows, under a real cap.

A replayed workload (processes that allocate and hold their profiled peak) runs through real
ninja inside a real memory cgroup: under the governor it never reaches the cap (no OOM kill,
no hit of the limit at all); the same workload with a plain `-j` does, and is OOM-killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from build_kernel.stages.build import cgroup, jobserver
from build_kernel.stages.build.replay import Unit, write_ninja
from tests.test_oom import memory_cgroup

MiB = 1024 * 1024
NINJA = shutil.which("ninja", path=str(Path(sys.executable).parent)) or shutil.which("ninja")
# A replay is python (~10 MB) plus its block; ninja and the shells add a few MB.
OVERHEAD = 16 * MiB
CAP = 640 * MiB
RESERVE = 48 * MiB
UNITS = [Unit("heavy_a.cu", 260, 1.5), Unit("heavy_b.cu", 240, 1.5), Unit("mid_a.cu", 160, 1.2),
         Unit("mid_b.cu", 150, 1.2), Unit("light_a.cu", 60, 0.8), Unit("light_b.cu", 60, 0.8),
         Unit("light_c.cu", 50, 0.8), Unit("light_d.cu", 50, 0.8)]


def _governor(folder: Path, available: Callable[[], int], **kw: object) -> jobserver.Governor:
    preds = {u.name: int(u.mb * MiB) + OVERHEAD for u in UNITS}
    args: dict[str, object] = {"budget": CAP - RESERVE, "predictions": preds, "default": 300 * MiB,
                               "complete": True, "max_jobs": 8, "available": available, "reserve": RESERVE}
    args.update(kw)
    return jobserver.Governor(folder, **args)  # type: ignore[arg-type]


def test_supports_jobserver() -> None:
    assert jobserver.supports_jobserver("1.13.2.git.kitware.jobserver-pipe-1")
    assert jobserver.supports_jobserver("1.14.0") and not jobserver.supports_jobserver("1.12.1")
    assert not jobserver.supports_jobserver(None) and not jobserver.supports_jobserver("garbage")


def test_decide_charges_each_slot_the_heaviest_left(tmp_path: Path) -> None:
    gov = _governor(tmp_path, lambda: CAP)
    h = gov.heaviest_left(set())
    assert h == 260 * MiB + OVERHEAD
    # One heavy TU on the implicit slot: a second slot is charged the heaviest left (heavy_b).
    one = jobserver.State([jobserver.Running(1, "heavy_a.cu", 10 * MiB)], 0, 0, {"heavy_a.cu"}, CAP - 10 * MiB)
    assert gov.decide(one) == 1
    # Two heavy ones run: the third slot would be charged mid_a (176 MiB): 276+256+176 > 592 budget.
    two = jobserver.State([jobserver.Running(1, "heavy_a.cu", 270 * MiB), jobserver.Running(2, "heavy_b.cu", 250 * MiB)],
                          1, 0, {"heavy_a.cu", "heavy_b.cu"}, CAP - 520 * MiB)
    assert gov.decide(two) == 0
    # Measured memory low (something else took it): no token even where the predictions fit.
    assert gov.decide(jobserver.State([], 0, 0, set(), 100 * MiB)) == 0
    # Over budget with tokens idle in the FIFO: take them back.
    over = jobserver.State([jobserver.Running(1, "heavy_a.cu", 270 * MiB)], 3, 2, {"heavy_a.cu"}, CAP)
    assert gov.decide(over) < 0
    # Never more jobs than CPUs.
    assert _governor(tmp_path, lambda: CAP, max_jobs=1).decide(jobserver.State([], 0, 0, set(), CAP)) == 0


# A real parent named `ninja` whose child waits between fork and exec until told to go, then execs
# a command naming its TU (given by environment, so the pre-exec command line cannot name it).
_FORKER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.read(0, 1)
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", os.environ["TU"]])
os.waitpid(pid, 0)
"""


def test_a_job_seen_before_its_exec_still_counts_as_started_once_it_runs(tmp_path: Path) -> None:
    """The race of #24: ninja's child read between fork and exec shows ninja's command line."""
    ninja = tmp_path / "ninja"
    ninja.symlink_to(sys.executable)
    parent = subprocess.Popen([str(ninja), "-c", _FORKER], stdin=subprocess.PIPE, env={**os.environ, "TU": "mid_a.cu"})
    assert parent.stdin is not None
    children: list[int] = []
    try:
        gov = _governor(tmp_path / "gov", lambda: CAP, root_pid=parent.pid)
        deadline = time.monotonic() + 10
        while not (jobs := gov._scan()) and time.monotonic() < deadline:
            time.sleep(0.01)
        children = [j.pid for j in jobs]
        assert [j.key for j in jobs] == [None], "the child is seen before its exec"
        parent.stdin.write(b"x")
        parent.stdin.flush()
        while "mid_a.cu" not in jobserver._cmdline(children[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        running = gov._scan()
        assert [j.key for j in running] == ["mid_a.cu"] and gov.stats.started == ["mid_a.cu"]
        # Charged its own prediction (176 MiB), not the 300 MiB default of an unknown TU.
        assert gov.charge(running[0]) == 160 * MiB + OVERHEAD
    finally:
        for pid in children:  # the child first: the parent's waitpid then reaps it
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
        parent.stdin.close()


def _ninja(group: Path, folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    assert NINJA is not None
    return subprocess.run(cgroup.in_cgroup(group, [NINJA, "-C", str(folder), *args]), env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False)


@pytest.mark.slow
def test_governor_never_lets_a_replayed_workload_exceed_its_cap(tmp_path: Path) -> None:
    if NINJA is None or not jobserver.supports_jobserver(subprocess.run(
            [NINJA, "--version"], capture_output=True, text=True, check=False).stdout.strip()):
        pytest.skip("needs ninja >= 1.13 (a jobserver client)")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
    # Control first: the same workload with -j8 does not fit the cap (Σ peaks 1030 MiB > 640).
    plain = tmp_path / "plain"
    write_ninja(plain, UNITS)
    with memory_cgroup(CAP, "jobserver-plain") as group:
        control = _ninja(group, plain, env, "-j8")
        control_kills = cgroup.oom_kills(group)
    assert control.returncode != 0 and control_kills >= 1, control.stdout
    governed = tmp_path / "governed"
    write_ninja(governed, UNITS)
    with memory_cgroup(CAP, "jobserver-governed") as group:
        with _governor(tmp_path / "gov", lambda: cgroup.available(group)) as gov:
            result = _ninja(group, governed, {**env, "MAKEFLAGS": gov.makeflags})
        kills, hits, peak = cgroup.oom_kills(group), cgroup.limit_hits(group), cgroup.peak(group)
    assert result.returncode == 0, result.stdout
    assert "Jobserver mode detected" in result.stdout
    assert kills == 0 and hits == 0 and peak < CAP, (kills, hits, peak // MiB)
    assert all((governed / f"{u.name}.done").is_file() for u in UNITS)
    assert gov.stats.max_jobs_seen >= 3  # it did run jobs side by side, not one at a time
    assert sorted(gov.stats.started) == sorted(u.name for u in UNITS)


def test_free_memory_leaves_reclaimable_page_cache_out(tmp_path: Path) -> None:
    """What the governor reads as free: limit - (usage - inactive file cache), v1 and v2 alike."""
    from build_kernel.resources import cgroup_memory_headroom

    gib = 1024**3
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n0::/\n")
    job = tmp_path / "fs" / "memory" / "job"
    job.mkdir(parents=True)
    (job / "memory.limit_in_bytes").write_text(str(10 * gib))
    (job / "memory.usage_in_bytes").write_text(str(6 * gib))
    (job / "memory.stat").write_text(f"cache {5 * gib}\ntotal_inactive_file {4 * gib}\n")
    assert cgroup_memory_headroom(tmp_path / "fs", proc)[0] == 8 * gib
    assert cgroup.working_set(job) == 2 * gib and cgroup.available(job) == 8 * gib
