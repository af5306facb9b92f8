"""OOM kills, for real: the kernel's OOM killer ends a real compiler inside a memory-capped cgroup.

- a real nvcc compile whose cicc is killed: what nvcc then says, and that the runner reads it;
- a real g++ compile killed on every attempt: the retries run out into the one-line BuildError;
- the whole CLI build: an OOM-killed compile is survived, the build resumes with fewer jobs.

A cgroup that cannot be made fails these tests when running as root (CI does, and can); only
a non-root run may skip them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from build_kernel import process, toolchain
from build_kernel.errors import BuildError
from build_kernel.stages.builder import cgroup, runner
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe

# Memory caps and peaks: these tests run one after another on one xdist worker (tests/xdist_groups.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("memory")]
PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())
MiB = 1024 * 1024
CAP = 300 * MiB


@contextmanager
def memory_cgroup(cap: int, name: str) -> Iterator[Path]:
    """A fresh memory cgroup capped at `cap` bytes, no swap (build_kernel's cgroup helper); one that
    cannot be made fails the test as root and skips it otherwise."""
    try:
        with cgroup.memory_cgroup(cap, name) as group:
            yield group
    except cgroup.CgroupUnavailable as exc:
        if os.geteuid() == 0:
            pytest.fail(f"{exc.message} (running as root, where this must work: these tests may not skip here)",
                        pytrace=False)
        pytest.skip(f"{exc.message}; run as root on a cgroup host")


in_cgroup, oom_kills, peak = cgroup.in_cgroup, cgroup.oom_kills, cgroup.peak


@pytest.fixture
def capped_cgroup() -> Iterator[Path]:
    with memory_cgroup(CAP, "oom-test") as group:
        yield group


# --- nvcc: cicc killed --------------------------------------------------------------------------------

# Device code only (#ifdef __CUDA_ARCH__): cudafe++ (host side) stays small, cicc alone grows. One fold
# over COUNT template instances: COUNT=1 compiles in ~180 MB (cudafe++ is the biggest step, ~188 MB
# RSS); COUNT=4000 takes cicc to ~660 MB. Measured with nvcc 13.0.88, sm_120a.
HEAVY_CU = """\
#include <utility>
#ifdef __CUDA_ARCH__
template <int I> struct Node { float w[4]; __device__ float get() const { return w[I & 3] + I; } };
template <int... I> __device__ float sum(std::integer_sequence<int, I...>) { return (Node<I>{}.get() + ...); }
#endif
__global__ void k(float* out) {
#ifdef __CUDA_ARCH__
  out[threadIdx.x] = sum(std::make_integer_sequence<int, COUNT>{});
#endif
}
"""
NVCC_CAP = 320 * MiB  # above what the whole light compile needs, far below what cicc needs for COUNT=4000
NVCC_HEAVY = 4000


@pytest.fixture(scope="module")
def nvcc_gencode() -> tuple[str, str]:
    nvcc = toolchain.find_nvcc(os.environ)
    if nvcc is None:
        pytest.skip("no nvcc (CUDA_HOME, PATH, /usr/local/cuda*)")
    archs = re.findall(r"compute_(\d+)", process.probe([nvcc, "--list-gpu-arch"]) or "")
    assert archs, f"{nvcc} --list-gpu-arch names no arch"
    arch = "120" if "120" in archs else max(archs, key=int)
    suffix = "a" if int(arch) >= 90 else ""
    return nvcc, f"arch=compute_{arch}{suffix},code=sm_{arch}{suffix}"


def with_sh(shell: str, argv: list[str]) -> list[str]:
    """argv with `shell` as /bin/sh (nvcc runs each step through /bin/sh): as is when it already is,
    else in a private mount namespace with the shell bound over /bin/sh for this command only."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} not installed")
    if Path(path).resolve() == Path("/bin/sh").resolve():
        return argv
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        reason = f"cannot make a private mount namespace to run nvcc with {shell} as /bin/sh: {probe.stderr.strip()}"
        if os.geteuid() == 0:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            'mount --bind "$0" /bin/sh && exec "$@"', path, *argv]


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_nvcc_cicc_oom_kill_is_recognised(nvcc_gencode: tuple[str, str], tmp_path: Path, shell: str) -> None:
    """What nvcc says depends on /bin/sh. bash execs the step, so nvcc sees the SIGKILL and names it:
    `nvcc error   : '"$CICC_PATH/cicc"' died due to signal 9 (Kill signal)`. dash forks it and prints
    a bare `Killed`, and nvcc exits 137 without a word: no program is named anywhere."""
    nvcc, gencode = nvcc_gencode
    source = tmp_path / "heavy.cu"
    source.write_text(HEAVY_CU)

    def compile_(group: Path | None, count: int) -> subprocess.CompletedProcess[str]:
        argv = with_sh(shell, [nvcc, "-c", "-gencode", gencode, f"-DCOUNT={count}", str(source),
                               "-o", str(tmp_path / "heavy.o")])
        try:
            return subprocess.run(in_cgroup(group, argv) if group else argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=90, check=False)
        except subprocess.TimeoutExpired:
            events_file = group / "memory.events" if group else None
            events = events_file.read_text().split("\n") if events_file and events_file.exists() else []
            pytest.fail(f"nvcc (COUNT={count}) neither finished nor was OOM-killed in 90 s; memory.events: {events}"
                        " (the cgroup reclaiming page cache instead of killing: its text pages were charged to it?)",
                        pytrace=False)

    # Uncapped first: the toolkit's binaries and headers enter the page cache charged to this test's own
    # cgroup. Charged to the capped one, cgroup v2 evicts and refaults cicc's 76 MB of text for seconds
    # to minutes before it kills (measured: 5 s to over 180 s; warmed outside, 1.5-2 s).
    warm = compile_(None, 1)
    assert warm.returncode == 0, warm.stdout
    with memory_cgroup(NVCC_CAP, f"nvcc-light-{shell}") as group:
        light = compile_(group, 1)
        light_peak, light_kills = peak(group), oom_kills(group)
    assert light.returncode == 0 and light_kills == 0, f"the cap is too low for nvcc itself: {light.stdout}"
    with memory_cgroup(NVCC_CAP, f"nvcc-heavy-{shell}") as group:
        heavy = compile_(group, NVCC_HEAVY)
        kills = oom_kills(group)
    print(f"nvcc, /bin/sh = {shell}, memory cap {NVCC_CAP // MiB} MiB (light compile peaked at {light_peak // MiB}"
          f" MiB): exit {heavy.returncode}, output {heavy.stdout!r}")
    assert kills >= 1, f"no OOM kill: exit {heavy.returncode}, {heavy.stdout!r}"
    killed = runner.oom_killed(heavy.stdout)
    if shell == "bash":
        assert heavy.returncode == 9 and killed == "'cicc' died due to signal 9 (Kill signal)", heavy.stdout
    else:
        assert heavy.returncode == 137 and heavy.stdout.strip() == "Killed" and killed == "Killed", heavy.stdout


# --- retries used up -------------------------------------------------------------------------------

# cc1plus (g++ 12/13): ~25 MB for a light TU, ~240 MB for this one; 128 MB kills it in about 2 s. Not much
# lower: at 64 MB cgroup v2 evicted and refaulted cc1plus's own text over and over (memory.events `max`
# climbing, no oom_kill) and the compile crawled for minutes instead of dying. A light compile outside the
# cgroup first puts the text in the page cache charged elsewhere; a `timeout` keeps a host from hanging.
HEAVY_CC = """\
#include <utility>
template <int I> struct Node { int w[4]; int get() const { return w[I & 3] + I; } };
template <int... I> int sum(std::integer_sequence<int, I...>) { return (Node<I>{}.get() + ...); }
int f() { return sum(std::make_integer_sequence<int, 5000>{}); }
"""
GXX_CAP = 128 * MiB
GUARD = ["timeout", "-s", "KILL", "120"]
KILLED_CC1PLUS = "Killed signal terminated program cc1plus"


@pytest.mark.parametrize(("jobs", "attempts"), [pytest.param(2, [2, 1], id="jobs2-retry-then-fail"),
                                                 pytest.param(1, [1], id="jobs1-no-retry")])
def test_oom_retries_used_up_is_one_line_error(tmp_path: Path, jobs: int, attempts: list[int]) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++")
    source, log_path = tmp_path / "heavy.cc", tmp_path / "logs" / "build.log"
    source.write_text(HEAVY_CC)
    seen: list[int] = []

    def env_for(n: int) -> Mapping[str, str]:
        seen.append(n)
        return {**os.environ, "MAX_JOBS": str(n)}

    light = tmp_path / "light.cc"
    light.write_text(HEAVY_CC.replace("5000", "1"))
    subprocess.run([gxx, "-std=c++17", "-c", str(light), "-o", str(tmp_path / "light.o")], check=True)  # page cache
    with memory_cgroup(GXX_CAP, f"retries-{jobs}") as group:
        cmd = in_cgroup(group, [*GUARD, gxx, "-std=c++17", "-c", str(source), "-o", str(tmp_path / "heavy.o")])
        with pytest.raises(BuildError) as caught:
            runner.build_with_retries(cmd, env_for, cwd=tmp_path, log_path=log_path, jobs=jobs, max_oom_retries=1)
        kills = oom_kills(group)
    error = caught.value
    assert kills == len(attempts) and seen == attempts
    assert error.exit_code == 6
    assert error.message == f"compile OOM-killed ({KILLED_CC1PLUS}) even with 1 job(s); full log: {log_path}"
    assert error.hint == "free memory, lower [build] nvcc_threads, or build fewer archs"
    assert str(error) == f"{error.message} ({error.hint})" and "\n" not in str(error)
    log = log_path.read_text()
    assert len(re.findall(r"(?m)^\$ /bin/sh ", log)) == len(attempts)
    assert log.count(f"g++: fatal error: {KILLED_CC1PLUS}") == len(attempts)
    assert log.count("[exit 1]") == len(attempts)
    retried = f"# OOM kill detected ({KILLED_CC1PLUS}): resuming in the same build folder with 1 job(s) (retry 1/1)"
    assert (retried in log) == (jobs == 2) and log.count("# OOM kill detected") == len(attempts) - 1


# --- the CLI build ---------------------------------------------------------------------------------


def test_oom_killed_compile_resumes_with_fewer_jobs(project: Path, tmp_path: Path, capped_cgroup: Path) -> None:
    """What is arranged is *which* compile meets the cap: a compiler launcher puts the heaviest TU (the
    torch binding, ~0.9 GB) into a 300 MB cgroup on its first run only, as memory pressure from parallel
    jobs would on a real machine."""
    marker = tmp_path / "capped-once"
    launcher = tmp_path / "cap-launcher.sh"
    launcher.write_text(f"""#!/bin/sh
case "$*" in
  *common_extension.cc*)
    if [ ! -e {marker} ]; then
      touch {marker}
      echo $$ > {capped_cgroup}/cgroup.procs
    fi;;
esac
exec "$@"
""")
    launcher.chmod(0o755)
    copy_series(project, PATCHES, "v1")
    # The static scheduler's retry (half the jobs), not the governor the default picks on ninja >= 1.13.
    write_recipe(project, "r", demo_recipe_text(extra_build='scheduler = "static"\n').replace(
        "[build.defines]\n", f'[build.defines]\nCMAKE_CXX_COMPILER_LAUNCHER = "{launcher}"\n'))
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--output-dir", str(project / "wheels"), "--jobs", "2",
                   "--json", "build", "--recipe", str(project / "recipes/r.toml"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert marker.exists() and oom_kills(capped_cgroup) >= 1  # the kernel really killed it
    assert result["jobs"] == [2, 1] and result["oom_kills"] == 1
    assert "OOM kill detected (Killed signal terminated program cc1plus)" in proc.stderr
    log = Path(result["log"]).read_text()
    assert "resuming in the same build folder with 1 job(s) (retry 1/3)" in log
    # ninja resumed: the second pass had fewer steps and did not recompile activation.cu.
    first, second = log.split("# OOM kill detected")
    steps = [re.findall(r"(?m)^\[\d+/(\d+)\] (.*)$", part) for part in (first, second)]
    assert int(steps[1][0][0]) < int(steps[0][0][0])
    compiled = [[cmd for _, cmd in part if "activation.cu -o" in cmd] for part in steps]
    assert compiled[0] and not compiled[1]
    verify = run_cli("--json", "verify", result["wheel"], "--recipe", str(project / "recipes/r.toml"))
    assert verify.returncode == 0, verify.stdout
