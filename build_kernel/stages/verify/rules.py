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

from build_kernel.archs import Arch, parse_arch_list
from build_kernel.recipe import LibraryRule, Verify
from build_kernel.stages.verify.cubins import Listing

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


def loading(rule: LibraryRule, asked: tuple[Arch, ...]) -> tuple[Arch, ...]:
    """The asked archs whose GPUs load this library, by compute capability (a cc 9.0 GPU loads a package's
    cc-9.0 library, whether 9.0 or 9.0a was asked): not those of `not_loaded_on`, and with `when_asked` only
    those of its archs. A Hopper-only library (FA3, sgl-kernel's sm90/common_ops) in a 9.0a;12.0a wheel
    holds sm_90a alone: no 12.0 GPU loads it (seen on the miniature: each such library failed for the
    other arch)."""
    other, only = _capabilities(rule.not_loaded_on), _capabilities(rule.when_asked)
    return tuple(a for a in asked if (a.major, a.minor) not in other and (not only or (a.major, a.minor) in only))


def _capabilities(names: tuple[str, ...]) -> set[tuple[int, int]]:
    return {(a.major, a.minor) for a in parse_arch_list(list(names))} if names else set()


def wanted(rule: LibraryRule, asked: tuple[Arch, ...]) -> tuple[Arch, ...] | None:
    """The archs this library must cover; None when the rule does not apply to the asked archs."""
    if rule.when_asked and not set(parse_arch_list(list(rule.when_asked))) & set(asked):
        return None
    loads = loading(rule, asked)
    if not loads:
        return None
    own = [a for a in rule.archs if a != "asked"]
    return (*(loads if "asked" in rule.archs else ()), *(parse_arch_list(own) if own else ()))


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
