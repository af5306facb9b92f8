"""Builder errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The builder's own functions, called as the build stage calls them, on real files in tmp_path: the
setuptools backend's version file and the built wheel's version, where nvcc comes from (`choose`, with
the facts the toolchain probe gives), pip installing the CUDA toolkit from an index that has nothing
(a real pip against an empty local index: no network), and a nightly's version. Each error is one
line naming what is wrong and the fix, with its kind's exit code (BuildError 6, ToolchainError 3).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel import host_compiler, lock, process, toolchain
from build_kernel import plan as plan_mod
from build_kernel.archs import parse_arch_list
from build_kernel.errors import BuildError, RecipeError, ToolchainError
from build_kernel.recipe.load import load
from build_kernel.stages.builder import (
    backends,
    buildenv,
    cudawheels,
    devrelease,
    provenance,
    runner,
    scheduling,
    wheelindex,
    wheelpins,
)
from build_kernel.stages.fetch import pins
from build_kernel.toolchain import Facts
from tests.conftest import write_recipe, write_series
from tests.test_publish import make_wheel


def test_setuptools_version_file_without_a_version_line(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text("VERSION = '1.0'\n")
    with pytest.raises(BuildError) as info:
        backends.Setuptools("version.py").read_version(tmp_path)
    assert info.value.exit_code == 6
    assert info.value.render() == (f"{tmp_path / 'version.py'}: no `__version__ = \"...\"` line to stamp "
                                   "(fix [build] version_file: the file setup.py reads its version from)")


def test_a_wheel_that_says_another_version_than_stamped(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0+cu130.local-py3-none-any.whl"
    with pytest.raises(BuildError) as info:
        backends.check_version(wheel, "1.0+cu130")
    assert info.value.render() == (
        f"{wheel.name} says version 1.0+cu130.local, the tool stamped 1.0+cu130 (the package adds to its version "
        "itself (e.g. a *_LOCAL_VERSION variable in [build] env): unset that, or point [build] version_file at the "
        "line setup.py reads)")


def test_cuda_toolkit_for_a_torch_without_cuda_or_without_a_pypi_compiler() -> None:
    facts = Facts(python=sys.executable, python_version="3.12")  # no system nvcc found
    with pytest.raises(ToolchainError) as info:
        cudawheels.choose("auto", facts, "", parse_arch_list(["12.0a"]))
    assert info.value.exit_code == 3
    assert info.value.render() == ("torch has no CUDA (a CPU build?): cannot match a CUDA toolkit to it (install a "
                                   "CUDA build of torch (e.g. +cu130))")
    with pytest.raises(ToolchainError) as info:
        cudawheels.choose("auto", facts, "12.8", parse_arch_list(["9.0a"]))
    assert info.value.message.startswith("no system nvcc found, and PyPI has no CUDA 12.8 compiler "
                                         "(nvidia-cuda-nvcc-cu12 holds ptxas and libnvvm but no nvcc, cicc or cudafe++")
    assert info.value.hint is not None and info.value.hint.startswith("install CUDA 12.8 (e.g. /usr/local/cuda-12.8)")


def test_pip_finding_no_toolkit_in_the_index(tmp_path: Path) -> None:
    """A real pip, its index an empty local folder: what a host without the index's files meets."""
    empty = tmp_path / "index"
    empty.mkdir()
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty), "PATH": "/usr/bin:/bin"}
    log = tmp_path / "pip.log"
    with pytest.raises(ToolchainError) as info:
        cudawheels._pip_install(sys.executable, tmp_path / "target", ["nvidia-cuda-nvcc==13.0.88"], "13.0", log, env)
    assert info.value.render() == (
        f"no CUDA 13.0 toolkit: pip found no nvidia-cuda-nvcc at all (no network or no index?); full log: {log} "
        "(check network / PIP_INDEX_URL, or build offline with a cached toolkit)")
    assert not (tmp_path / "target" / ".pip-tmp").exists()


def test_a_nightly_of_a_version_that_is_not_pep440() -> None:
    with pytest.raises(BuildError) as info:
        devrelease.stamp("0.4-final-build", "20261207")
    assert info.value.render() == ("the package's version '0.4-final-build' is not PEP 440, so nights cannot sort by "
                                   "it (build a commit whose version is PEP 440 (e.g. 0.4.3))")


def test_the_preflight_names_a_missing_torch_and_cmake() -> None:
    facts = Facts(python="/srv/env/bin/python", python_version="3.12", nvcc="/usr/local/cuda/bin/nvcc",
                  nvcc_version="13.0", ninja="/usr/bin/ninja", ninja_version="1.11")
    problems = toolchain.preflight(facts, parse_arch_list(["12.0a"]), cmake_spec=">=3.26", want_cuda="13.0")
    assert problems == ["torch is not importable by /srv/env/bin/python: install the recipe's torch there or set "
                        "[toolchain] torch", "cmake not found: pip install cmake (or put cmake >= 3.26 on PATH)"]
    with pytest.raises(ToolchainError) as info:
        toolchain.require(problems)
    assert info.value.exit_code == 3 and info.value.render() == "; ".join(problems)


def test_a_nightly_torch_offline_or_from_an_index_without_nights(project: Path, tmp_path: Path) -> None:
    """The index is a real PEP 503 folder read through file:// (what a mirror of the nightly index is)."""
    index = tmp_path / "index"
    (index / "torch").mkdir(parents=True)
    (index / "torch" / "index.html").write_text(
        '<a href="torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=00">torch-2.9.1</a>\n')
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "n", f"""\
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{'a' * 40}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        [toolchain]
        torch = "nightly"
        torch_index = "{index.as_uri()}/"
        """)
    plan = plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path)}, cache_dir=tmp_path / "cache",
                            output_dir=tmp_path / "out")
    pin = wheelpins.WheelPin("toolchain.torch", "torch", "nightly", f"{index.as_uri()}/", f"{index.as_uri()}/")
    with pytest.raises(ToolchainError) as info:
        wheelpins.newest(plan, pin, offline=True)
    assert info.value.render() == (
        f"[toolchain.torch] torch = \"nightly\" is not in {pins.lock_path(plan)} and --offline forbids asking "
        f"{index.as_uri()}/ for the newest (run `build-kernel lock --recipe {path}` once with the network, which "
        "locks it)")
    with pytest.raises(ToolchainError) as info:
        wheelpins.newest(plan, pin, offline=False)
    assert info.value.message.startswith(f"[toolchain.torch] torch = \"nightly\": {index.as_uri()}/ lists no "
                                         "development release of torch for this Python and platform (")
    # `build-kernel lock` asks the same index: nothing to lock, nothing written
    with pytest.raises(ToolchainError) as info:
        lock._wheel(plan, pin, upgrade=False)
    assert info.value.message.startswith(f"[toolchain.torch] torch = \"nightly\": {index.as_uri()}/ lists no "
                                         "development release of torch for ")
    assert info.value.message.endswith("; nothing written")
    assert not pins.lock_path(plan).exists()


def test_a_conversation_with_a_program_that_is_not_there(tmp_path: Path) -> None:
    """process.converse (the flag parser's and the import probe's long-lived child) given a missing program."""
    missing = tmp_path / "env" / "bin" / "python"
    with pytest.raises(ToolchainError) as info:
        process.converse([missing, "-c", "pass"], error=ToolchainError, what="asking the interpreter",
                         fix="make the environment first")
    assert info.value.render() == f"asking the interpreter: {missing} not found (make the environment first)"


def test_a_file_index_folder_that_is_not_there(tmp_path: Path) -> None:
    missing = tmp_path / "mirror" / "simple"
    with pytest.raises(ToolchainError) as info:
        wheelindex.listed(f"{missing.as_uri()}/", "torch", {})
    assert info.value.message == f"cannot read the index {missing.as_uri()}/torch/: {missing} does not exist"


def _plan(project: Path, tmp_path: Path, env: dict[str, str] | None = None) -> plan_mod.Plan:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "b", f"""\
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{'a' * 40}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        """)
    return plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path), **(env or {})}, cache_dir=tmp_path / "cache",
                            output_dir=tmp_path / "out")


def _pip(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A real pip, none of this host's pip configuration (its constraints, find-links) read."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull}
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], env=env,
                          capture_output=True, text=True, check=False)


def test_installing_torch_from_an_index_that_refuses_or_lacks_it(tmp_path: Path) -> None:
    """pip's own output for a torch index nobody listens on (connection refused: no network needed), then for
    an index folder without torch (--quiet, as the build environment runs pip), read as the build environment reads
    a failed install."""
    index, log = "http://127.0.0.1:9/whl/cu130", tmp_path / "env.log"
    argv = ["pip", "install", "--retries", "1", "--timeout", "2", "--index-url", index, "--target",
            str(tmp_path / "t"), "torch==2.9.1"]
    refused = _pip(tmp_path, *argv[1:])
    assert refused.returncode != 0
    error = buildenv._install_failure(argv, refused.returncode, refused.stderr + refused.stdout, "2.9.1", index, log,
                                      "mirrors.toml")
    assert error.exit_code == 3
    assert error.render() == (
        f"installing torch 2.9.1: pip could not reach the torch index {index}: Connection refused; full log: {log} "
        "(check the network, the proxy and pip's configuration (`pip config list`), or map the index to a mirror you "
        "can reach in mirrors.toml)")
    (tmp_path / "empty").mkdir()
    argv = ["pip", "install", "--quiet", "--no-index", "--find-links", str(tmp_path / "empty"), "--target", str(tmp_path / "t"),
            "torch==2.9.1"]
    lacking = _pip(tmp_path, *argv[1:])
    error = buildenv._install_failure(argv, lacking.returncode, lacking.stderr + lacking.stdout, "2.9.1", index, log,
                                      "mirrors.toml")
    assert error.render() == (
        f"installing torch 2.9.1: `{shlex.join(argv)}` exited 1: ERROR: No matching distribution found for "
        f"torch==2.9.1; full log: {log} (check [toolchain] torch / torch_index, or set torch = \"existing\")")


def test_a_locked_torch_whose_file_changed(project: Path, tmp_path: Path) -> None:
    """A real pip refusing a real wheel whose bytes are not the ones locked."""
    plan = _plan(project, tmp_path)
    wheel = make_wheel(tmp_path / "idx", "torch", "2.9.1")
    locked = "0" * 64
    proc = _pip(tmp_path, "download", "--no-deps", "--no-index", "-d", str(tmp_path / "dl"),
                f"torch @ {wheel.as_uri()}#sha256={locked}")
    assert proc.returncode != 0
    pin = wheelpins.WheelPin("toolchain.torch", "torch", "2.9.1", "https://download.pytorch.org/whl/cu130",
                             "https://download.pytorch.org/whl/cu130")
    found = wheelpins.Locked("2.9.1", wheel.as_uri(), locked, wheel.name, "cp311-linux_x86_64")
    error = wheelpins.hash_mismatch(plan, pin, found, proc.stderr + proc.stdout, tmp_path / "env.log")
    assert error is not None and error.exit_code == 3
    got = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert error.message == (f"[toolchain.torch] torch 2.9.1: the file at {wheel.as_uri()} does not match "
                             f"{pins.lock_path(plan)} (sha256 {locked[:16]}... locked, {got[:16]}... downloaded); "
                             f"nothing installed; full log: {tmp_path / 'env.log'}")
    assert "\n" not in error.render()


def test_a_scheduler_the_environment_names_that_does_not_exist(project: Path, tmp_path: Path) -> None:
    plan = _plan(project, tmp_path, {"BUILD_KERNEL_SCHEDULER": "fastest"})
    with pytest.raises(RecipeError) as info:
        scheduling.choose(plan, "1.12.1", tmp_path / "work")
    assert info.value.exit_code == 2
    assert info.value.render() == ("environment BUILD_KERNEL_SCHEDULER (--compile-scheduler): scheduler 'fastest' is "
                                   "not one of auto, static, governor (e.g. BUILD_KERNEL_SCHEDULER=governor)")


def test_a_backend_wheel_without_metadata(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
    with pytest.raises(BuildError) as info:
        provenance.inject(wheel, sys.executable, {}, tmp_path / "work", tmp_path / "log", epoch=provenance.ZIP_EPOCH_MIN)
    assert info.value.render() == (f"{wheel.name} has no .dist-info/METADATA (the build backend wrote a broken wheel: "
                                   "see the build log)")


def test_a_compile_oom_killed_with_one_job_left(tmp_path: Path) -> None:
    """The build command a real program that prints what g++ prints when the OOM killer took cc1plus."""
    script = tmp_path / "build.py"
    script.write_text("import sys\nprint('g++: fatal error: Killed signal terminated program cc1plus')\nsys.exit(1)\n")
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as info:
        runner.build_with_retries([sys.executable, str(script)], lambda jobs: dict(os.environ), cwd=tmp_path,
                                  log_path=log, jobs=1, max_oom_retries=2)
    assert info.value.render() == (f"compile OOM-killed (Killed signal terminated program cc1plus) even with 1 job(s); "
                                   f"full log: {log} (free memory, lower [build] nvcc_threads, or build fewer archs)")


def test_a_tmpdir_that_does_not_exist_is_named_not_the_host_compiler(tmp_path: Path) -> None:
    """The real nvcc in a TMPDIR that is missing (or a file) says only `Could not open output file`: the build's
    preflight names TMPDIR, not the host compiler."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    for tmpdir, what in ((tmp_path / "gone" / "tmp", "does not exist"), (tmp_path / "file", "is not a folder")):
        if what == "is not a folder":
            tmpdir.write_text("")
        problem = host_compiler.check_host_compiler(nvcc, None, env={**os.environ, "TMPDIR": str(tmpdir)})
        assert problem == (f"TMPDIR={tmpdir} {what}, and nvcc writes its temporary files there (create it, or unset "
                           "TMPDIR)")
        with pytest.raises(ToolchainError) as info:
            toolchain.require([problem])
        assert info.value.exit_code == 3
