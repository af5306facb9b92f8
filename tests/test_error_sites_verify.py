"""Verify errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The prewarmed JIT cache's check (`jit_cache.verify`, what `serve --install` and `jit-prewarm` run on
the server's tvm-ffi cache) on real caches laid out as tvm-ffi lays them out: an empty one, a module
with no device code (a host-only library gcc builds here), and one whose SASS lacks what the recipe
asks for (a library of the session's demo wheel, real cubins; slow only because that wheel is built
once per session by the demo_build fixture). Each failure is one line naming the module and the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel.archs import parse_arch_list
from build_kernel.errors import VerifyError
from build_kernel.stages.verify import installed, jit_cache, prune_proof
from build_kernel.stages.verify.installed import stale
from tests.conftest import DemoBuild, write_recipe, write_series

ARCHS = parse_arch_list(["12.0a"])


def test_an_empty_cache_says_to_prewarm_it(tmp_path: Path) -> None:
    report = jit_cache.verify(tmp_path, ARCHS, [], dict(os.environ))
    assert not report.passed
    assert report.failures == [f"no JIT module in {tmp_path} (prewarm it: build-kernel jit-prewarm)"]


def test_a_module_without_device_code(tmp_path: Path) -> None:
    entry = tmp_path / "cache" / "host_only_0123abcd"
    entry.mkdir(parents=True)
    (tmp_path / "host.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(entry / "host_only.so"), str(tmp_path / "host.c")],
                   check=True, capture_output=True)
    report = jit_cache.verify(tmp_path / "cache", ARCHS, [], dict(os.environ))
    assert report.failures == ["host_only: no cubin (no device code)"]


@pytest.mark.slow
def test_a_module_whose_sass_lacks_the_asked_instructions(demo_build: DemoBuild, tmp_path: Path) -> None:
    with zipfile.ZipFile(demo_build.wheel) as wheel:
        name = "minikernel/sm100/common_ops.so"  # the library of the 10.0+ archs: 12.0a's cubin
        entry = tmp_path / "cache" / "common_ops_0123abcd"
        entry.mkdir(parents=True)
        (entry / "common_ops.so").write_bytes(wheel.read(name))
    report = jit_cache.verify(tmp_path / "cache", ARCHS, ["NO_SUCH_OPCODE"], dict(os.environ))
    assert report.failures == ["common_ops: none of NO_SUCH_OPCODE in its sm_120a SASS (not compiled for an `a` arch?)"]


def _pure_wheel(folder: Path) -> Path:
    """A pure-Python wheel: a real zip with its dist-info, no library in it."""
    info, path = "demo_pkg-1.0.dist-info", folder / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo_pkg/__init__.py", "")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def test_prune_proof_of_a_wheel_without_cuda_libraries(tmp_path: Path) -> None:
    pure = _pure_wheel(tmp_path)
    proof = prune_proof.prove(pure, pure, (), env=dict(os.environ))
    assert proof.failures == [f"{pure.name}: no CUDA library with device code to compare (give the built wheel, not a "
                              "pure-Python one)"]


@pytest.mark.slow
def test_prune_proof_against_a_wheel_that_lacks_the_library(demo_build: DemoBuild, tmp_path: Path) -> None:
    pure = _pure_wheel(tmp_path)
    proof = prune_proof.prove(demo_build.wheel, pure, (), env=dict(os.environ))
    assert f"minikernel/sm100/common_ops.so: not in the unpruned wheel {pure.name} (compare with a wheel of the same " \
           "commit and archs built without the arch-pruning patch)" in proof.failures


# --- doctor --installed ------------------------------------------------------------------------

def test_doctor_installed_with_a_recipe_that_verifies_nothing(project: Path) -> None:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "noimports", f"""\
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{'a' * 40}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        """)
    with pytest.raises(VerifyError) as info:
        installed.examine(sys.executable, archs=None, env=dict(os.environ), recipe_name=str(path))
    assert info.value.exit_code == 7
    assert info.value.render() == (f"recipe {path} names no [verify] import_modules (give a recipe that verifies the "
                                   "package to examine)")


def test_doctor_installed_on_an_interpreter_that_lists_nothing() -> None:
    true = shutil.which("true") or "/bin/true"
    with pytest.raises(VerifyError) as info:
        stale.scan(true, dict(os.environ), None)
    assert info.value.render() == f"could not list the packages of {true}: ? (pass --python PATH of a working interpreter)"
