"""The hermetic CUDA toolkit from PyPI wheels: pins, layout, cache, errors, auto choice, a real build.

Network: the toolkit fixture installs nvidia-cuda-nvcc & co. (about 200 MB of wheels) for the
CUDA of this environment's torch from the package index once per session; every other test
reuses that folder. Which CUDA releases the index has is asked of the index (`pip index
versions`), never assumed; this machine's nvcc and torch are read with `toolchain.detect`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from build_kernel import toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.errors import ToolchainError
from build_kernel.stages.builder import cudawheels
from build_kernel.toolchain import Facts
from tests.conftest import REPO_ROOT

SM120A = parse_arch_list("12.0a")


def one_line(exc: pytest.ExceptionInfo[ToolchainError]) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def system_facts(version: str | None = "13.0", archs: tuple[str, ...] = ("90", "100", "120")) -> Facts:
    if version is None:
        return Facts(python=sys.executable, python_version="3.11")
    return Facts(python=sys.executable, python_version="3.11", nvcc="/usr/local/cuda/bin/nvcc",
                 nvcc_version=version, nvcc_archs=archs, cuda_home="/usr/local/cuda")


@functools.cache
def machine() -> Facts:
    """This machine's nvcc and this environment's torch, as the build sees them."""
    return toolchain.detect(sys.executable, os.environ)


def torch_cuda() -> str:
    """major.minor of the CUDA this environment's torch was built for (make's torch: a CUDA 13 build)."""
    facts = machine()
    if not facts.torch_cuda or cudawheels.major_minor(facts.torch_cuda)[0] < cudawheels.FIRST_MAJOR:
        pytest.skip(f"needs a torch built for CUDA >= {cudawheels.FIRST_MAJOR} (make installs one);"
                    f" this one is {facts.torch_version} (CUDA {facts.torch_cuda})")
    return "{}.{}".format(*cudawheels.major_minor(facts.torch_cuda))


def index_cuda_releases() -> list[str]:
    """major.minor of every final nvidia-cuda-nvcc release the configured package index has, ascending."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
                           "nvidia-cuda-nvcc"], capture_output=True, text=True, check=False)
    listed = re.search(r"^Available versions: (.+)$", proc.stdout, re.MULTILINE)
    assert proc.returncode == 0 and listed, f"pip index versions nvidia-cuda-nvcc: {proc.stdout}{proc.stderr}"
    versions = [cudawheels.major_minor(v) for v in listed.group(1).split(",")]
    return [f"{a}.{b}" for a, b in sorted(set(versions)) if a >= 1]  # (0.0.x: placeholders, never a toolkit)


def assert_pinned_to(packages: dict[str, str], cuda: str) -> None:
    """Every package is of that CUDA major.minor (CCCL from CUDA 13.3 on is 13.3.<minor>.x)."""
    assert all(v.startswith(f"{cuda}.") for n, v in packages.items() if n != "nvidia-cuda-cccl"), packages
    for req in map(Requirement, cudawheels.requirements(cuda)):
        assert req.specifier.contains(packages[req.name]), (req, packages)


@pytest.fixture(scope="session")
def toolkit_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bk-cache")


@pytest.fixture(scope="session")
def toolkit(toolkit_cache: Path) -> cudawheels.Toolkit:
    """The CUDA of this environment's torch (13.0 for torch 2.14.1) from PyPI, installed once per session."""
    return cudawheels.ensure_toolkit(toolkit_cache, torch_cuda(), python=sys.executable, env=os.environ)


# ---- pins and error texts (no network) ---------------------------------------------------

def test_every_package_is_pinned_to_the_cuda_minor() -> None:
    reqs = cudawheels.requirements("13.0")
    assert reqs == ("nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-crt==13.0.*", "nvidia-nvvm==13.0.*",
                    "nvidia-cuda-cccl==13.0.*", "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-nvrtc==13.0.*")
    # torch.version.cuda spelling and a full version give the same pins.
    assert cudawheels.requirements("13.0.88") == reqs
    # From CUDA 13.3 CCCL is versioned 13.3.<cccl>: CUDA 13.m ships CCCL 3.m.
    assert "nvidia-cuda-cccl>=13.3.4.0,<13.3.5" in cudawheels.requirements("13.4")
    with pytest.raises(ToolchainError) as exc:
        cudawheels.requirements("thirteen")
    assert "is not major.minor" in one_line(exc)


def test_pip_no_match_becomes_one_line_with_the_releases_the_index_has() -> None:
    output = ("ERROR: Could not find a version that satisfies the requirement nvidia-cuda-nvcc==13.99.* "
              "(from versions: 0.0.0a0, 13.0.48, 13.0.88, 13.1.80, 13.4.46rc1, 13.4.59)\n"
              "ERROR: No matching distribution found for nvidia-cuda-nvcc==13.99.*\n")
    err = cudawheels.pip_error(output, "13.99")
    assert str(err).startswith("no CUDA 13.99 toolkit on the package index: pip finds no nvidia-cuda-nvcc==13.99.*;"
                               " nvidia-cuda-nvcc has CUDA 13.0, 13.1, 13.4 (")
    offline = cudawheels.pip_error("ERROR: Could not find a version that satisfies the requirement "
                                   "nvidia-cuda-nvcc==13.0.* (from versions: none)\n", "13.0")
    assert "no network or no index?" in str(offline) and "\n" not in str(offline)


def test_cuda_12_has_no_wheel_layout(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError) as exc:
        cudawheels.ensure_toolkit(tmp_path, "12.8", python=sys.executable, env=os.environ)
    assert "no PyPI toolkit for CUDA 12.8" in one_line(exc)
    assert not (tmp_path / "toolkits").exists()


def test_offline_without_a_cached_toolkit_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError) as exc:
        cudawheels.ensure_toolkit(tmp_path, "13.0", python=sys.executable, env=os.environ, offline=True)
    assert one_line(exc).startswith(f"offline and no CUDA 13.0 toolkit is cached in {tmp_path}/toolkits/cuda-13.0-")


def test_programs_that_do_not_run_are_one_line_toolchain_errors(tmp_path: Path) -> None:
    missing = tmp_path / "bin" / "nvcc"
    log = tmp_path / "t.log"
    with pytest.raises(ToolchainError) as exc:
        cudawheels.nvcc_version(missing)
    assert one_line(exc).startswith(f"{missing} does not run: {missing} not found")
    with pytest.raises(ToolchainError) as exc:
        cudawheels.smoke_compile(missing, tmp_path, log, {"PATH": "/usr/bin:/bin"})
    assert one_line(exc).startswith(f"the CUDA toolkit from PyPI does not compile a test kernel: {missing} not found")
    with pytest.raises(ToolchainError) as exc:
        cudawheels._pip_install(str(tmp_path / "no-python"), tmp_path / "target", ("x",), "13.0", log, {})
    assert one_line(exc).startswith(f"cannot run pip with {tmp_path / 'no-python'}: ")
    assert "(give a python that has pip)" in str(exc.value)
    # A failing nvcc --version: its own words, one line.
    fake = tmp_path / "fake-nvcc"
    fake.write_text("#!/bin/sh\necho 'nvcc fatal: broken install' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(ToolchainError) as exc:
        cudawheels.nvcc_version(fake)
    assert one_line(exc) == f"{fake} --version failed: nvcc fatal: broken install"


def test_toolkit_environ_is_built_on_the_given_base() -> None:
    tk = cudawheels.Toolkit(cuda="13.0", root=Path("/tk"), nvcc=Path("/tk/bin/nvcc"), version="13.0.88",
                            packages=(), defines={})
    env = tk.environ({"PATH": "/usr/bin", "KEEP": "1"})
    assert env == {"PATH": "/tk/bin:/usr/bin", "KEEP": "1", "CUDA_HOME": "/tk", "CUDA_PATH": "/tk"}


# ---- choose() -----------------------------------------------------------------------------

def test_choose_auto_takes_a_matching_system_toolkit() -> None:
    source, why = cudawheels.choose("auto", system_facts("13.0"), "13.0", SM120A)
    assert source == "system" and "matches torch's CUDA 13.0" in why and "sm_120a" in why


@pytest.mark.parametrize(("facts", "reason"), [
    (system_facts("13.0"), "system nvcc is CUDA 13.0 (/usr/local/cuda/bin/nvcc), torch is built for CUDA 13.1"),
    (system_facts("13.1", archs=("90", "100")), "cannot target sm_120a"),
    (system_facts(None), "no system nvcc found"),
])
def test_choose_auto_falls_back_to_wheels_and_system_refuses(facts: Facts, reason: str) -> None:
    source, why = cudawheels.choose("auto", facts, "13.1", SM120A)
    assert source == "wheels" and reason in why and "nvidia-cuda-nvcc==13.1.*" in why
    with pytest.raises(ToolchainError) as exc:
        cudawheels.choose("system", facts, "13.1", SM120A)
    text = one_line(exc)
    assert text.startswith('cuda_source = "system" but ') and reason in text


def test_choose_errors_when_nothing_can_fit() -> None:
    # torch 13.0 cannot be matched by a system 12.8, and 12.x has no wheel layout.
    with pytest.raises(ToolchainError) as exc:
        cudawheels.choose("auto", system_facts("13.0"), "12.8", SM120A)
    assert "PyPI has no CUDA 12.8 compiler (nvidia-cuda-nvcc-cu12 holds ptxas" in one_line(exc)
    # No CUDA release older than 12.8 targets sm_120a, wheels or not.
    with pytest.raises(ToolchainError) as exc:
        cudawheels.choose("wheels", system_facts("13.0"), "12.6", SM120A)
    assert "CUDA 12.6 (torch's) cannot target sm_120a" in one_line(exc)
    with pytest.raises(ToolchainError) as exc:
        cudawheels.choose("auto", system_facts("13.0"), "", SM120A)
    assert "torch has no CUDA" in one_line(exc)
    assert cudawheels.choose("wheels", system_facts("13.0"), "13.0", SM120A)[0] == "wheels"


def test_cuda12_auto_takes_a_system_12_8_and_refuses_before_any_environment_without_one(tmp_path: Path) -> None:
    """flash-attn-2.8.3 (cuda 12.8, cuda_source auto): with a system CUDA 12.8 the build goes on to it; without one
    the refusal comes before torch 2.9.1 is installed. No CUDA 12.8 toolkit can be installed here: its nvcc is a
    script answering `--version` as CUDA 12.8's does (the only thing asked of it at that point)."""
    nvcc = tmp_path / "cuda-12.8/bin/nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    env = {"CUDA_HOME": str(tmp_path / "cuda-12.8"), "PATH": "/usr/bin:/bin"}
    assert cudawheels.system_nvcc_release(env) == "12.8"
    cudawheels.require_wheels_for("12.8", "auto", env)  # the system toolkit fits: nothing refused
    with pytest.raises(ToolchainError) as exc:
        cudawheels.require_wheels_for("12.8", "wheels", env)  # asked for wheels: PyPI has no CUDA 12 compiler
    assert "no PyPI toolkit for CUDA 12.8" in one_line(exc)
    with pytest.raises(ToolchainError) as exc:
        cudawheels.require_wheels_for("12.8", "auto", {"PATH": str(tmp_path)})  # no system nvcc of 12.8
    assert "no PyPI toolkit for CUDA 12.8" in one_line(exc) and "cuda_source" in one_line(exc)
    cudawheels.require_wheels_for("13.0", "auto", {"PATH": str(tmp_path)})  # CUDA 13: PyPI has the compiler


@pytest.mark.network
def test_pypi_cuda12_compiler_wheel_has_no_nvcc(tmp_path: Path) -> None:
    """The fact behind the CUDA 12 refusal, asked of PyPI itself: its CUDA 12.8 compiler wheel holds ptxas and
    libnvvm but no nvcc driver, cicc or cudafe++. Should NVIDIA ever ship them, this fails: support CUDA 12 wheels."""
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "-d", str(tmp_path), "nvidia-cuda-nvcc-cu12==12.8.93"], check=True)
    (wheel,) = tmp_path.glob("nvidia_cuda_nvcc_cu12-*.whl")
    names = {Path(n).name for n in zipfile.ZipFile(wheel).namelist() if "/bin/" in n}
    assert "ptxas" in names
    assert not names & {"nvcc", "cicc", "cudafe++", "fatbinary", "nvlink"}


def test_choose_with_the_real_system_facts() -> None:
    # This machine as detect sees it (the CI machine: nvcc 13.0 at /usr/local/cuda-13.0, torch 2.14.1+cu130).
    facts = machine()
    if not facts.nvcc or not facts.nvcc_version:
        pytest.skip("needs a system nvcc (CUDA_HOME, PATH or /usr/local/cuda*): none found")
    want = torch_cuda()
    major, minor = cudawheels.major_minor(facts.nvcc_version)
    # auto takes the system nvcc exactly when it is torch's CUDA major.minor and knows sm_120a.
    fits = (major, minor) == cudawheels.major_minor(want) and (not facts.nvcc_archs or "120" in facts.nvcc_archs)
    source, why = cudawheels.choose("auto", facts, want, SM120A)
    assert source == ("system" if fits else "wheels"), why
    # A torch built for a CUDA minor the system nvcc is not: the wheels, and "system" refuses.
    other = f"{max(major, cudawheels.FIRST_MAJOR)}.{minor + 1}"
    misfit = f"system nvcc is CUDA {facts.nvcc_version} ({facts.nvcc}), torch is built for CUDA {other}"
    source, why = cudawheels.choose("auto", facts, other, SM120A)
    assert source == "wheels" and misfit in why and f"nvidia-cuda-nvcc=={other}.*" in why
    with pytest.raises(ToolchainError) as exc:
        cudawheels.choose("system", facts, other, SM120A)
    assert one_line(exc).startswith(f'cuda_source = "system" but {misfit}')


# ---- the real toolkit (network once per session) -------------------------------------------

def test_toolkit_layout_versions_and_defines(toolkit: cudawheels.Toolkit, toolkit_cache: Path) -> None:
    cuda, major = toolkit.cuda, cudawheels.major_minor(toolkit.cuda)[0]
    assert cuda == torch_cuda()
    assert toolkit.root == toolkit_cache / "toolkits" / f"cuda-{cuda}-{os.uname().machine}" / "nvidia" / f"cu{major}"
    assert toolkit.version.startswith(f"{cuda}.")
    packages = dict(toolkit.packages)
    assert set(packages) == {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl",
                             "nvidia-cuda-runtime", "nvidia-cuda-nvrtc"}
    assert_pinned_to(packages, cuda)
    root = toolkit.root
    assert os.readlink(root / "lib64") == "lib" and (root / "lib64" / "libcudart_static.a").is_file()
    assert (root / "lib" / "libcudart.so").resolve() == (root / "lib" / f"libcudart.so.{major}").resolve()
    for needed in ("nvvm/bin/cicc", "nvvm/libdevice/libdevice.10.bc", "include/crt/host_config.h",
                   "include/cccl/cuda/std/cstdint", "include/cuda_fp4.h", "bin/ptxas", "bin/crt/link.stub"):
        assert (root / needed).exists(), needed
    d = toolkit.defines
    assert d["CMAKE_CUDA_COMPILER"] == str(toolkit.nvcc) and d["CUDA_TOOLKIT_ROOT_DIR"] == d["CUDAToolkit_ROOT"] == str(root)
    assert d["CUDA_nvrtc_LIBRARY"] == str(root / "lib" / f"libnvrtc.so.{major}")
    # The overlay offers torch's cuBLAS/cuSPARSE headers and nothing the toolkit has itself.
    overlay = Path(d["CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES"])
    names = {p.name for p in overlay.iterdir()}
    assert {"cusparse.h", "cublas_v2.h"} <= names and "cuda_runtime.h" not in names
    marker = json.loads((root.parent.parent / "toolkit.json").read_text())
    assert marker["packages"] == packages and marker["version"] == toolkit.version


def test_second_call_and_offline_reuse_the_cache(toolkit: cudawheels.Toolkit, toolkit_cache: Path) -> None:
    start = time.monotonic()
    again = cudawheels.ensure_toolkit(toolkit_cache, toolkit.cuda, python=sys.executable, env=os.environ)
    assert time.monotonic() - start < 2
    assert again.cached and again == toolkit
    # nvcc's full version (e.g. 13.0.88) names the same major.minor toolkit.
    offline = cudawheels.ensure_toolkit(toolkit_cache, toolkit.version, python=sys.executable, env=os.environ,
                                        offline=True)
    assert offline.root == toolkit.root and offline.cached
    assert not list((toolkit_cache / "toolkits").glob(".*partial*"))


def test_concurrent_setup_installs_once_and_drops_stale_partials(
        toolkit: cudawheels.Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads on an empty cache: one pip run under the lock, one rename; leftovers go."""
    import shutil
    import threading

    site = toolkit.root.parent.parent
    calls: list[Path] = []

    def fake_pip(python: str, target: Path, reqs: object, mm: str, log: Path, env: object) -> None:
        calls.append(target)
        time.sleep(0.5)  # long enough for the other thread to wait on the lock
        shutil.copytree(site, target, symlinks=True, copy_function=os.link, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if n in ("toolkit.json", "lib64", "targets")
                                                 or (n.endswith(".so") and os.path.islink(os.path.join(d, n)))])

    monkeypatch.setattr(cudawheels, "_pip_install", fake_pip)
    final = cudawheels.toolkit_dir(tmp_path, toolkit.cuda)
    final.parent.mkdir(parents=True)
    stale = final.parent / f".{final.name}.partial-999999"
    stale.mkdir()
    (final / "nvidia").mkdir(parents=True)  # no marker: an interrupted run, never trusted
    results: list[cudawheels.Toolkit] = []
    threads = [threading.Thread(target=lambda: results.append(
        cudawheels.ensure_toolkit(tmp_path, toolkit.cuda, python=sys.executable, env=os.environ))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 2 and results[0].root == results[1].root
    assert sorted(r.cached for r in results) == [False, True]
    assert not stale.exists() and not list(final.parent.glob(".*partial*"))
    assert os.readlink(results[0].root / "lib64") == "lib" and (results[0].root / "lib" / "libnvrtc.so").exists()


def test_unknown_cuda_minor_is_one_line_from_pip(toolkit_cache: Path) -> None:
    with pytest.raises(ToolchainError) as exc:
        cudawheels.ensure_toolkit(toolkit_cache, "13.99", python=sys.executable, env=os.environ)
    text = one_line(exc)
    assert text.startswith("no CUDA 13.99 toolkit on the package index: pip finds no nvidia-cuda-nvcc==13.99.*;")
    # The releases named are exactly the ones the index has today (asked of it separately).
    releases = index_cuda_releases()
    assert releases and "13.99" not in releases
    assert re.search(rf"nvidia-cuda-nvcc has CUDA {re.escape(', '.join(releases))}(;| \()", text), (text, releases)
    assert not (toolkit_cache / "toolkits" / f"cuda-13.99-{os.uname().machine}").exists()
    assert not list((toolkit_cache / "toolkits").glob(".*partial*"))


# ---- real compiles ---------------------------------------------------------------------------

def hidden_system_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """PATH without /usr/local/bin and /usr/local/cuda*, no CUDA_HOME: no system toolkit in sight."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDA_ROOT")}
    keep = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not p.startswith("/usr/local/bin") and not p.startswith("/usr/local/cuda")]
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *keep])
    return {**env, **(extra or {})}


def cubin_archs(path: Path) -> list[str]:
    from build_kernel.stages.verify.cubins import find_tool

    cuobjdump = find_tool("cuobjdump", os.environ)
    assert cuobjdump, "cuobjdump (PyPI nvidia-cuda-cuobjdump) not found"
    out = subprocess.run([cuobjdump, "--list-elf", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\.(sm_\d+[af]?)\.cubin", out)


def minor_the_system_lacks(facts: Facts) -> str:
    """A CUDA release on the index that is not the system nvcc's: the next newer one, else the newest older."""
    system = facts.nvcc_version and cudawheels.major_minor(facts.nvcc_version)
    usable = [r for r in index_cuda_releases() if cudawheels.major_minor(r)[0] >= cudawheels.FIRST_MAJOR]
    newer = [r for r in usable if not system or cudawheels.major_minor(r) > system]
    older = [r for r in usable if system and cudawheels.major_minor(r) < system]
    if not newer and not older:
        pytest.skip(f"the index has no CUDA toolkit release other than the system's {facts.nvcc_version}: {usable}")
    return newer[0] if newer else older[-1]


@pytest.mark.slow
def test_auto_for_a_cuda_minor_the_system_lacks_gets_a_working_nvcc_of_that_minor(
        toolkit_cache: Path, tmp_path: Path) -> None:
    facts = machine()
    cuda = minor_the_system_lacks(facts)  # 13.1 with the CI machine's nvcc 13.0
    source, why = cudawheels.choose("auto", facts, cuda, SM120A)
    assert source == "wheels", why
    tk = cudawheels.ensure_toolkit(toolkit_cache, cuda, python=sys.executable, env=os.environ)
    assert tk.cuda == cuda and tk.version.startswith(f"{cuda}.")
    assert_pinned_to(dict(tk.packages), cuda)
    (tmp_path / "k.cu").write_text('#include <cuda_fp4.h>\n__global__ void k(__nv_fp4_e2m1* p) { p[0] = __nv_fp4_e2m1(1.5f); }\n')
    subprocess.run([str(tk.nvcc), "-c", "-arch=sm_120a", "k.cu", "-o", "k.o"], cwd=tmp_path, env=hidden_system_env(),
                   check=True, capture_output=True)
    assert cubin_archs(tmp_path / "k.o") == ["sm_120a"]


@pytest.mark.slow
def test_miniature_builds_for_12_0a_with_the_wheel_toolkit_and_no_system_cuda(
        toolkit: cudawheels.Toolkit, toolkit_cache: Path, tmp_path: Path) -> None:
    """`cuda_source = "wheels"` through the CLI, with no system CUDA on PATH and no CUDA_HOME."""
    from tests.conftest import copy_series, demo_recipe_text, run_cli, write_recipe

    project = tmp_path / "proj"
    (project / "recipes").mkdir(parents=True)
    copy_series(project, sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split()), "v1")
    write_recipe(project, "r", demo_recipe_text().replace('cuda = "13.0"\n', 'cuda = "13.0"\ncuda_source = "wheels"\n')
                 .replace("[build.defines]\n", '[build.defines]\nCMAKE_EXPORT_COMPILE_COMMANDS = "ON"\n'))
    env = hidden_system_env({})
    from build_kernel.process import which

    assert which("nvcc", path=env["PATH"]) is None and "CUDA_HOME" not in env
    proc = subprocess.run([sys.executable, "-m", "build_kernel", "--cache-dir", str(toolkit_cache), "--output-dir",
                           str(project / "wheels"), "--json", "build", "--recipe", str(project / "recipes/r.toml")],
                          env=env, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    tc = result["provenance"]["toolchain"]
    assert tc["cuda_source"] == "wheels" and tc["nvcc"] == str(toolkit.nvcc)
    assert tc["cuda_packages"]["nvidia-cuda-nvcc"].startswith(f"{toolkit.cuda}.")
    # CMake used the wheels' nvcc and never saw the system toolkit.
    build_dir = toolkit_cache / "build" / result["key"] / "cmake"
    cache = (build_dir / "CMakeCache.txt").read_text()
    assert re.search(rf"^CMAKE_CUDA_COMPILER:\w+={re.escape(str(toolkit.nvcc))}$", cache, re.MULTILINE)
    assert "/usr/local/cuda" not in cache
    commands = json.loads((build_dir / "compile_commands.json").read_text())
    cuda_units = [c for c in commands if c["file"].endswith(".cu")]
    assert cuda_units and all(c["command"].startswith(str(toolkit.nvcc)) for c in cuda_units)
    assert not any("/usr/local/cuda" in c["command"] for c in commands)
    # The wheel holds only sm_120a code, with the FP4 conversion the wheels' ptxas emitted.
    verify = run_cli("--json", "verify", result["wheel"], "--recipe", str(project / "recipes/r.toml"))
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, report["failures"]
    [lib] = [lib for lib in report["libraries"] if lib["path"] == "minikernel/sm100/common_ops.so"]
    assert lib["archs"] == ["sm_120a"] and next(iter(lib["fp4_matches"].values())) > 0
