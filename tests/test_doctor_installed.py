"""`doctor --installed` on kernel packages the tests build and install for real: CUDA libraries
compiled here by nvcc (an FP4 conversion kernel for sm_120a; one for sm_90a only; one linking a
CUDA 12 libnvrtc; one importing a c10 symbol no torch has), packed as `sgl_kernel` wheels with
`wheel pack`, installed by pip into real virtualenvs that see this torch through a `.pth` line,
then judged by the CLI in a subprocess. Nothing is imported from them: that is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from build_kernel import toolchain
from tests.conftest import run_cli
from tests.test_verify_wheels import nvcc

LIB = "sgl_kernel/sm100/common_ops.abi3.so"
KERNEL = r"""
#include <cuda_fp4.h>
__global__ void plain(float* x) { x[threadIdx.x] *= 2.0f; }
#ifdef WITH_FP4
__global__ void quant(const float2* x, __nv_fp4x2_storage_t* y) {
  y[threadIdx.x] = __nv_cvt_float2_to_fp4x2(x[threadIdx.x], __NV_E2M1, cudaRoundNearest);
}
#endif
#ifdef WITH_NVRTC12
extern "C" int nvrtcVersion(int*, int*);
extern "C" int version() { int a, b; return nvrtcVersion(&a, &b); }
#endif
#ifdef WITH_OTHER_TORCH
namespace c10 { void SymbolOnlyIn299(); }
extern "C" void touch() { c10::SymbolOnlyIn299(); }
#endif
"""
FP4_INIT = "from sgl_kernel.gemm import scaled_fp4_quant\n"
FP4_GEMM = "def scaled_fp4_quant(x, scale):\n    raise NotImplementedError\n"
TORCH = toolchain.detect(sys.executable, {"PATH": ""})


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A CUDA library per (gencode, macros), compiled once for the module."""
    tmp = tmp_path_factory.mktemp("libs")
    (tmp / "k.cu").write_text(KERNEL)
    nvrtc12 = tmp / "nvrtc12"
    nvrtc12.mkdir()
    (nvrtc12 / "nvrtc.c").write_text("int nvrtcVersion(int* a, int* b) { *a = 12; *b = 8; return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libnvrtc.so.12", "-o", str(nvrtc12 / "libnvrtc.so.12"),
                    str(nvrtc12 / "nvrtc.c")], check=True)
    made: dict[tuple[str, tuple[str, ...]], Path] = {}

    def lib(arch: str = "120a", *macros: str) -> Path:
        key = (arch, macros)
        if key not in made:
            out = tmp / f"lib{len(made)}.so"
            # A CUDA 12 build links only CUDA 12 libraries (its runtime static); the others libcudart.so.13.
            link = [f"-L{nvrtc12}", "-l:libnvrtc.so.12"] if "WITH_NVRTC12" in macros else ["-cudart", "shared"]
            subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC",
                            f"-gencode=arch=compute_{arch},code=sm_{arch}", *(f"-D{m}" for m in macros),
                            "-o", str(out), str(tmp / "k.cu"), *link], check=True, capture_output=True)
            made[key] = out
        return made[key]
    return lib


def pack(tmp: Path, dist: str, version: str, files: dict[str, str | Path], *, requires: tuple[str, ...] = (),
         provenance: dict[str, object] | None = None) -> Path:
    """A real wheel of `files` (text, or a library to copy) with its METADATA, packed by `wheel pack`."""
    stem = dist.replace("-", "_")
    root = tmp / f"{stem}-{version}-src"
    info = root / f"{stem}-{version}.dist-info"
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            (root / rel).write_bytes(content.read_bytes())
        else:
            (root / rel).write_text(content)
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n")
    if provenance:
        (info / "build_kernel_provenance.json").write_text(json.dumps(provenance))
    out = tmp / "dist"
    out.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(root)], check=True, capture_output=True)
    return out


def kernel(tmp: Path, lib: Path, *, dist: str = "sgl-kernel", version: str = "0.3.21", fp4_api: bool = True,
           **meta: object) -> Path:
    """An `sgl_kernel` wheel: `lib` as the library SM120 loads; its API `silu_and_mul`, and the FP4 functions
    when `fp4_api` (a kernel with them in its library, as through 0.3.x; from 0.4 they moved to sglang's JIT)."""
    init = "def silu_and_mul(x):\n    raise NotImplementedError\n" + (FP4_INIT if fp4_api else "")
    files: dict[str, str | Path] = {LIB: lib, "sgl_kernel/__init__.py": init,
                                    "sgl_kernel/gemm.py": FP4_GEMM if fp4_api else ""}
    return pack(tmp, dist, version, files, **meta)  # type: ignore[arg-type]


def venv(tmp: Path, *wheel_dirs: Path, specs: tuple[str, ...] = ("sgl-kernel",)) -> Path:
    """A real virtualenv seeing this torch (a `.pth` line); the wheels installed by pip from a folder, as
    from an index (no direct_url.json)."""
    root = tmp / "venv"
    if not root.exists():
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(root)],
                       check=True)
        site = subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip()
        (Path(site) / "_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    links = [a for d in wheel_dirs for a in ("--find-links", str(d))]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--no-index", "--force-reinstall", *links, *specs], check=True, capture_output=True)
    return root / "bin" / "python"


def doctor(python: Path, *args: str) -> tuple[int, dict[str, object]]:
    proc = run_cli("doctor", "--installed", "--python", str(python), "--json", *args)
    assert proc.returncode in (0, 7), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_a_healthy_build_then_a_tampered_file(tmp_path: Path, libs: Callable[..., Path]) -> None:
    wheels = kernel(tmp_path, libs("120a", "WITH_FP4"), version="0.3.21+cu130.sm120a",
                    provenance={"recipe": "sgl-kernel-0.3.21", "toolchain": {"torch": TORCH.torch_version}})
    python = venv(tmp_path, wheels)
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 0, out["verdict"]
    assert out["verdict"] == (f"sgl-kernel 0.3.21+cu130.sm120a (built by build-kernel) is healthy here: CUDA 13 "
                              f"libraries; on torch {TORCH.torch_version}; 12.0a covered; FP4 for sm_120a ahead of time")
    assert out["cuda_linked"] == {"libcudart.so.13": "13"}
    [fp4] = out["fp4"]
    assert fp4["how"] == "aot" and "E2M1" in fp4["detail"]
    # The human form ends in the same verdict.
    human = run_cli("doctor", "--installed", "--python", str(python), "--arch", "12.0a")
    assert human.returncode == 0 and human.stdout.strip().splitlines()[-1] == out["verdict"]
    # One byte of the installed library changed after install: its RECORD says so, and how to put it back.
    origin = out["origin"]
    assert isinstance(origin, dict)
    installed = Path(str(origin["root"])) / LIB
    data = bytearray(installed.read_bytes())
    data[-1] ^= 0xFF
    installed.write_bytes(bytes(data))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 7
    assert out["verdict"] == (f"sgl-kernel 0.3.21+cu130.sm120a (built by build-kernel) has 1 file(s) that differ from "
                              f"its RECORD and 0 missing (e.g. {LIB}): pip install --force-reinstall --no-deps <the "
                              "sgl-kernel 0.3.21+cu130.sm120a wheel you built>")


@pytest.mark.slow
def test_a_cuda_12_build_on_a_cuda_13_torch(tmp_path: Path, libs: Callable[..., Path]) -> None:
    python = venv(tmp_path, kernel(tmp_path, libs("120a", "WITH_FP4", "WITH_NVRTC12")))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 7
    assert out["verdict"] == (f"sgl-kernel 0.3.21 (PyPI) is a CUDA 12 build (links libnvrtc.so.12); this torch is "
                              f"{TORCH.torch_version}: build-kernel --recipe sgl-kernel-0.3.21 --arch 12.0a")


@pytest.mark.slow
def test_a_missing_arch_names_the_library_and_the_arch_to_build(tmp_path: Path, libs: Callable[..., Path]) -> None:
    python = venv(tmp_path, kernel(tmp_path, libs("90a")))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 7
    assert out["verdict"] == (f"sgl-kernel 0.3.21 (PyPI) has no sm_120a code in {LIB} (has sm_90a): "
                              "build-kernel --recipe sgl-kernel-0.3.21 --arch 12.0a")
    # Asked for what it has, it is healthy; no FP4 is asked of 9.0a.
    rc, out = doctor(python, "--arch", "9.0a")
    assert rc == 0 and out["fp4"] == [], out["verdict"]


@pytest.mark.slow
def test_torch_of_another_abi_by_symbol_and_by_pin(tmp_path: Path, libs: Callable[..., Path]) -> None:
    other = kernel(tmp_path / "a", libs("120a", "WITH_FP4", "WITH_OTHER_TORCH"), dist="sglang-kernel",
                   version="0.4.10", fp4_api=False)
    python = venv(tmp_path / "a", other, specs=("sglang-kernel",))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 7
    assert out["verdict"] == (f"sglang-kernel 0.4.10 (PyPI) was built against another torch: 1 of the 1 torch symbols "
                              f"it imports are not in torch {TORCH.torch_version} (e.g. c10::SymbolOnlyIn299()): "
                              "build-kernel --recipe nightly-cu130 --arch 12.0a")
    pinned = kernel(tmp_path / "b", libs("120a", "WITH_FP4"), dist="sglang-kernel", version="0.4.10", fp4_api=False,
                    requires=("torch==2.13.0",))
    rc, out = doctor(venv(tmp_path / "b", pinned, specs=("sglang-kernel",)), "--arch", "12.0a")
    assert rc == 7
    assert out["verdict"] == (f"sglang-kernel 0.4.10 (PyPI) requires torch==2.13.0; this torch is {TORCH.torch_version}: "
                              "build-kernel --recipe nightly-cu130 --arch 12.0a")


def sglang(tmp: Path, version: str, imports: str) -> Path:
    """A real sglang distribution: its NVFP4 JIT module and sources (as sglang ships them from f88acf878), and a
    module that imports from sgl_kernel on CUDA the way sglang's layers do."""
    return pack(tmp, "sglang", version, {
        "sglang/__init__.py": "",
        "sglang/jit_kernel/__init__.py": "",
        "sglang/jit_kernel/nvfp4.py": "def scaled_fp4_quant(x, scale):\n    return load_jit('nvfp4_quant')\n",
        "sglang/jit_kernel/csrc/gemm/nvfp4/nvfp4_quant.cuh": "// compiled at first use\n",
        "sglang/srt/layers/quant.py": textwrap.dedent(f"""
            _is_cuda = True
            if _is_cuda:
                from sgl_kernel import {imports}
            """),
    }, requires=(f"sglang-kernel=={version.replace('0.5.', '0.4.')}",))


@pytest.mark.slow
def test_fp4_absent_then_by_jit_then_sglang_imports_a_missing_name(tmp_path: Path, libs: Callable[..., Path]) -> None:
    # The package promises FP4 (it defines scaled_fp4_quant) and its sm_120a SASS has none.
    python = venv(tmp_path / "a", kernel(tmp_path / "a", libs("120a")))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 7
    assert out["verdict"] == (f"sgl-kernel 0.3.21 (PyPI) has no FP4 kernels for sm_120a: the package defines "
                              f"scaled_fp4_quant but the sm_120a SASS of {LIB} has no FP4 instruction (built with "
                              "ENABLE_NVFP4 off?): build-kernel --recipe sgl-kernel-0.3.21 --arch 12.0a")
    # A JIT-era kernel (no FP4 function) with no sglang: no FP4 ahead of time is a note, not a failure.
    jit_kernel = kernel(tmp_path / "b", libs("120a"), dist="sglang-kernel", version="0.4.10", fp4_api=False)
    python = venv(tmp_path / "b", jit_kernel, specs=("sglang-kernel",))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 0 and [f["how"] for f in out["fp4"]] == ["jit-without-sglang"]  # type: ignore[union-attr]
    # With the sglang that JIT-compiles NVFP4 and imports only what the kernel has: FP4 by JIT, healthy.
    python = venv(tmp_path / "b", jit_kernel, sglang(tmp_path / "b", "0.5.10", "silu_and_mul"),
                  specs=("sglang-kernel", "sglang"))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 0, out["verdict"]
    [fp4] = out["fp4"]  # type: ignore[misc]
    assert fp4["how"] == "jit" and "sglang/jit_kernel/nvfp4.py (1 nvfp4 CUDA sources" in fp4["detail"]
    # An sglang that imports a name the kernel lacks: the server would die at start.
    python = venv(tmp_path / "b", jit_kernel, sglang(tmp_path / "c", "0.5.11", "silu_and_mul, awq_marlin_repack"),
                  specs=("sglang-kernel", "sglang==0.5.11"))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 7
    assert out["api_missing"] == {"awq_marlin_repack": ["srt/layers/quant.py"]}
    assert out["verdict"] == ("sglang-kernel 0.4.10 (PyPI) lacks 1 name sglang 0.5.11 imports from it "
                              "(awq_marlin_repack): the server would die at start: install the kernel sglang 0.5.11 "
                              "pins (0.4.11), or build it: build-kernel --recipe nightly-cu130 --arch 12.0a")


def sglang_kernels(tmp: Path, version: str = "0.5.23", *, aot: bool = False) -> Path:
    """A real sglang wheel in the `sglang/kernels/` layout of PyPI's 0.5.23 (no `jit_kernel/`): the JIT infra in
    kernels/jit/, CUDA sources in kernels/jit/csrc/, an op that JIT-compiles NVFP4 sources as 0.5.23's
    kernels/ops/gemm/sm120_nvfp4_moe.py does, one that does not, and a layer importing from sgl_kernel."""
    files: dict[str, str | Path] = {
        "sglang/__init__.py": "",
        "sglang/kernels/__init__.py": "from sglang.kernels import ops\n",
        "sglang/kernels/jit/__init__.py": "",
        "sglang/kernels/jit/utils/__init__.py": "def load_jit(*args, cuda_files=(), **kw):\n    raise NotImplementedError\n",
        "sglang/kernels/jit/csrc/gemm/sm120_nvfp4_moe_mtp_mma.cuh": "// compiled at first use\n",
        "sglang/kernels/jit/csrc/elementwise/add.cuh": "// compiled at first use\n",
        "sglang/kernels/ops/__init__.py": "",
        "sglang/kernels/ops/gemm/__init__.py": "",
        "sglang/kernels/ops/gemm/sm120_nvfp4_moe.py": textwrap.dedent("""
            from sglang.kernels.jit.utils import load_jit
            def _mtp_module(pair_layout=False):
                return load_jit("nvfp4_moe_mtp", cuda_files=["gemm/sm120_nvfp4_moe_mtp_mma.cuh"])
            """),
        "sglang/kernels/ops/elementwise/add.py": textwrap.dedent("""
            from sglang.kernels.jit import utils
            def _module():
                return utils.load_jit("add", cuda_files=["elementwise/add.cuh"])
            """),
        "sglang/srt/layers/activation.py": "_is_cuda = True\nif _is_cuda:\n    from sgl_kernel import silu_and_mul\n",
    }
    if aot:  # a checkout of the repository (an editable install): the source of sgl_kernel beside it
        files["sglang/kernels/aot/CMakeLists.txt"] = "project(sgl_kernel)\n"
    return pack(tmp, "sglang", version, files, requires=("sglang-kernel==0.4.10",))


def _unpacked(wheels: Path, dest: Path) -> Path:
    import zipfile

    [wheel] = wheels.glob("sglang-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest)
    return dest / "sglang"


def test_the_sglang_kernels_layout_is_read_from_its_files(tmp_path: Path) -> None:
    """sglang 0.5.23 has no jit_kernel/: its NVFP4 JIT is an op under kernels/ops/ loading kernels/jit/csrc/ sources."""
    from build_kernel.stages.verify.installed import fp4, sglang_layout

    root = _unpacked(sglang_kernels(tmp_path), tmp_path / "site")
    jit = fp4.jit_in_sglang(str(root), ("scaled_fp4_quant",))
    assert jit == f"{root}/kernels/ops/gemm/sm120_nvfp4_moe.py (1 nvfp4 CUDA sources under kernels/jit/csrc/)"
    assert sglang_layout.of(root).describe("0.4.10") == (
        "sglang.kernels: ops in sglang/kernels/ops/, JIT sources in sglang/kernels/jit/csrc/; ahead-of-time kernels "
        "from sgl_kernel (pins sglang-kernel==0.4.10)")
    # A checkout has kernels/aot/, sgl_kernel's source tree: said, and still not what Python imports.
    checkout = _unpacked(sglang_kernels(tmp_path / "c", aot=True), tmp_path / "c" / "site")
    assert "sglang/kernels/aot/ holds the source of sgl_kernel (not imported)" in sglang_layout.of(checkout).describe(None)
    # The old layout is still read as before; an sglang with neither has no NVFP4 JIT.
    old = _unpacked(sglang(tmp_path / "o", "0.5.10", "silu_and_mul"), tmp_path / "o" / "site")
    assert sglang_layout.of(old).name == "sglang.jit_kernel"
    assert fp4.jit_in_sglang(str(old), ("scaled_fp4_quant",)) == (
        f"{old}/jit_kernel/nvfp4.py (1 nvfp4 CUDA sources under jit_kernel/csrc/)")
    (root / "kernels" / "jit" / "csrc" / "gemm" / "sm120_nvfp4_moe_mtp_mma.cuh").unlink()
    assert fp4.jit_in_sglang(str(root), ("scaled_fp4_quant",)) is None  # a source named but not shipped proves nothing


@pytest.mark.slow
def test_sglang_0_5_23_kernels_layout_with_its_kernel(tmp_path: Path, libs: Callable[..., Path]) -> None:
    """sglang-kernel 0.4.10 (no FP4 ahead of time) beside an sglang in the kernels/ layout: FP4 by its JIT, healthy."""
    jit_kernel = kernel(tmp_path, libs("120a"), dist="sglang-kernel", version="0.4.10", fp4_api=False)
    python = venv(tmp_path, jit_kernel, sglang_kernels(tmp_path), specs=("sglang-kernel", "sglang"))
    rc, out = doctor(python, "--arch", "12.0a")
    assert rc == 0, out["verdict"]
    [fp4] = out["fp4"]  # type: ignore[misc]
    assert fp4["how"] == "jit" and "sglang/kernels/ops/gemm/sm120_nvfp4_moe.py (1 nvfp4 CUDA sources" in fp4["detail"]
    assert str(out["sglang_kernels"]).startswith("sglang.kernels: ops in sglang/kernels/ops/")
    assert out["verdict"].endswith("FP4 for sm_120a by JIT (sglang 0.5.23)")  # type: ignore[union-attr]


@pytest.mark.network
def test_pypi_sglang_0_5_23_wheel_is_the_kernels_layout(tmp_path: Path) -> None:
    """The real wheel, from PyPI: the layout and its NVFP4 JIT as the miniature above has them."""
    from build_kernel.stages.verify.installed import fp4, sglang_layout

    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "sglang==0.5.23", "-d",
                    str(tmp_path)], check=True)
    root = _unpacked(tmp_path, tmp_path / "site")
    layout = sglang_layout.of(root)
    assert layout.name == "sglang.kernels" and not layout.aot_tree and not (root / "jit_kernel").exists()
    jit = fp4.jit_in_sglang(str(root), ("scaled_fp4_quant",))
    assert jit is not None and "kernels/ops/gemm/sm120_nvfp4_moe.py" in jit
