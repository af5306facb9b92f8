"""Verify errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The prewarmed JIT cache's check (`jit_cache.verify`, what `serve --install` and `jit-prewarm` run on
the server's tvm-ffi cache) on real caches laid out as tvm-ffi lays them out: an empty one, a module
with no device code (a host-only library gcc builds here), and one compiled for another arch whose SASS
lacks what the recipe asks for; a static verify and the prune proof of real wheels; `verify --rebuild`'s
reading of a wheel's provenance. Device code is a real cubin (ptxas of a one-instruction kernel, wrapped
by fatbinary into a gcc library's .nv_fatbin section, as nvcc places it): milliseconds, where a CUDA
compile takes seconds; the two tests that disassemble it spend ~1 s in nvdisasm. Each failure is one line
naming the library or module and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel import plan as plan_mod
from build_kernel.archs import parse_arch_list
from build_kernel.errors import VerifyError
from build_kernel.recipe.load import load
from build_kernel.recipe.model import Verify
from build_kernel.stages.verify import checks, installed, jit_cache, prune_proof, prune_proof_outputs, rebuild
from build_kernel.stages.verify.installed import stale
from tests.conftest import write_recipe, write_series

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


# --- verify --rebuild: what the wheel says about itself ------------------------------------------

def test_rebuild_of_a_wheel_without_or_with_too_little_provenance(tmp_path: Path) -> None:
    pure = _pure_wheel(tmp_path)
    with pytest.raises(VerifyError) as info:
        rebuild.of(pure)
    assert info.value.exit_code == 7
    assert info.value.render() == (f"{pure.name} carries no build-kernel provenance (build_kernel_provenance.json) "
                                   "(only a wheel build-kernel built can be rebuilt from what it says about itself)")
    old = tmp_path / "old" / pure.name
    old.parent.mkdir()
    with zipfile.ZipFile(pure) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item))
        dst.writestr("demo_pkg-1.0.dist-info/build_kernel_provenance.json", json.dumps({"recipe": "demo"}))
    with pytest.raises(VerifyError) as info:
        rebuild.of(old)
    assert info.value.render() == (f"{pure.name}'s provenance lacks commit, series_digest, archs (the wheel is older "
                                   "than the provenance a rebuild needs: build it again with this build-kernel, then "
                                   "rebuild that)")


def test_rebuild_with_a_recipe_edited_since_the_wheel(project: Path, tmp_path: Path) -> None:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "edited", f"""\
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{'a' * 40}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        """)
    plan = plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path)}, cache_dir=tmp_path / "cache",
                            output_dir=tmp_path / "out")
    said = {"recipe": "edited", "recipe_digest": "0" * 16, "commit": "a" * 40}
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with pytest.raises(VerifyError) as info:
        rebuild.check_plan(wheel, said, plan)
    assert info.value.render() == (f"{wheel.name} was built by recipe edited with digest {'0' * 16}; {path} now has "
                                   f"digest {plan.recipe.digest} (pass the recipe file that built the wheel (--recipe "
                                   "PATH), e.g. from the git history)")


def test_a_library_that_calls_code_the_build_left_out(tmp_path: Path) -> None:
    """A real host library (gcc) calling a function nothing defines, in a real wheel; a static verify binds its
    symbols as its import would (ldd -r) and names the missing one."""
    (tmp_path / "ops.c").write_text("int kernel_impl(int);\nint entry(int a) { return kernel_impl(a); }\n")
    so = tmp_path / "_C.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "ops.c")], check=True, capture_output=True)
    wheel = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(so, "demo_pkg/_C.so")
        zf.writestr("demo_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
        zf.writestr("demo_pkg-1.0.dist-info/RECORD", "")
    report = checks.verify(wheel, Verify(), ARCHS, env=dict(os.environ), static=True)
    assert not report.passed
    assert ("demo_pkg/_C.so: 1 symbol(s) that no library it loads defines, e.g. kernel_impl: its import fails with "
            "'undefined symbol' (the build left out the code that defines them while a caller stayed: rebuild with "
            "those sources; `nm -D --undefined-only _C.so` lists them)") in report.failures


# --- device code: a real library with one real cubin, made in milliseconds --------------------------

def _device_library(folder: Path, sm: str) -> Path:
    """A host library (gcc) carrying a fat binary with one real cubin for `sm` (ptxas of a one-instruction PTX
    kernel, wrapped by fatbinary) in the .nv_fatbin section, where nvcc puts it: what cuobjdump and nvdisasm read
    in a CUDA extension, without a CUDA compile (nvcc takes seconds)."""
    tools = {name: shutil.which(name) for name in ("ptxas", "fatbinary", "objcopy", "gcc")}
    if missing := [name for name, path in tools.items() if path is None]:
        pytest.skip(f"{', '.join(missing)} not on PATH (the CUDA toolkit's bin, binutils)")
    folder.mkdir(parents=True, exist_ok=True)
    ptx, cubin, fatbin = folder / f"k{sm}.ptx", folder / f"k{sm}.cubin", folder / f"k{sm}.fatbin"
    ptx.write_text(f".version 8.7\n.target sm_{sm}\n.address_size 64\n.visible .entry kernel()\n{{\n\tret;\n}}\n")
    host, out = folder / "host.c", folder / f"ops_{sm}.so"
    host.write_text("int host(void) { return 1; }\n")
    for cmd in ([tools["ptxas"], f"-arch=sm_{sm}", ptx, "-o", cubin],
                [tools["fatbinary"], f"--create={fatbin}", f"--image3=kind=elf,sm={sm},file={cubin}"],
                [tools["gcc"], "-shared", "-fPIC", host, "-o", folder / "host.so"],
                [tools["objcopy"], f"--add-section=.nv_fatbin={fatbin}", "--set-section-flags=.nv_fatbin=alloc,readonly",
                 folder / "host.so", out]):
        subprocess.run([str(c) for c in cmd], check=True, capture_output=True)  # type: ignore[union-attr]
    return out


def _wheel_of(so: Path, folder: Path) -> Path:
    wheel = folder / "demo_pkg-1.0-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(so, "demo_pkg/_C.so")
        zf.writestr("demo_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
        zf.writestr("demo_pkg-1.0.dist-info/RECORD", "")
    return wheel


def test_a_library_built_for_another_arch_than_asked(tmp_path: Path) -> None:
    """A static verify asked for 12.0a of a wheel whose library holds only an sm_90a cubin: no code for the asked
    arch, and no FP4 code where the recipe's FP4 library must have it (no nvdisasm run: no sm_120a cubin)."""
    wheel = _wheel_of(_device_library(tmp_path / "lib", "90a"), tmp_path / "wheel")
    report = checks.verify(wheel, Verify(fp4_library="demo_pkg/_C.so", fp4_sass=("E2M1",)), ARCHS,
                           env=dict(os.environ), static=True)
    assert report.failures == [
        "demo_pkg/_C.so: no cubin or PTX for sm_120a (has sm_90a)",
        "demo_pkg/_C.so: no FP4 instructions (E2M1) in it: no sm_120a cubin to disassemble: the FP4 kernels were not "
        "compiled (ENABLE_NVFP4 off? upstream skips it when CUDA_VERSION is empty)"]


def test_a_jit_module_compiled_for_another_arch(tmp_path: Path) -> None:
    """The prewarmed cache's module holds an sm_90a cubin (real SASS, disassembled: ~1 s of nvdisasm) where
    12.0a was asked, and none of the asked instructions."""
    entry = tmp_path / "cache" / "ops_0123abcd"
    entry.mkdir(parents=True)
    shutil.copy(_device_library(tmp_path / "lib", "90a"), entry / "ops.so")
    report = jit_cache.verify(tmp_path / "cache", ARCHS, ["E2M1"], dict(os.environ))
    assert report.failures == ["ops: cubins for sm_90a, not the asked sm_120a",
                               "ops: none of E2M1 in its sm_90a SASS (not compiled for an `a` arch?)"]


def test_prune_proof_against_a_wheel_without_the_library(tmp_path: Path) -> None:
    """The pruned wheel's library has device code (a real sm_120a kernel, ~1 s of nvdisasm); the wheel to compare
    with has no such library."""
    wheel = _wheel_of(_device_library(tmp_path / "lib", "120a"), tmp_path / "wheel")
    pure = _pure_wheel(tmp_path)
    proof = prune_proof.prove(wheel, pure, (), env=dict(os.environ))
    assert proof.failures == [f"demo_pkg/_C.so: not in the unpruned wheel {pure.name} (compare with a wheel of the "
                              "same commit and archs built without the arch-pruning patch)"]


def test_a_gpu_outputs_record_that_is_not_one(tmp_path: Path) -> None:
    """prune-proof --outputs given a JSON file of another shape (what bench/pruning's compare writes is needed)."""
    record = tmp_path / "outputs.json"
    record.write_text(json.dumps({"cases": 3}))
    with pytest.raises(VerifyError) as info:
        prune_proof_outputs.load(record)
    assert info.value.exit_code == 7
    assert info.value.render() == (f"{record}: no record of outputs compared on the GPU (KeyError: 'functions') (give "
                                   "the JSON bench/pruning/fp8_kernels_bitwise.py compare writes ({\"functions\": "
                                   "[{\"arch\", \"function\", \"cases\", \"bitwise_equal\"}]}))")
