"""Verify on real wheels the tests make: PTX only for the asked arch, a CUDA 12 library that
is not installed, torch symbols of another torch; static mode; the record reused.

The libraries are compiled here for real (nvcc for device code, g++ for host code) and
packed with `wheel pack`; the loader errors are the real dynamic loader's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel import toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.errors import VerifyError
from build_kernel.recipe import LibraryRule, Verify
from build_kernel.stages.verify import checks
from build_kernel.stages.verify.report import require_verified

ARCH = parse_arch_list("12.0a")
KERNEL = "__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n"
LOADER = "import ctypes, pathlib\nctypes.CDLL(str(pathlib.Path(__file__).parent / 'libwork.so'))\n"


def nvcc() -> str:
    found = toolchain.find_nvcc(dict(os.environ))
    if not found:
        pytest.skip("no nvcc: these wheels hold device code compiled here")
    return found


def make_wheel(tmp: Path, name: str, lib: Path, *, provenance_torch: str | None = None,
               dist: str | None = None, version: str = "0.1", loader: str = LOADER) -> Path:
    """A real wheel: package `name` whose import loads `libwork.so` with the dynamic loader (`loader`: its
    __init__.py) (distribution `dist`, default `name`, at `version`)."""
    dist = dist or name
    root = tmp / f"{dist}-{version}"
    pkg, info = root / name, root / f"{dist}-{version}.dist-info"
    pkg.mkdir(parents=True)
    info.mkdir()
    (pkg / "__init__.py").write_text(loader)
    (pkg / "libwork.so").write_bytes(lib.read_bytes())
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")
    if provenance_torch:
        (info / "build_kernel_provenance.json").write_text(json.dumps({"toolchain": {"torch": provenance_torch}}))
    out = tmp / "dist"
    out.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(root)], check=True, capture_output=True)
    [wheel] = list(out.glob(f"{dist}-*.whl"))
    return wheel


def cuda_lib(tmp: Path, gencode: str, *link: str) -> Path:
    src = tmp / "work.cu"
    src.write_text(KERNEL)
    out = tmp / f"libwork-{abs(hash((gencode, link)))}.so"
    subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", f"-gencode={gencode}", "-o", str(out), str(src), *link],
                   check=True, capture_output=True)
    return out


def linked_lib(tmp: Path, soname: str, definition: str, use: str) -> Path:
    """A CUDA library (KERNEL + `use`) linked against a real `soname` (its C source: `definition`) that is left out
    of the wheel and of this host's loader path."""
    stub_dir = tmp / "stub"
    stub_dir.mkdir()
    (stub_dir / "stub.c").write_text(definition)
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(stub_dir / soname),
                    str(stub_dir / "stub.c")], check=True)
    (tmp / "uses.cu").write_text(KERNEL + use)
    lib = tmp / "libuses.so"
    subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_120a,code=sm_120a", "-o", str(lib),
                    str(tmp / "uses.cu"), f"-L{stub_dir}", f"-l:{soname}"], check=True, capture_output=True)
    return lib


def nvrtc12_lib(tmp: Path) -> Path:
    """A library of a CUDA 12 build: it calls nvrtcVersion of libnvrtc.so.12."""
    return linked_lib(tmp, "libnvrtc.so.12", "int nvrtcVersion(int* a, int* b) { *a = 12; *b = 8; return 0; }\n",
                      'extern "C" int nvrtcVersion(int*, int*);\n'
                      'extern "C" int version() { int a, b; return nvrtcVersion(&a, &b); }\n')


@pytest.mark.slow
def test_ptx_only_for_the_asked_arch_is_a_warning_and_no_code_is_a_failure(tmp_path: Path) -> None:
    spec = Verify(import_modules=("ptxonly",))
    wheel = make_wheel(tmp_path, "ptxonly", cuda_lib(tmp_path, "arch=compute_120a,code=compute_120a"))
    report = checks.verify(wheel, spec, ARCH, env=os.environ)
    assert report.passed, report.failures
    [lib] = report.libraries
    assert lib.archs == [] and lib.ptx == ["sm_120a"] and lib.jit == ["sm_120a"]
    assert any(w.startswith("ptxonly/libwork.so: sm_120a only as compute_120a PTX: the driver compiles it on first load")
               for w in report.warnings)
    hopper = make_wheel(tmp_path / "h", "hopperonly", cuda_lib(tmp_path, "arch=compute_90a,code=sm_90a"))
    failed = checks.verify(hopper, Verify(), ARCH, env=os.environ, static=True)
    assert failed.failures == ["hopperonly/libwork.so: no cubin or PTX for sm_120a (has sm_90a)"]
    # A rule that says nothing loads it on the asked archs: listed, not failed.
    ruled = checks.verify(hopper, Verify(libraries=(LibraryRule(glob="hopperonly/*", when_asked=("9.0a",)),)), ARCH,
                          env=os.environ, static=True)
    assert ruled.passed and not ruled.libraries[0].applies


@pytest.mark.slow
def test_a_cuda_12_library_that_is_absent_names_both_cudas(tmp_path: Path) -> None:
    # A real libnvrtc.so.12 to link against, left out of the wheel: as a CUDA 12 build met on a CUDA 13 stack.
    wheel = make_wheel(tmp_path, "cuda12", nvrtc12_lib(tmp_path))
    report = checks.verify(wheel, Verify(import_modules=("cuda12",)), ARCH, env=os.environ, want_cuda="13.0")
    facts = toolchain.detect(sys.executable, os.environ)
    assert report.failures == [f"import cuda12 failed: built for CUDA 12 (needs libnvrtc.so.12); this stack is CUDA "
                               f"{facts.torch_cuda} (torch {facts.torch_version}): build it with the recipe"]
    assert "libnvrtc.so.12: cannot open shared object file" in report.import_details["cuda12"]
    assert report.cuda_linked["libnvrtc.so.12"] == "12"
    # Statically: it passes (its device code is right) but says which CUDA it needs.
    static = checks.verify(wheel, Verify(import_modules=("cuda12",)), ARCH, env=os.environ, static=True,
                           want_cuda="13.0")
    assert static.passed and static.checks["import"] is False
    assert any(w.startswith("built for CUDA 12 (links libnvrtc.so.12); the recipe targets CUDA 13.0") for w in static.warnings)


@pytest.mark.slow
def test_torch_symbols_of_another_torch_name_both_torches(tmp_path: Path) -> None:
    # A symbol of c10's namespace that this torch does not export, as a library built against
    # another torch has; its provenance names that torch.
    (tmp_path / "other.cu").write_text(KERNEL + "namespace c10 { void SymbolOnlyIn299(); }\n"
                                       "extern \"C\" void touch() { c10::SymbolOnlyIn299(); }\n")
    lib = tmp_path / "libother.so"
    subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_120a,code=sm_120a", "-o",
                    str(lib), str(tmp_path / "other.cu")], check=True, capture_output=True)
    wheel = make_wheel(tmp_path, "othertorch", lib, provenance_torch="2.99.0+cu130")
    report = checks.verify(wheel, Verify(import_modules=("othertorch",)), ARCH, env=os.environ)
    facts = toolchain.detect(sys.executable, os.environ)
    [failure] = report.failures
    assert failure == (f"import othertorch failed: built against torch 2.99.0+cu130, this stack has torch "
                       f"{facts.torch_version} (undefined symbol c10::SymbolOnlyIn299()): build it with the recipe")
    assert "undefined symbol: _ZN3c1015SymbolOnlyIn299Ev" in report.import_details["othertorch"]


@pytest.mark.slow
def test_the_record_is_reused_for_the_same_bytes_and_checks_only(tmp_path: Path) -> None:
    spec = Verify(import_modules=("ptxonly",))
    wheel = make_wheel(tmp_path, "ptxonly", cuda_lib(tmp_path, "arch=compute_120a,code=sm_120a"))
    first = checks.verify(wheel, spec, ARCH, env=os.environ, reuse=True)
    assert first.passed and not first.from_record
    again = checks.verify(wheel, spec, ARCH, env=os.environ, reuse=True)
    assert again.from_record and again.to_dict()["libraries"] == first.to_dict()["libraries"]
    # Other checks (static) run; a touched file with the same bytes is hashed and reused; other bytes run.
    assert not checks.verify(wheel, spec, ARCH, env=os.environ, reuse=True, static=True).from_record
    os.utime(wheel, ns=(1, 1))
    assert checks.verify(wheel, spec, ARCH, env=os.environ, reuse=True, static=True).from_record
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("ptxonly/extra.txt", "changed")
    assert not checks.verify(wheel, spec, ARCH, env=os.environ, reuse=True, static=True).from_record
    # A static-only record does not let publish through.
    with pytest.raises(VerifyError, match="verified statically only"):
        require_verified(wheel)


FP4_TU = r"""
#include <cuda_fp4.h>
__global__ void quant(const float2* x, __nv_fp4x2_storage_t* y) {
  y[threadIdx.x] = __nv_cvt_float2_to_fp4x2(x[threadIdx.x], __NV_E2M1, cudaRoundNearest);
}
"""


@pytest.mark.slow
def test_fp4_counts_are_kept_by_content(tmp_path: Path) -> None:
    """A library of three TUs (one cubin each; one with an FP4 conversion): the absence proof of the two others
    disassembles every cubin, once; a second scan of the same bytes takes their kept counts."""
    from build_kernel.stages.verify import cubins

    for name, text in (("a.cu", KERNEL), ("b.cu", KERNEL.replace("scale", "shift").replace("*=", "+=")),
                       ("fp4.cu", FP4_TU)):
        (tmp_path / name).write_text(text)
    gencode = "-gencode=arch=compute_120a,code=sm_120a"
    plain, mixed = tmp_path / "libplain.so", tmp_path / "libmixed.so"
    for out, sources in ((plain, ["a.cu", "b.cu"]), (mixed, ["a.cu", "b.cu", "fp4.cu"])):
        subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", gencode, "-o", str(out),
                        *(str(tmp_path / s) for s in sources)], check=True, capture_output=True)
    env = cubins.tool_env(dict(os.environ))
    tool, patterns, kept = cubins.cuobjdump(env), ("F2FP\\.\\S*E2M1", "E2M1"), tmp_path / "kept"
    first = cubins.fp4_scan(plain, "sm_120a", patterns, tool, env, tmp_path / "w1", 2, counts_dir=kept)
    n = first.total  # a cubin per TU, and one nvcc adds
    assert (first.matches, first.scanned, first.kept) == ({p: 0 for p in patterns}, n, 0) and n >= 2
    again = cubins.fp4_scan(plain, "sm_120a", patterns, tool, env, tmp_path / "w2", 2, counts_dir=kept)
    assert (again.matches, again.scanned, again.kept) == (first.matches, n, n)
    assert again.describe("sm_120a") == f"{n} of {n} sm_120a cubins disassembled, {n} of them by their kept counts"
    # The same TUs in another library: their cubins' bytes are kept; only the FP4 one is disassembled.
    both = cubins.fp4_scan(mixed, "sm_120a", patterns, tool, env, tmp_path / "w3", 2, counts_dir=kept, complete=True)
    assert both.matches[patterns[0]] >= 1 and (both.scanned, both.kept) == (n + 1, n)
    # Other patterns are other counts: nothing kept applies.
    other = cubins.fp4_scan(plain, "sm_120a", ("OMMA",), tool, env, tmp_path / "w4", 2, counts_dir=kept)
    assert other.kept == 0


@pytest.mark.slow
def test_a_library_calling_code_the_build_left_out_fails_statically_and_names_the_symbol(tmp_path: Path) -> None:
    """As the 9.0a 0.4.3 wheel of 2026-12-06: host dispatch compiled in, the kernel it calls left out. The library
    links (an extension may leave symbols undefined) and its package may swallow the ImportError; the loader's own
    binding (ldd -r) finds it, with or without an import. The same source with the kernel compiled in passes."""
    dispatch = (KERNEL + "namespace sm100 { void run_kernel(int heads); }\n"
                "extern \"C\" void dispatch(int major) { if (major == 10) sm100::run_kernel(64); }\n")
    (tmp_path / "dispatch.cu").write_text(dispatch)
    (tmp_path / "kernel.cu").write_text("namespace sm100 { void run_kernel(int heads) { (void)heads; } }\n")
    gencode = "-gencode=arch=compute_120a,code=sm_120a"
    partial, whole = tmp_path / "libpartial.so", tmp_path / "libwhole.so"
    for out, sources in ((partial, ["dispatch.cu"]), (whole, ["dispatch.cu", "kernel.cu"])):
        subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", gencode, "-o", str(out),
                        *(str(tmp_path / s) for s in sources)], check=True, capture_output=True)
    # The package swallows its library's ImportError, as sgl_kernel's flash_mla.py does: the import check passes.
    swallowing = "try:\n    import ctypes, pathlib\n    ctypes.CDLL(str(pathlib.Path(__file__).parent / 'libwork.so'))\n" \
                 "except OSError:\n    pass\n"
    wheel = make_wheel(tmp_path / "p", "partial", partial, loader=swallowing)
    want = ("partial/libwork.so: 1 symbol(s) that no library it loads defines, e.g. sm100::run_kernel(int): its import "
            "fails with 'undefined symbol' (the build left out the code that defines them while a caller stayed: "
            "rebuild with those sources; `nm -D --undefined-only libwork.so` lists them)")
    for static in (True, False):
        report = checks.verify(wheel, Verify(import_modules=("partial",)), ARCH, env=os.environ, static=static)
        assert report.failures == [want], (static, report.failures)
        assert report.links == {"partial/libwork.so": {"undefined": ["_ZN5sm10010run_kernelEi"]}}
    assert report.imports == {"partial": "ok"}  # what the import alone would have said
    good = checks.verify(make_wheel(tmp_path / "w", "whole", whole), Verify(import_modules=("whole",)), ARCH,
                         env=os.environ)
    assert good.passed and good.links == {} and good.checks["links"], good.failures


@pytest.mark.slow
def test_a_library_needing_what_this_host_lacks_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    # A real libextra.so.7 to link against, left out of the wheel and of the host: its symbols cannot be judged here.
    lib = linked_lib(tmp_path, "libextra.so.7", "int extra_version(void) { return 7; }\n",
                     'extern "C" int extra_version(void);\nextern "C" int version() { return extra_version(); }\n')
    report = checks.verify(make_wheel(tmp_path, "usesextra", lib), Verify(), ARCH, env=os.environ, static=True)
    assert report.passed, report.failures
    assert report.links == {"usesextra/libwork.so": {"undefined": ["extra_version"], "not_found": ["libextra.so.7"]}}
    assert ("usesextra/libwork.so: its symbols were not checked here: it needs libextra.so.7, which this host does "
            "not have") in report.warnings


def test_a_host_without_ldd_is_one_line_naming_the_package_to_install(tmp_path: Path) -> None:
    from build_kernel.stages.verify import links

    with pytest.raises(VerifyError) as err:
        links.check(Path(sys.executable), [], {"PATH": str(tmp_path)})
    assert str(err.value).startswith(f"ldd -r {Path(sys.executable).name}: ldd not found") and "\n" not in str(err.value)
    assert err.value.hint == "install glibc's ldd: libc-bin on Debian/Ubuntu, glibc-common on RHEL"
