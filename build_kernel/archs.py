"""CUDA arch spellings (`12.0a`, `sm_120a`, `120a`, `compute_120a`, `8.6+PTX`) normalised to one form.

Spelling only: which archs exist is the toolkit's answer (`nvcc --list-gpu-arch`, read by
build_kernel.targets), with CUDA 13.0's list below as the fallback where no nvcc is found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What nvcc 13.0 lists (`--list-gpu-arch`): the table used where no nvcc can be asked. "a" (arch-specific)
# and "f" (family) variants exist from 9.0 / 10.0.
KNOWN = ("7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
_SPELLING = re.compile(r"^(?:sm_|compute_)?(\d{1,2})\.?(\d)([af]?)(\+ptx)?$", re.I)
NATIVE = "native"


class ArchSpellingError(ValueError):
    """An arch string that names no CUDA architecture."""


@dataclass(frozen=True, order=True)
class Arch:
    """One CUDA target, e.g. Arch(12, 0, "a") for sm_120a. `ptx` (torch's `+PTX`) also embeds PTX for GPUs
    newer than the wheel; it is a request about the same target, so it takes no part in equality."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = field(default=False, compare=False)

    @property
    def torch(self) -> str:
        """The TORCH_CUDA_ARCH_LIST spelling: `12.0a`, `8.6+PTX`."""
        return f"{self.major}.{self.minor}{self.suffix}{'+PTX' if self.ptx else ''}"

    @property
    def cc(self) -> str:
        """The compute capability it runs on: `12.0`."""
        return f"{self.major}.{self.minor}"

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def compute(self) -> str:
        return f"compute_{self.major}{self.minor}{self.suffix}"

    @property
    def fp4_capable(self) -> bool:
        """Block-scaled FP4 instructions exist only on arch-specific 10.x+ targets."""
        return self.major >= 10 and self.suffix in ("a", "f")

    def __str__(self) -> str:
        return self.torch


def parse_arch(text: str) -> Arch:
    """Parse one spelling; raise ArchSpellingError with the accepted forms."""
    m = _SPELLING.match(text.strip())
    if not m:
        if text.strip().lower() == NATIVE:
            raise ArchSpellingError(f"arch {NATIVE!r} is for the command line (--arch native, ARCH=native): "
                                    "a recipe names its archs, e.g. [\"12.0a\"]")
        raise ArchSpellingError(
            f"unknown arch {text!r}: write it as 12.0a, sm_120a, 120a or 8.6+PTX"
        )
    digits, minor, suffix, ptx = m.groups()
    # `120a` has no dot: the last digit is the minor.
    major = int(digits)
    suffix = suffix.lower()
    if (suffix == "a" and major < 9) or (suffix == "f" and major < 10):
        raise ArchSpellingError(f"arch {text!r} has no '{suffix}' variant: drop the suffix")
    return Arch(major, int(minor), suffix, ptx=bool(ptx))


# TORCH_CUDA_ARCH_LIST's names for families, as torch.utils.cpp_extension expands them (torch 2.14): a list
# written for a PyTorch extension build means here what it means there.
TORCH_NAMES = {
    "kepler+tesla": "3.7", "kepler": "3.5+PTX", "maxwell+tegra": "5.3", "maxwell": "5.0;5.2+PTX",
    "pascal": "6.0;6.1+PTX", "volta+tegra": "7.2", "volta": "7.0+PTX", "turing": "7.5+PTX", "ampere+tegra": "8.7",
    "ampere": "8.0;8.6+PTX", "ada": "8.9+PTX", "hopper": "9.0+PTX", "blackwell+tegra": "11.0",
    "blackwell": "10.0;10.3;12.0;12.1+PTX", "rubin": "10.7+PTX",
}


def split_list(value: str) -> list[str]:
    """The items of an arch list however it is separated: `;` (TORCH_CUDA_ARCH_LIST, CMake), spaces
    (TORCH_CUDA_ARCH_LIST's other form), `,` (a shell- and make-safe form); a family name (`Hopper`) as
    torch expands it."""
    items = [i for i in re.split(r"[;,\s]+", value) if i]
    return [a for i in items for a in TORCH_NAMES.get(i.lower(), i).split(";")]


def parse_arch_list(value: str | list[str]) -> tuple[Arch, ...]:
    """Accept a list or a `;`/`,`/space separated string; keep order, drop duplicates."""
    items = value if isinstance(value, list) else split_list(value)
    archs: list[Arch] = []
    bad: list[str] = []  # every bad spelling at once, not just the first
    for item in items:
        if item.strip():
            try:
                arch = parse_arch(item)
            except ArchSpellingError as exc:
                bad.append(str(exc))
                continue
            if arch in archs:  # the same target twice: one entry, with PTX if either asked it
                i = archs.index(arch)
                archs[i] = Arch(arch.major, arch.minor, arch.suffix, ptx=archs[i].ptx or arch.ptx)
                continue
            archs.append(arch)
    if bad:
        raise ArchSpellingError("; ".join(bad))
    if not archs:
        raise ArchSpellingError("empty arch list: name at least one arch, e.g. 12.0a")
    return tuple(archs)


def torch_arch_list(archs: tuple[Arch, ...]) -> str:
    """The TORCH_CUDA_ARCH_LIST value for these archs."""
    return ";".join(a.torch for a in archs)
