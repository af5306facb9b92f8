"""The governor: ninja as a jobserver client, tokens only while memory allows, under a real cap.

A replayed workload (processes that allocate and hold their profiled peak) runs through real
ninja inside a real memory cgroup: under the governor it never reaches the cap (no OOM kill,
no hit of the limit at all); the same workload with a plain `-j` does, and is OOM-killed. The
plain run's overlap does not depend on the machine's load: its jobs meet at a barrier before they
allocate and hold their peaks until the cap has killed one of them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from build_kernel.stages.builder import cgroup, jobserver, scheduling
from build_kernel.stages.builder import recorder as recorder_mod
from build_kernel.stages.builder.replay import Unit, write_ninja
from tests.test_oom import memory_cgroup

# Memory caps and peaks: these tests run one after another on one xdist worker (tests/xdist_groups.py).
pytestmark = pytest.mark.xdist_group("memory")

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


def _state(running: list[tuple[str, int]], tokens: int, in_pipe: int, waiting: dict[str, int], free: int) -> jobserver.State:
    return jobserver.State([jobserver.Running(i, k, rss) for i, (k, rss) in enumerate(running, 1)], tokens, in_pipe,
                           waiting, free)


def test_decide_bounds_the_slots_by_the_heaviest_still_to_run(tmp_path: Path) -> None:
    gov = _governor(tmp_path, lambda: CAP)
    every = {u.name: 1 for u in UNITS}
    rest = {k: n for k, n in every.items() if k != "heavy_a.cu"}
    # One heavy TU on the implicit slot: two slots can need heavy_a + heavy_b (532 of 592 MiB): granted.
    assert gov.decide(_state([("heavy_a.cu", 10 * MiB)], 0, 0, rest, CAP - 10 * MiB)) == 1
    # Two heavy ones run: a third slot could take mid_a (176 MiB): 276 + 256 + 176 > 592: no.
    both = {k: n for k, n in rest.items() if k != "heavy_b.cu"}
    assert gov.decide(_state([("heavy_a.cu", 270 * MiB), ("heavy_b.cu", 250 * MiB)], 1, 0, both, CAP - 520 * MiB)) == 0
    # Once heavy_a and mid_b have finished, only light TUs are left to start: three slots fit (256 + 176 + 76),
    # where charging each slot the heaviest left would not (3 x 256).
    light = {k: n for k, n in both.items() if k.startswith("light")}
    assert gov.decide(_state([("heavy_b.cu", 250 * MiB), ("mid_a.cu", 10 * MiB)], 1, 0, light, CAP - 260 * MiB)) == 1
    # With mid_b still to come, they do not (256 + 176 + 166 > 592).
    assert gov.decide(_state([("heavy_b.cu", 250 * MiB), ("mid_a.cu", 10 * MiB)], 1, 0, {**light, "mid_b.cu": 1},
                             CAP - 260 * MiB)) == 0
    # Measured memory low (something else took it): no token even where the predictions fit.
    assert gov.decide(_state([], 0, 0, every, 100 * MiB)) == 0
    # Over budget with tokens idle in the FIFO: take back just enough (4 slots of heavy..mid: 2 back).
    assert gov.decide(_state([("heavy_a.cu", 270 * MiB)], 3, 2, rest, CAP)) == -2
    # Never more jobs than CPUs.
    assert _governor(tmp_path, lambda: CAP, max_jobs=1).decide(_state([], 0, 0, every, CAP)) == 0


def test_tus_no_profile_knows_count_as_the_default_until_the_build_lists_its_compiles(tmp_path: Path) -> None:
    """Run c of #22: under a small cap, the default charged for TUs that might still come held a 32 GiB
    build to 3 compiles at once. The ninja wrapper's list of the configured build's compiles ends that."""
    edges = tmp_path / "edges.json"
    gov = _governor(tmp_path, lambda: CAP, complete=False, edges=edges)  # 300 MiB for a TU no profile knows
    gov._read_edges()
    heavy = [("heavy_a.cu", 10 * MiB)]
    # Not configured yet: any number of unknown TUs may come, each 300 MiB: 3 x 300 > 592 for three slots.
    early = _state(heavy, 1, 0, {u.name: 1 for u in UNITS[1:]}, CAP)
    assert gov.bound(early, 3) == 900 * MiB and gov.decide(early) == 0
    # The build compiles heavy_a, the light TUs (light_a twice) and one TU no profile knows; neither
    # heavy_b nor the mid ones (a profile's TU this build does not compile counts for nothing).
    names = ["heavy_a.cu", "light_a.cu", "light_a.cu", "light_b.cu", "light_c.cu", "new.cu"]
    edges.write_text(json.dumps({"sources": names}))
    gov._read_edges()
    assert gov.complete and gov.waiting == Counter({"heavy_a.cu": 1, "light_a.cu": 2, "light_b.cu": 1,
                                                    "light_c.cu": 1, "new.cu": 1})
    listed = _state(heavy, 1, 0, {"light_a.cu": 2, "light_b.cu": 1, "light_c.cu": 1, "new.cu": 1}, CAP)
    assert gov.bound(listed, 3) == 276 * MiB + 300 * MiB + 76 * MiB and gov.decide(listed) == 0  # new.cu
    # Once new.cu has started (and ended), only light ones are left: 276 + 76 + 76 fit.
    assert gov.decide(_state(heavy, 1, 0, {"light_a.cu": 2, "light_b.cu": 1, "light_c.cu": 1}, CAP)) == 1
    # A list that cannot be read (being written, or garbage) leaves what was known.
    edges.write_text("{not json")
    gov._read_edges()
    assert gov.complete and set(gov.predictions) == set(names)


def test_jobs_are_named_as_the_recorder_names_them(tmp_path: Path) -> None:
    """A dependency's TU is keyed `deps/<name>/...` in the profile; its command line holds its cache folder."""
    dep = tmp_path / "deps" / "repo-flashinfer-bc29697ba20b-5ba9800d"
    src = tmp_path / "src"
    strip = [str(src), f"deps/repo-flashinfer={dep}"]
    recorder = scheduling.RECORDER
    shell = f"{sys.executable} -S {recorder} --db /x.sqlite --strip {src} -- /usr/bin/nvcc -O3 -c {dep}/csrc/norm.cu -o norm.o"
    got = recorder_mod.compiled(["/bin/sh", "-c", shell], strip)
    assert got is not None and got.source == "deps/repo-flashinfer/csrc/norm.cu"
    assert recorder_mod.compiled(shell, strip) == got  # build.ninja's string, as ninja_order reads it
    assert recorder_mod.compiled(["/usr/bin/g++", "-c", f"{src}/csrc/a.cc", "-o", "a.o"], strip).source == "csrc/a.cc"
    assert recorder_mod.compiled(["ninja", "-C", "build"], strip) is None  # a child before its exec
    assert scheduling.strip_roots(src, {"FETCHCONTENT_SOURCE_DIR_REPO-FLASHINFER": str(dep), "X": "1"}) == strip


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


def test_jobs_are_the_children_of_the_real_ninja_under_a_wrapper_named_ninja(tmp_path: Path) -> None:
    """PyPI's `ninja` console entry point runs the real binary as its child: both are called ninja."""
    inner = tmp_path / "real" / "ninja"
    inner.parent.mkdir()
    inner.symlink_to(sys.executable)
    # The TU's name only in the job's own command line (by environment), not in the real ninja's.
    job = "import os, subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)', os.environ['TU']])"
    wrapper = tmp_path / "ninja"
    wrapper.write_text(f"#!/bin/sh\n{inner} -c \"{job}\"\n")
    wrapper.chmod(0o755)
    outer = subprocess.Popen([str(wrapper)], start_new_session=True, env={**os.environ, "TU": "mid_a.cu"})
    try:
        gov = _governor(tmp_path / "gov", lambda: CAP, root_pid=outer.pid)
        deadline = time.monotonic() + 10
        while not [j for j in gov._scan() if j.key] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [j.key for j in gov._scan()] == ["mid_a.cu"] and gov.stats.started == ["mid_a.cu"]
    finally:
        os.killpg(outer.pid, signal.SIGKILL)
        outer.wait()


# The plain run's launcher: it waits until every job of the run has arrived (so -j8 runs them all at once),
# then starts its replay, which allocates its peak and holds it; the hold ends when the cap's OOM killer has
# struck in the group (the one killed fails its edge, the others are stopped), else after HOLD_S (a hang
# guard: the test then fails, since nothing was killed). Stdlib only, run with -S: it starts in milliseconds.
_BARRIER = """
import os, subprocess, sys, time
folder, parties, group = sys.argv[1], int(sys.argv[2]), sys.argv[3]
open(os.path.join(folder, str(os.getpid())), "w").close()
while len(os.listdir(folder)) < parties:
    time.sleep(0.01)

def oom_kills():
    for name in ("memory.oom_control", "memory.events"):
        try:
            with open(os.path.join(group, name)) as fh:
                return next((int(line.split()[1]) for line in fh if line.startswith("oom_kill ")), 0)
        except OSError:
            continue
    return 0

job = subprocess.Popen(sys.argv[4:])
while job.poll() is None:
    if oom_kills():
        job.kill()
        print("released by an OOM kill", flush=True)
        sys.exit(1)
    time.sleep(0.02)
sys.exit(job.returncode)
"""
HOLD_S = 90.0


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
    # Control first: the same workload with -j8 does not fit the cap (Σ peaks 1030 MiB > 640). Its jobs meet
    # at a barrier before allocating and hold their peaks until the cap kills one (not for their replayed
    # seconds), so all 8 are resident at once however slowly a busy machine starts them (#67: a timed hold
    # let early jobs finish before late ones allocated, and the control fitted).
    plain, barrier, launcher = tmp_path / "plain", tmp_path / "barrier", tmp_path / "barrier.py"
    barrier.mkdir()
    launcher.write_text(_BARRIER)
    with memory_cgroup(CAP, "jobserver-plain") as group:
        write_ninja(plain, [dataclasses.replace(u, seconds=HOLD_S) for u in UNITS],
                    launcher=[sys.executable, "-S", str(launcher), str(barrier), str(len(UNITS)), str(group)])
        control = _ninja(group, plain, env, "-j8")
        control_kills = cgroup.oom_kills(group)
    assert len(list(barrier.iterdir())) == len(UNITS), "every job passed the barrier: all 8 ran at once"
    assert control.returncode != 0 and control_kills >= 1, control.stdout
    assert "released by an OOM kill" in control.stdout, control.stdout  # not by the hang guard
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


# Run inside a fresh pid namespace (pids 1, 2, ... and `ns_last_pid` writable there), so the test can hand
# a finished job's pid to the next job, as the kernel does once the pid space wraps during a long build.
_REUSE = """
import json, subprocess, sys, time
from pathlib import Path
from build_kernel.stages.builder import jobserver
gov = jobserver.Governor(Path(sys.argv[1]), budget=1 << 40, predictions={"heavy_a.cu": 900, "light_a.cu": 100},
                         default=300, complete=True, max_jobs=4, available=lambda: 1 << 40, reserve=0)
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]

def job(tu):
    proc = subprocess.Popen([*sleep, tu])
    while tu not in jobserver._cmdline(proc.pid):  # the kernel fills it in shortly after the exec
        time.sleep(0.005)
    return proc

first = job("heavy_a.cu")
seen = [gov._job(first.pid).key]
first.kill()
first.wait()
time.sleep(0.05)  # /proc's start time counts in clock ticks: a real wrap of the pid space takes far longer
with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
    fh.write(str(first.pid - 1))
second = job("light_a.cu")
seen.append(gov._job(second.pid).key)
second.kill()
second.wait()
print(json.dumps({"same_pid": first.pid == second.pid, "keys": seen, "started": gov.stats.started}))
"""


def test_a_reused_pid_is_a_new_job(tmp_path: Path) -> None:
    """A pid is reused once the kernel's pid space wraps (pid_max is 32768 on many hosts; a build runs
    tens of thousands of processes): the job that gets a finished job's pid is another TU, counted as
    started and charged its own prediction, not the finished one's."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-Urpf", "--mount-proc", "sh", "-c",
                            "echo 1 > /proc/sys/kernel/ns_last_pid"], capture_output=True, check=False) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs unshare and unprivileged user + pid namespaces to hand a pid on")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([unshare, "-Urpf", "--mount-proc", sys.executable, "-c", _REUSE, str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["same_pid"], "the namespace handed out another pid: nothing was reused"
    assert got["keys"] == ["heavy_a.cu", "light_a.cu"] and got["started"] == ["heavy_a.cu", "light_a.cu"]
