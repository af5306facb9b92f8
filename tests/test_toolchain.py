"""Toolchain preflight: each failure is one line with its fix, found before any compile.

Where the real thing can be arranged here (no nvcc on PATH, no ninja, an old CMake, a
host gcc that nvcc rejects) it is; an older CUDA, a torch for another CUDA or a CPU torch
is not installed here, so those checks use recorded facts of such machines (`RECORDED`)
and run without any nvcc. What needs this machine's own toolchain skips without one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from build_kernel import host_compiler, toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.errors import ToolchainError
from build_kernel.resources import Resources, cgroup_cpu_quota, cgroup_memory_headroom, plan_jobs
from tests.conftest import run_cli

ARCH = parse_arch_list("12.0a")


@pytest.fixture(scope="module")
def facts() -> toolchain.Facts:
    """This machine's real toolchain (README: a CUDA 13 nvcc, make's CUDA build of torch)."""
    found = toolchain.detect(sys.executable, os.environ)
    if not found.nvcc or not found.torch_cuda:
        pytest.skip(f"needs nvcc and a CUDA build of torch (make test installs torch; nvcc: {found.nvcc},"
                    f" torch {found.torch_version} CUDA {found.torch_cuda})")
    return found


# A healthy CUDA 13.0 machine as `detect` records one: for the checks that need other
# versions than this machine has (and no nvcc here at all).
RECORDED = toolchain.Facts(
    python="/opt/env/bin/python", python_version="3.11.7", git="/usr/bin/git",
    cmake="/opt/env/bin/cmake", cmake_version="3.28.4", ninja="/opt/env/bin/ninja", ninja_version="1.13.2",
    gcc="/usr/bin/g++", gcc_version="12.2.0", nvcc="/usr/local/cuda-13.0/bin/nvcc", nvcc_version="13.0",
    nvcc_archs=("75", "80", "86", "87", "88", "89", "90", "100", "110", "103", "120", "121"),
    cuda_home="/usr/local/cuda-13.0", torch_version="2.14.1+cu130", torch_cuda="13.0")


def only_tools(tmp_path: Path, *names: str) -> str:
    """A PATH holding just these tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        real = shutil.which(name)
        assert real, name
        (bin_dir / name).symlink_to(real)
    return str(bin_dir)


def test_healthy_toolchain_has_no_problems(facts: toolchain.Facts) -> None:
    # The recipe asks for the CUDA this machine's torch was built for (make installs a matching pair).
    assert toolchain.preflight(facts, ARCH, cmake_spec=">=3.26", want_cuda=facts.torch_cuda or "") == []
    assert toolchain.preflight(RECORDED, ARCH, cmake_spec=">=3.26", want_cuda="13.0") == []


def test_nvcc_missing(tmp_path: Path) -> None:
    env = {"PATH": only_tools(tmp_path, "g++", "git")}
    found = toolchain.detect(sys.executable, env, cuda_roots=())
    problems = toolchain.preflight(found, ARCH, cmake_spec=">=3.26", want_cuda="13.0")
    assert any(p.startswith("nvcc not found: install the CUDA toolkit, set CUDA_HOME") for p in problems)


def test_ninja_missing(tmp_path: Path) -> None:
    fake_env = tmp_path / "env"
    fake_env.mkdir()
    (fake_env / "python").symlink_to(sys.executable)
    found = toolchain.detect(str(fake_env / "python"), env={"PATH": only_tools(tmp_path, "g++", "git")}, cuda_roots=())
    assert "ninja not found: pip install ninja" in toolchain.preflight(found, ARCH, cmake_spec=">=3.26", want_cuda="")


def test_torch_facts_without_importing_torch_equal_what_import_torch_says() -> None:
    # The real torch of this environment, imported the slow way for the reference values.
    ref = subprocess.run([sys.executable, "-c", "import json, os, torch, torch.utils; print(json.dumps({"
                          "'version': torch.__version__, 'cuda': torch.version.cuda,"
                          "'cmake': torch.utils.cmake_prefix_path,"
                          "'nvidia': os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), 'nvidia')}))"],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    want = json.loads(ref)
    found = toolchain.detect(sys.executable, os.environ)
    assert (found.torch_version, found.torch_cuda, found.torch_cmake_prefix, found.torch_nvidia_dir) == (
        want["version"], want["cuda"], want["cmake"], want["nvidia"])
    assert found.python_version == ".".join(map(str, sys.version_info[:3]))
    # ...and the probe itself never imports torch (that takes seconds).
    check = subprocess.run([sys.executable, "-c", toolchain._TORCH_PROBE + "import sys\nassert 'torch' not in sys.modules\n"],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_torch_facts_from_a_version_file_alone(tmp_path: Path) -> None:
    # A torch folder that could not even be imported: its version.py text is enough.
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('never imported')\n")
    (site / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.99.0+cu131'\n"
                                               "cuda: Optional[str] = '13.1'\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site)}
    found = toolchain.detect(sys.executable, env, cuda_roots=())
    assert (found.torch_version, found.torch_cuda) == ("2.99.0+cu131", "13.1")
    assert found.torch_cmake_prefix == str(site / "torch" / "share" / "cmake")
    assert found.torch_nvidia_dir == str(site / "nvidia")
    (site / "torch" / "version.py").write_text("__version__ = '2.99.0+cpu'\ncuda = None\n")
    cpu = toolchain.detect(sys.executable, env, cuda_roots=())
    assert (cpu.torch_version, cpu.torch_cuda) == ("2.99.0+cpu", None)


def test_cmake_below_recipe_minimum(facts: toolchain.Facts) -> None:
    [problem] = toolchain.preflight(facts, ARCH, cmake_spec=">=99.0", want_cuda=facts.nvcc_version or "")
    assert problem.startswith(f"cmake {facts.cmake_version} (") and "does not satisfy >=99.0: pip install 'cmake>=99.0'" in problem


def test_nvcc_too_old_for_sm120a() -> None:
    # Recorded from a CUDA 12.6 machine: its nvcc lists no compute_120.
    old = replace(RECORDED, nvcc_version="12.6", nvcc_archs=("75", "80", "86", "87", "89", "90"), torch_cuda="12.6")
    [problem] = toolchain.preflight(old, ARCH, cmake_spec=">=3.26", want_cuda="")
    assert "cannot target sm_120a: it needs CUDA >= 12.8" in problem
    sm121 = toolchain.preflight(replace(old, nvcc_version="12.8", nvcc_archs=("90", "100", "120"), torch_cuda="12.8"),
                                parse_arch_list("12.1a"), cmake_spec=">=3.26", want_cuda="")
    assert sm121 and "needs CUDA >= 12.9" in sm121[0]


def test_torch_cuda_major_differs_from_nvcc() -> None:
    # The classic: system CUDA 13.1, torch built for 12.8.
    mismatch = replace(RECORDED, nvcc_version="13.1", torch_cuda="12.8", torch_version="2.9.1+cu128")
    problems = toolchain.preflight(mismatch, ARCH, cmake_spec=">=3.26", want_cuda="")
    assert any("torch 2.9.1+cu128 was built for CUDA 12.8 but nvcc is CUDA 13.1" in p for p in problems)


def test_cpu_torch_is_refused() -> None:
    # What detect records for a torch 2.13.0 CPU wheel (version.py: cuda = None): the one problem.
    cpu = replace(RECORDED, torch_version="2.13.0+cpu", torch_cuda=None)
    assert toolchain.preflight(cpu, ARCH, cmake_spec=">=3.26", want_cuda="13.0") == [
        "torch 2.13.0+cpu is a CPU build: install a CUDA build of torch (e.g. +cu130)"]


def test_host_compiler_rejected_by_nvcc(facts: toolchain.Facts, tmp_path: Path) -> None:
    # A real g++ posing as GCC 99: nvcc's own host_config.h refuses it.
    fake = tmp_path / "g++-99"
    fake.write_text(f"#!/bin/sh\nexec {shutil.which('g++')} -D__GNUC__=99 -Wno-builtin-macro-redefined \"$@\"\n")
    fake.chmod(0o755)
    assert facts.nvcc
    problem = host_compiler.check_host_compiler(facts.nvcc, str(fake))
    assert problem and problem.startswith(f"nvcc rejects host compiler {fake}") and "GNU" in problem
    assert host_compiler.check_host_compiler(facts.nvcc, shutil.which("g++")) is None


def test_host_compiler_check_without_nvcc_is_one_line(tmp_path: Path) -> None:
    problem = host_compiler.check_host_compiler(str(tmp_path / "no-nvcc"), "g++")
    assert problem == f"nvcc could not run the host compiler g++: {tmp_path / 'no-nvcc'} not found (install no-nvcc or put it on PATH)"
    with pytest.raises(ToolchainError) as exc:
        toolchain.require([problem])
    assert "\n" not in str(exc.value)


def test_doctor_reports_problems_with_exit_code(tmp_path: Path) -> None:
    proc = run_cli("--json", "doctor", "--recipe", "demo", env={"PATH": only_tools(tmp_path, "g++", "git")})
    # The interpreter's own bin (cmake, ninja from the venv) still counts; nvcc may be found
    # under /usr/local: the point is that doctor answers in JSON and exits 3 or 0 honestly.
    import json

    data = json.loads(proc.stdout)
    assert proc.returncode == (3 if data["problems"] else 0)
    assert data["resources"]["cpus"] >= 1 and "tools" in data


def fake_cgroup(root: Path, rel: str, files: dict[str, str]) -> None:
    folder = root / rel.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_cgroup_v2_limit_is_smallest_up_the_tree(tmp_path: Path) -> None:
    GB = 1024**3
    proc = tmp_path / "cgroup"
    proc.write_text("0::/a/b\n")
    fake_cgroup(tmp_path / "fs", "/a/b", {"memory.max": "max", "memory.current": str(1 * GB), "cpu.max": "200000 100000"})
    fake_cgroup(tmp_path / "fs", "/a", {"memory.max": str(24 * GB), "memory.current": str(4 * GB), "cpu.max": "max 100000"})
    room, why = cgroup_memory_headroom(tmp_path / "fs", proc)
    assert room == 20 * GB and "memory.max 24.0 GB" in why
    assert cgroup_cpu_quota(tmp_path / "fs", proc) == 2.0


def test_cgroup_v1_limit(tmp_path: Path) -> None:
    GB = 1024**3
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n0::/\n")
    fake_cgroup(tmp_path / "fs", "/memory/job", {"memory.limit_in_bytes": str(10 * GB), "memory.usage_in_bytes": str(3 * GB)})
    fake_cgroup(tmp_path / "fs", "/memory", {"memory.limit_in_bytes": "9223372036854771712"})
    fake_cgroup(tmp_path / "fs", "/cpu", {"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000"})
    room, why = cgroup_memory_headroom(tmp_path / "fs", proc)
    assert room == 7 * GB and why.startswith("cgroup v1")
    assert cgroup_cpu_quota(tmp_path / "fs", proc) == 1.5


def test_no_cgroup_limit(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    (tmp_path / "fs").mkdir()
    assert cgroup_memory_headroom(tmp_path / "fs", proc) == (None, "no cgroup memory limit")


def test_jobs_follow_memory_not_cpus() -> None:
    GB = 1024**3
    # 128-core host inside a 24 GB container: 14.2 GB FP4 TUs allow one job, not 128.
    small = Resources(cpus=128, cpus_why="t", memory_bytes=24 * GB, memory_why="cgroup")
    assert plan_jobs(small, job_memory_gb=14.2, nvcc_threads=1, n_archs=1, reserve_gb=4).jobs == 1
    # nvcc --threads=4 over 7 archs keeps 4 cicc alive per job.
    big = Resources(cpus=16, cpus_why="t", memory_bytes=100 * GB, memory_why="cgroup")
    plan = plan_jobs(big, job_memory_gb=10, nvcc_threads=4, n_archs=7, reserve_gb=4)
    assert plan.jobs == 2 and "(10 GB x 4 arch(s) in flight)" in plan.derivation
    # Never zero, never more than the CPUs.
    tiny = Resources(cpus=2, cpus_why="t", memory_bytes=1 * GB, memory_why="t")
    assert plan_jobs(tiny, job_memory_gb=10, nvcc_threads=1, n_archs=1, reserve_gb=2).jobs == 1
    assert plan_jobs(big, job_memory_gb=0.5, nvcc_threads=1, n_archs=1, reserve_gb=2).jobs == 16
