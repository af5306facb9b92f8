"""CUDA arch spellings (`12.0a`, `sm_120a`, `120a`, `compute_120a`) normalised to one form."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Archs nvcc 12.8-13.x knows; "a" (arch-specific) and "f" (family) need 9.0+ / 10.0+.
KNOWN = ("7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
_SPELLING = re.compile(r"^(?:sm_|compute_)?(\d{1,2})\.?(\d)([af]?)$")


class ArchSpellingError(ValueError):
    """An arch string that names no CUDA architecture."""


@dataclass(frozen=True, order=True)
class Arch:
    """One CUDA target, e.g. Arch(12, 0, "a") for sm_120a."""

    major: int
    minor: int
    suffix: str = ""

    @property
    def torch(self) -> str:
        """The TORCH_CUDA_ARCH_LIST spelling: `12.0a`."""
        return f"{self.major}.{self.minor}{self.suffix}"

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
        raise ArchSpellingError(
            f"unknown arch {text!r}: write it as 12.0a, sm_120a or 120a"
        )
    digits, minor, suffix = m.groups()
    # `120a` has no dot: the last digit is the minor.
    major = int(digits)
    arch = Arch(major, int(minor), suffix)
    if arch.torch.rstrip("af") not in KNOWN:
        raise ArchSpellingError(
            f"unknown arch {text!r}: known archs are {', '.join(KNOWN)} (with a or f suffix from 9.0/10.0)"
        )
    if (suffix == "a" and major < 9) or (suffix == "f" and major < 10):
        raise ArchSpellingError(f"arch {text!r} has no '{suffix}' variant: drop the suffix")
    return arch


def parse_arch_list(value: str | list[str]) -> tuple[Arch, ...]:
    """Accept a list or a `;`/`,`/space separated string; keep order, drop duplicates."""
    items = value if isinstance(value, list) else re.split(r"[;,\s]+", value)
    archs: list[Arch] = []
    bad: list[str] = []  # every bad spelling at once, not just the first
    for item in items:
        if item.strip():
            try:
                arch = parse_arch(item)
            except ArchSpellingError as exc:
                bad.append(str(exc))
                continue
            if arch not in archs:
                archs.append(arch)
    if bad:
        raise ArchSpellingError("; ".join(bad))
    if not archs:
        raise ArchSpellingError("empty arch list: name at least one arch, e.g. 12.0a")
    return tuple(archs)


def torch_arch_list(archs: tuple[Arch, ...]) -> str:
    """The TORCH_CUDA_ARCH_LIST value for these archs."""
    return ";".join(a.torch for a in archs)
