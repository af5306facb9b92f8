"""The layout of a CUDA toolkit from PyPI wheels: the folder pip wrote made a toolkit root.

NVIDIA publishes the compiler as wheels: for CUDA 13 they all install into one folder,
`site-packages/nvidia/cu13/{bin,include,lib,nvvm}`, and that folder is (nearly) a toolkit
root: `bin/nvcc.profile` finds cicc (`nvvm/bin`), libdevice (`nvvm/libdevice`), the crt
headers (`include/crt`, from nvidia-cuda-crt) and CCCL (`include/cccl`) relative to
nvcc's own location. What it lacks, and what `assemble` adds (relative symlinks only, so
the folder can be renamed into the cache):

- `lib64 -> lib`: nvcc links with `-L$(TOP)/lib64` (`cannot find -lcudart_static`);
- unversioned `lib/libcudart.so`, `libnvrtc.so`, ...: CMake's `find_library` (FindCUDA,
  FindCUDAToolkit) only looks for `libX.so`, the wheels ship `libX.so.13`;
- `targets/<arch>-linux/{include,lib}`: the layout of an installed toolkit, which CMake's
  FindCUDAToolkit and nvcc (`_TARGET_DIR_`) prefer when present.

cuBLAS/cuSPARSE/cuSOLVER headers (needed by torch's ATen headers) are not installed: the
torch environment has them (`<site>/nvidia/cu13/include`, from torch's own dependencies).
They are offered to CMake through an *overlay* folder that links only the headers the
toolkit lacks, so torch's copies of the runtime headers can never shadow the toolkit's.
Checking the result (`nvcc_version`, `smoke_compile`) is here too; installing and caching
is cudawheels'.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from filelock import FileLock

from build_kernel import atomic, process
from build_kernel.errors import ToolchainError

# Bump when `assemble` changes: cached toolkits of another layout are rebuilt.
LAYOUT = 1
# A cached folder (toolkit or overlay) is complete once it holds this file.
MARKER = "toolkit.json"
TARGET_DIRS = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}
_SMOKE = """\
#include <cuda_runtime.h>
#include <cuda/std/cstdint>
__global__ void smoke(float* x) { x[threadIdx.x] = sinf(x[threadIdx.x]) + (cuda::std::uint32_t)1; }
int main() { float* p = nullptr; smoke<<<1, 1>>>(p); return cudaGetLastError() == cudaSuccess ? 0 : 1; }
"""
_TORCH_SITE = (
    "import importlib.util, os; s = importlib.util.find_spec('torch'); "
    "print(os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else '')"
)


def assemble(site: Path, major: int) -> Path:
    """Turn `site/nvidia/cu<major>` into a toolkit root CMake and torch accept; return it."""
    root = site / "nvidia" / f"cu{major}"
    if not (root / "bin" / "nvcc").is_file():
        raise ToolchainError(f"the nvidia-cuda-nvcc wheel did not install {root}/bin/nvcc",
                             hint="its layout changed: report it with the installed versions")
    lib = root / "lib"
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for so in sorted(lib.glob("lib*.so.*")):
        plain = lib / (so.name.split(".so.")[0] + ".so")
        if not plain.exists() and not plain.is_symlink():
            plain.symlink_to(so.name)
    target = root / "targets" / TARGET_DIRS.get(platform.machine(), f"{platform.machine()}-linux")
    target.mkdir(parents=True, exist_ok=True)
    for name in ("include", "lib"):
        if not (target / name).exists():
            (target / name).symlink_to(Path("..", "..", name))
    return root


def nvcc_version(nvcc: Path) -> str:
    """`13.0.88` from `nvcc --version` (`Cuda compilation tools, release 13.0, V13.0.88`)."""
    out = process.run([nvcc, "--version"], error=ToolchainError, what=f"{nvcc} does not run", timeout=60,
                      check=False)
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out.stdout)
    if out.returncode or not m:
        raise ToolchainError(f"{nvcc} --version failed: {(out.stderr or out.stdout).strip()[:200]}")
    return m.group(1)


def smoke_compile(nvcc: Path, workdir: Path, log: Path, env: Mapping[str, str]) -> None:
    """Compile and link a kernel using libdevice and CCCL: proves cicc, ptxas, crt, nvlink, cudart.

    Runs in `env` without CUDA_HOME/CUDA_PATH (another toolkit's); its CUDAHOSTCXX is the host compiler."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        src = Path(tmp) / "smoke.cu"
        src.write_text(_SMOKE)
        cmd = [str(nvcc), "-allow-unsupported-compiler", str(src), "-o", str(Path(tmp) / "smoke")]
        host = env.get("CUDAHOSTCXX")
        if host:
            cmd[1:1] = ["-ccbin", host]
        child = {k: v for k, v in env.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
        proc = process.run(cmd, error=ToolchainError, what="the CUDA toolkit from PyPI does not compile a test kernel",
                           env=child, log=log, timeout=300, check=False)
    if proc.returncode:
        lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
        first = next((l for l in lines if "error" in l.lower() or "fatal" in l.lower()), lines[-1] if lines else "")
        raise ToolchainError(f"the CUDA toolkit from PyPI does not compile a test kernel: {first.strip()};"
                             f" full log: {log}",
                             hint="a host compiler (g++) must be installed; see the log for the nvcc command")


def torch_site(python: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The site-packages folder holding `python`'s torch (without importing torch)."""
    out = (process.probe([python, "-c", _TORCH_SITE], env=env, timeout=60, merge=False) or "").strip()
    return Path(out) if out else None


def header_overlay(root: Path, torch_include: Path, base: Path) -> Path | None:
    """A folder linking the headers torch's nvidia wheels have and the toolkit lacks.

    Put last on the include path (CMAKE_<LANG>_STANDARD_INCLUDE_DIRECTORIES), the whole
    torch folder would also offer its own cuda_runtime.h & co., and nvcc searches user
    include dirs before the toolkit's: a CUDA 13.0 torch would shadow a 13.1 toolkit.
    """
    if not torch_include.is_dir():
        return None
    have = {p.name for p in (root / "include").iterdir()}
    names = sorted(p.name for p in torch_include.iterdir() if p.name not in have)
    if not names:
        return None
    key = hashlib.sha256(json.dumps([str(root), str(torch_include), names]).encode()).hexdigest()[:16]
    overlay = base / "overlays" / key
    include = overlay / "include"
    if (overlay / MARKER).is_file() and all(p.exists() for p in include.iterdir()):
        return include
    overlay.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(overlay) + ".lock"):
        if (overlay / MARKER).is_file() and all(p.exists() for p in include.iterdir()):
            return include
        atomic.sweep(overlay)
        with atomic.folder(overlay, replace=True) as tmp:
            (tmp / "include").mkdir()
            for name in names:
                (tmp / "include" / name).symlink_to(torch_include / name)
            (tmp / MARKER).write_text(json.dumps({"toolkit": str(root), "from": str(torch_include), "names": names}))
    return include


def cmake_defines(root: Path, site: Path | None, base: Path) -> dict[str, str]:
    """What CMake, FindCUDAToolkit and torch's bundled FindCUDA need to use this toolkit."""
    defines = {
        "CMAKE_CUDA_COMPILER": str(root / "bin" / "nvcc"),
        "CUDAToolkit_ROOT": str(root),
        "CUDA_TOOLKIT_ROOT_DIR": str(root),  # torch's FindCUDA
    }
    nvrtc = sorted(p for p in (root / "lib").glob("libnvrtc.so.*") if not p.is_symlink())
    if nvrtc:
        defines["CUDA_nvrtc_LIBRARY"] = str(nvrtc[0])  # torch links every extension to it
    if site is not None:
        overlay = header_overlay(root, site / "nvidia" / root.name / "include", base)
        if overlay is not None:
            defines["CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES"] = str(overlay)
            defines["CMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES"] = str(overlay)
    return defines
