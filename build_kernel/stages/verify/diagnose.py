"""One line instead of a loader dump: why a wheel does not import on this stack.

The loader's message is kept whole in the report (`import_details`) and the log; this
names the cause a user can act on: a CUDA library of another major (the wheel was built
for another CUDA), or torch symbols this torch lacks (built against another torch).
Also why a wheel's SASS has no FP4 instructions (`fp4_absent`), and whether a library
carries its own libstdc++ (`embedded_libstdcxx`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from build_kernel import process

# CUDA libraries whose soname carries the CUDA major (libcudart.so.12, libnvrtc.so.13, ...).
CUDA_LIBS = ("cudart", "nvrtc", "cublas", "cublasLt", "cusparse", "cusolver", "cufft", "curand", "nvJitLink",
             "cupti", "nvToolsExt", "cudnn_not_a_cuda_major")
_MISSING = re.compile(r"(lib([A-Za-z_+-]+?)\.so\.(\d+)): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_TORCH_SYMBOL = re.compile(r"c10|at\d|torch|caffe2")
# Classes only libstdc++ itself defines: their headers declare them `extern template` (streams)
# or out of line (locale, ios_base), so a library compiled against the headers only references
# them. One that exports definitions was linked with libstdc++.a (-static-libstdc++, or a
# compiler without libstdc++.so): std::locale, std::ios_base, codecvt, basic_[io]stream<char>.
_LIBSTDCXX_OWN = re.compile(r"_ZNS(t6locale|t8ios_base|o|i)|_ZNKSt7codecvt")


@dataclass(frozen=True)
class Stack:
    """What the wheel meets here: torch's version and CUDA."""

    torch: str | None
    cuda: str | None

    def describe(self) -> str:
        if not self.torch:
            return "this stack has no torch"
        return f"this stack is CUDA {self.cuda or '(none: a CPU torch)'} (torch {self.torch})"


def needed(so: Path) -> list[str]:
    with so.open("rb") as fh:
        for section in ELFFile(fh).iter_sections():
            if isinstance(section, DynamicSection):
                return [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]  # type: ignore[attr-defined]
    return []


def embedded_libstdcxx(so: Path) -> list[str]:
    """The libstdc++ internals `so` exports (defines, default visibility): a static copy of libstdc++.

    In one process with torch's libstdc++.so.6 (another GCC's) calls into the two copies mix,
    and a stream built by one is formatted by the other: `ostream << int` crashes (seen: a 12.0a
    sgl-kernel wheel built with GCC 13's libstdc++.a, its first error message with a number)."""
    with so.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".dynsym")
        if not isinstance(section, SymbolTableSection):
            return []
        return sorted(sym.name for sym in section.iter_symbols()
                      if sym["st_shndx"] != "SHN_UNDEF" and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
                      and sym["st_other"]["visibility"] == "STV_DEFAULT" and _LIBSTDCXX_OWN.match(sym.name))


def cuda_majors(libs: Iterable[Path]) -> dict[str, str]:
    """{needed CUDA soname: its major} over the wheel's libraries (the CUDA it was built for)."""
    found: dict[str, str] = {}
    for so in libs:
        for name in needed(so):
            m = re.match(r"lib([A-Za-z]+)\.so\.(\d+)$", name)
            if m and m.group(1) in CUDA_LIBS:
                found[name] = m.group(2)
    return found


def demangle(symbol: str) -> str:
    out = process.probe(["c++filt", symbol], merge=False)
    return out.strip() if out and out.strip() else symbol


def explain(error: str, stack: Stack, *, wheel_torch: str | None = None, fix: str = "build it with the recipe") -> str:
    """The cause of an import failure in one line (the loader's own last line when unknown)."""
    missing = _MISSING.search(error)
    if missing:
        soname, lib, major = missing.groups()
        if lib in CUDA_LIBS:
            return f"built for CUDA {major} (needs {soname}); {stack.describe()}: {fix}"
        return f"needs {soname}, which is not installed here (install it, or {fix})"
    undefined = _UNDEFINED.search(error)
    if undefined and _TORCH_SYMBOL.search(undefined.group(1)):
        built = f"torch {wheel_torch}" if wheel_torch else "another torch"
        here = f"torch {stack.torch}" if stack.torch else "no torch"
        return (f"built against {built}, this stack has {here} (undefined symbol {demangle(undefined.group(1))}): "
                f"{fix}")
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


# Upstream moved the NVFP4 kernels out of the prebuilt library at f88acf878 (PR #20012, 2026-03-07):
# sglang JIT-compiles them at run time (python/sglang/jit_kernel/nvfp4.py, through tvm-ffi and nvcc).
# The first release after it is 0.4.0 (2026-03-16, distribution `sglang-kernel`).
FP4_JIT_FROM = (0, 4)
_SGL_KERNEL = {"sgl-kernel", "sglang-kernel"}


def fp4_absent(distribution: str, version: str) -> str:
    """Why a wheel's FP4 library shows no FP4 instructions: for sgl-kernel >= 0.4 they are JIT-compiled
    by sglang and never in the wheel; before (or for another package), the build left them out."""
    try:
        release = Version(version).release
    except InvalidVersion:
        release = ()
    if canonicalize_name(distribution) in _SGL_KERNEL and release[:2] >= FP4_JIT_FROM:
        return (f"{distribution} {version} has none to find: from 0.4 the NVFP4 kernels are JIT-compiled by sglang "
                "at run time (sglang.jit_kernel.nvfp4, upstream f88acf878, PR #20012), not built into the wheel "
                "(drop fp4_sass and the FP4 library rule from the recipe's [verify]; prove them ahead of time with "
                "[serve] jit_prewarm = [\"sglang.jit_kernel.nvfp4\"]: build-kernel jit-prewarm)")
    return "the FP4 kernels were not compiled (ENABLE_NVFP4 off? upstream skips it when CUDA_VERSION is empty)"
