"""The torch a kernel library was built for, against the torch installed beside it, read from files:
the distribution's `torch==` pin, our provenance, and the torch symbols its libraries import that
the installed torch's libraries do not export (what the loader would stop at)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.hash import GNUHashSection
from elftools.elf.sections import SymbolTableSection
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# Mangled names in torch's namespaces: c10::, at::, torch::, caffe2:: (functions, const members, vtables, typeinfo).
_TORCH_SYMBOL = re.compile(r"^_Z(?:N|NK|TVN|TIN|TSN)?(?:3c10|2at|5torch|6caffe2)")
_VERSION = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:['\"]([^'\"]+)['\"]|None)", re.M)


@dataclass
class TorchHere:
    """The installed torch, from its `version.py` (not imported)."""

    version: str | None
    cuda: str | None
    root: str | None

    def describe(self) -> str:
        if not self.version:
            return "no torch is installed"
        return f"this torch is {self.version}" + ("" if self.cuda else " (a CPU build)")


@dataclass
class BuiltFor:
    pin: str | None = None
    provenance: str | None = None
    # Torch symbols the libraries import that the installed torch lacks (mangled), and how many were looked up.
    lacking: list[str] = field(default_factory=list)
    looked_up: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def torch_here(root: str | None) -> TorchHere:
    text = (Path(root) / "version.py").read_text(errors="replace") if root and (Path(root) / "version.py").is_file() else ""
    version, cuda = _VERSION.search(text), _CUDA.search(text)
    return TorchHere(version.group(1) if version else None, cuda.group(1) if cuda and cuda.group(1) else None, root)


def pinned(requires: Sequence[str], names: Sequence[str] = ("torch",)) -> str | None:
    """`2.14.1` from a `torch==2.14.1` requirement (or one on another of `names`; an extra's is not counted)."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) in names and not (req.marker and "extra" in str(req.marker)):
            exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
            if exact:
                return exact[0]
    return None


def _undefined(so: Path) -> set[str]:
    with so.open("rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        if not isinstance(dynsym, SymbolTableSection):
            return set()
        return {s.name for s in dynsym.iter_symbols() if s["st_shndx"] == "SHN_UNDEF"
                and s["st_info"]["bind"] != "STB_WEAK" and _TORCH_SYMBOL.match(s.name)}


def _exported(lib: Path, wanted: set[str]) -> set[str]:
    """Which of `wanted` `lib` defines: looked up in its GNU hash table (torch exports ~10^5 symbols)."""
    with lib.open("rb") as fh:
        elf = ELFFile(fh)
        table = elf.get_section_by_name(".gnu.hash")
        if isinstance(table, GNUHashSection):
            return {n for n in wanted if (s := table.get_symbol(n)) is not None and s["st_shndx"] != "SHN_UNDEF"}
        dynsym = elf.get_section_by_name(".dynsym")
        if not isinstance(dynsym, SymbolTableSection):
            return set()
        return {s.name for s in dynsym.iter_symbols() if s.name in wanted and s["st_shndx"] != "SHN_UNDEF"}


def lacking(libs: list[Path], torch_root: str | None) -> tuple[list[str], int]:
    """(torch symbols the libraries need that no library of the installed torch exports, how many they need)."""
    need: set[str] = set()
    for so in libs:
        need |= _undefined(so)
    if not need or not torch_root:
        return [], len(need)
    left = set(need)
    for lib in sorted((Path(torch_root) / "lib").glob("lib*.so*")):
        if lib.name.startswith(("libc10", "libtorch", "libcaffe2", "libshm")):
            left -= _exported(lib, left)
        if not left:
            break
    return sorted(left), len(need)
