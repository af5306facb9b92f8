"""One line instead of a loader dump: why a wheel does not import on this stack.

The loader's message is kept whole in the report (`import_details`) and the log; this
names the cause a user can act on: a CUDA library of another major (the wheel was built
for another CUDA), or torch symbols this torch lacks (built against another torch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from build_kernel import process

# CUDA libraries whose soname carries the CUDA major (libcudart.so.12, libnvrtc.so.13, ...).
CUDA_LIBS = ("cudart", "nvrtc", "cublas", "cublasLt", "cusparse", "cusolver", "cufft", "curand", "nvJitLink",
             "cupti", "nvToolsExt", "cudnn_not_a_cuda_major")
_MISSING = re.compile(r"(lib([A-Za-z_+-]+?)\.so\.(\d+)): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_TORCH_SYMBOL = re.compile(r"c10|at\d|torch|caffe2")


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
