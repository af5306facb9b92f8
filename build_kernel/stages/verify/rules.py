"""Which archs a library must cover, and whether its cubins or PTX do.

A recipe names rules per library glob (`[verify.libraries."GLOB"]`); a library no rule
names follows `libraries_default`. An asked arch is covered by SASS when a cubin of that
arch is there (or a generic cubin of the same major and an older minor, which the driver
runs as is); by PTX when the driver can JIT it (generic PTX of an arch not newer, or
arch-specific PTX of exactly that arch): it works, but compiles on first load.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from build_kernel.archs import Arch
from build_kernel.recipe import LibraryRule, Verify
from build_kernel.stages.verify.cubins import Listing
from build_kernel.targets import loading as loading  # the one reading of a rule, shared with plan
from build_kernel.targets import wanted as wanted

_NAME = re.compile(r"^sm_(\d+)(\d)([af]?)$")
DEFAULT = "default"


def _arch(name: str) -> Arch | None:
    m = _NAME.match(name)
    return Arch(int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def rule_for(path: str, spec: Verify) -> LibraryRule:
    """The first rule whose glob matches `path` (fp4_library counts as one), else the default."""
    for rule in spec.libraries:
        if fnmatch.fnmatch(path, rule.glob):
            return rule
    if spec.fp4_library and fnmatch.fnmatch(path, spec.fp4_library):
        return LibraryRule(glob=spec.fp4_library, fp4=True, required=True)
    return LibraryRule(glob=DEFAULT, archs=("asked",) if spec.libraries_default == "asked" else ())


def required_missing(spec: Verify, asked: tuple[Arch, ...], present: set[str]) -> list[str]:
    """A failure per required rule that applies to the asked archs and no library with device code
    matched (`present`: the globs of the rules that did); FP4 is named only where an asked arch that
    loads the library has FP4."""
    out = []
    for rule in (*spec.libraries, *([rule_for(spec.fp4_library, spec)] if spec.fp4_library else [])):
        if not rule.required or rule.glob in present or wanted(rule, asked) is None:
            continue
        fp4 = rule.fp4 and any(a.fp4_capable for a in loading(rule, asked))
        out.append(f"no library matching {rule.glob} holds device code" + (": the FP4 kernels are missing" if fp4 else ""))
    return out


@dataclass(frozen=True)
class Cover:
    how: str  # "sass" | "jit" | "missing"
    detail: str


def cover(arch: Arch, found: Listing) -> Cover:
    if arch.sm in found.cubins:
        return Cover("sass", arch.sm)
    for name in found.cubins:
        c = _arch(name)
        if c and not c.suffix and c.major == arch.major and c.minor <= arch.minor:
            return Cover("sass", f"{name} (generic: runs on {arch.sm}, without its arch-specific instructions)")
    # The driver JITs the newest PTX it can use.
    for name in sorted(found.ptx, key=lambda n: _arch(n) or Arch(0, 0), reverse=True):
        p = _arch(name)
        if p is None:
            continue
        if (p.suffix and p == arch) or (not p.suffix and (p.major, p.minor) <= (arch.major, arch.minor)):
            return Cover("jit", f"compute_{name[3:]} PTX")
    return Cover("missing", "")
