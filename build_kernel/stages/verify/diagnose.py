"""One line instead of a loader dump: why a wheel does not import on this stack.

The loader's message is kept whole in the report (`import_details`) and the log; this
names the cause a user can act on: a CUDA library of another major (the wheel was built
for another CUDA), or torch symbols this torch lacks (built against another torch).
Also why a wheel's SASS has no FP4 instructions (`fp4_absent`), and whether a library
carries its own libstdc++ (`embedded_libstdcxx`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from build_kernel import process
from build_kernel.cuda_driver import needed  # one reader of DT_NEEDED, beside the driver's

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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


def embedded_libstdcxx(so: Path) -> list[str]:
    """The libstdc++ internals `so` exports (defines, default visibility): a static copy of libstdc++.

    In one process with torch's libstdc++.so.6 (another GCC's) calls into the two copies mix,
    and a stream built by one is formatted by the other: `ostream << int` crashes (seen: a 12.0a
    wheel built with GCC 13's libstdc++.a on the H200 host, its first error message with a number)."""
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


def torch_symbol(symbol: str) -> bool:
    """A mangled name of torch's own namespaces (c10, at, torch, caffe2)."""
    return bool(_TORCH_SYMBOL.search(symbol))


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
    if undefined and torch_symbol(undefined.group(1)):
        built = f"torch {wheel_torch}" if wheel_torch else "another torch"
        here = f"torch {stack.torch}" if stack.torch else "no torch"
        return (f"built against {built}, this stack has {here} (undefined symbol {demangle(undefined.group(1))}): "
                f"{fix}")
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


NOTES = Path(__file__).resolve().parents[2] / "package_notes.toml"


def package_note(distribution: str) -> dict[str, Any]:
    """The package notes' table for a distribution (by its name or an alias), {} when it has none."""
    name = canonicalize_name(distribution)
    with NOTES.open("rb") as fh:
        notes = tomllib.load(fh)
    return next((dict(t) for key, t in notes.items()
                 if name == canonicalize_name(key) or name in {canonicalize_name(a) for a in t.get("aliases", [])}), {})


def fp4_absent(distribution: str, version: str) -> str:
    """Why a wheel's FP4 library shows no FP4 instructions: the package notes say from which release its FP4
    kernels are JIT-compiled at run time and never in the wheel; before (or for another package), the build
    left them out."""
    note = package_note(distribution)
    try:
        release, since = Version(version).release, Version(str(note.get("fp4_jit_from", ""))).release
    except InvalidVersion:
        release, since = (), ()
    if since and release[:len(since)] >= since:
        return f"{distribution} {version} has none to find: {note['fp4_jit_why']}"
    return "the FP4 kernels were not compiled (ENABLE_NVFP4 off? upstream skips it when CUDA_VERSION is empty)"
