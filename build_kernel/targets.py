"""The asked archs against what can build and run them: the toolkit's own arch table, the GPUs here
(`native`), the archs the recipe's source can build, and FP4 per arch.

The toolkit answers which archs exist (`nvcc --list-gpu-arch`), not a hand list: a new CUDA release adds
archs without a change here. Where no nvcc is found, CUDA 13.0's list (archs.KNOWN) stands in, and the plan
says so.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from build_kernel import gpus, process
from build_kernel.archs import KNOWN, NATIVE, Arch, ArchSpellingError, parse_arch, parse_arch_list
from build_kernel.recipe.model import LibraryRule, Verify
from build_kernel.toolchain import find_nvcc

# GPUs users name, for the one line that says what to pass instead of `native`.
EXAMPLES = "12.0a (RTX 5090, RTX PRO 6000), 12.1a (GB10), 10.0a (B200), 9.0a (H100, H200), 8.9 (L40S, RTX 4090), 8.6 (RTX 3090, A10)"


@dataclass(frozen=True)
class Toolkit:
    """The archs a toolkit can target (`120`, `90`, ...) and where that list came from."""

    archs: tuple[str, ...]
    source: str

    def knows(self, arch: Arch) -> bool:
        return f"{arch.major}{arch.minor}" in self.archs


@functools.cache
def _listed(nvcc: str) -> tuple[str, ...]:
    # One probe per nvcc binary: a plan, a doctor and a build ask the same toolkit.
    return tuple(re.findall(r"compute_(\d+)", process.probe([nvcc, "--list-gpu-arch"]) or ""))


def toolkit(env: Mapping[str, str], roots: tuple[str, ...] = ("/usr/local",)) -> Toolkit:
    """The archs of the nvcc the build would find (CUDA_HOME, PATH, <root>/cuda*), else CUDA 13.0's."""
    nvcc = find_nvcc(env, roots=roots)
    listed = _listed(nvcc) if nvcc else ()
    if listed:
        return Toolkit(listed, f"nvcc --list-gpu-arch ({nvcc})")
    return Toolkit(tuple(k.replace(".", "") for k in KNOWN),
                   "CUDA 13.0's arch list (no nvcc found to ask: set CUDA_HOME to check against yours)")


def native(value: str) -> str:
    """`native` in an arch list replaced by the archs of the GPUs the driver reports (one per model, `a` from
    9.0); the list as given when it does not say `native`."""
    items = [i for i in re.split(r"[;,\s]+", value) if i]
    if not any(i.lower() == NATIVE for i in items):
        return value
    here = gpus.present()
    if not here:
        why = "no NVIDIA driver (libcuda) on this host" if here is None else "the driver reports no GPU"
        raise ArchSpellingError(f"arch 'native': {why}; name the archs of the GPUs that will run the wheel "
                                f"instead, e.g. --arch {EXAMPLES}")
    found = [a.torch for a in here]
    return ";".join(a for i in items for a in (found if i.lower() == NATIVE else [i]))


def problems(archs: tuple[Arch, ...], kit: Toolkit, *, min_arch: str, min_arch_reason: str, source: str) -> list[str]:
    """Every asked arch the toolkit cannot target or the source cannot build, each with its fix."""
    out = [twins(first, second) for i, first in enumerate(archs) for second in archs[i + 1:] if first.cc == second.cc]
    unknown = [a for a in archs if not kit.knows(a)]
    if unknown:
        known = ", ".join(f"{n[:-1]}.{n[-1]}" for n in sorted(kit.archs, key=int))
        out.append(f"{', '.join(a.torch for a in unknown)}: not an arch this toolkit can target ({kit.source}: "
                   f"{known}); name one of those, or install a CUDA toolkit that knows it")
    if min_arch:
        floor = parse_arch(min_arch)
        below = [a for a in archs if (a.major, a.minor) < (floor.major, floor.minor)]
        if below:
            out.append(f"{', '.join(a.torch for a in below)}: the source cannot build it"
                       f"{f' ({min_arch_reason})' if min_arch_reason else ''}; ask {floor.cc} or newer ({source} "
                       f"sets min_arch = \"{min_arch}\")")
    return out


def twins(first: Arch, second: Arch) -> str:
    """Two targets for one compute capability (12.0a and 12.0f): a GPU loads one cubin, so one is dead weight."""
    kind = {"a": "this GPU's own instructions", "f": f"the {first.major}.x family", "": "generic"}
    return (f"{first.torch} and {second.torch} both target compute capability {first.cc}: keep one "
            f"({first.torch}: {kind[first.suffix]}; {second.torch}: {kind[second.suffix]})")


def fp4_problem(archs: tuple[Arch, ...], fp4: bool | str, recipe_name: str) -> str | None:
    """`fp4 = "required"` with no asked arch that can run FP4: one line naming both ways on."""
    if fp4 != "required" or any(a.fp4_capable for a in archs):
        return None
    generic = [a for a in archs if a.major >= 10 and not a.fp4_capable]
    hint = f"use {generic[0].major}.{generic[0].minor}a instead of {generic[0].torch}, or " if generic else ""
    return (f"FP4 kernels need an arch-specific 10.0+ target (e.g. 12.0a) and {', '.join(a.torch for a in archs)} "
            f"has none, while recipe {recipe_name} sets fp4 = \"required\": {hint}add an FP4 arch "
            f"(--arch \"{';'.join(a.torch for a in archs)};12.0a\"), or build without FP4 from an overlay with "
            f"fp4 = true (FP4 where the arch has it)")


def fp4_note(arch: Arch) -> str:
    """Why an arch gets FP4 or not, for the plan's arch rows."""
    if arch.fp4_capable:
        return "yes"
    if arch.major >= 10:
        return f"no ({arch.torch} is generic: {arch.major}.{arch.minor}a has FP4)"
    return f"no ({arch.cc} has no FP4 instructions)"


# Which library an asked arch loads, and what it carries: verify's rules ([verify.libraries]), read here once for
# both the plan's per-arch table and verify's judgement.
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


@dataclass(frozen=True)
class ArchRow:
    """What one asked arch gets: the libraries its GPUs load, FP4, and each named part (`carries`); a part a
    define leaves out of the build names that define (`left_out`)."""

    arch: str
    libraries: list[str]
    fp4: str
    parts: dict[str, bool]
    left_out: dict[str, str] = field(default_factory=dict)


# CMake's false constants (`if(NOT X)`): a rule's `NAME=OFF` is met by `NAME=0`, `NAME=FALSE`, ... as CMake reads them.
_CMAKE_FALSE = {"", "0", "OFF", "NO", "N", "FALSE", "IGNORE", "NOTFOUND"}


def _cmake_false(value: str) -> bool:
    v = value.strip().upper()
    return v in _CMAKE_FALSE or v.endswith("-NOTFOUND")


def left_out_by(rule: LibraryRule, defines: Mapping[str, str]) -> str | None:
    """The `NAME=VALUE` of `rule.left_out_by` that `defines` sets, if any: equal without case, or both false
    as CMake reads them (`OFF` and `0`)."""
    for setting in rule.left_out_by:
        name, _, value = setting.partition("=")
        if name not in defines:
            continue
        given = str(defines[name])
        if given.strip().upper() == value.strip().upper() or (_cmake_false(given) and _cmake_false(value)):
            return f"{name}={given}"
    return None


def arch_rows(archs: tuple[Arch, ...], spec: Verify, defines: Mapping[str, str] | None = None) -> list[ArchRow]:
    """Per asked arch, what its GPUs get, by verify's own rules: FP4 where a library with `fp4` (or the recipe's
    `fp4_library`) loads on an arch that runs FP4, which is what verify then asks of the wheel's SASS. A library
    the build's `defines` leave out is loaded by none, and its parts say which define."""
    defines = defines or {}
    named = list(dict.fromkeys(name for rule in spec.libraries for name in rule.carries))
    off = {rule.glob: why for rule in spec.libraries if (why := left_out_by(rule, defines))}
    fp4_rules = [*spec.libraries, *([LibraryRule(glob=spec.fp4_library, fp4=True)] if spec.fp4_library else [])]
    rows = []
    for arch in archs:
        applies = [rule for rule in spec.libraries if wanted(rule, (arch,)) is not None]
        rules = [rule for rule in applies if rule.glob not in off]
        has = {name for rule in rules for name in rule.carries
               if not rule.carries_on or arch.cc in {a.cc for a in parse_arch_list(list(rule.carries_on))}}
        left_out = {name: off[rule.glob] for rule in applies if rule.glob in off for name in rule.carries
                    if name not in has}
        fp4_here = any(rule.fp4 and rule.glob not in off and wanted(rule, (arch,)) is not None for rule in fp4_rules)
        note = fp4_note(arch) if not arch.fp4_capable or fp4_here else "no (no library of the recipe holds FP4 kernels)"
        rows.append(ArchRow(arch.torch, [rule.glob for rule in rules], note, {name: name in has for name in named},
                            left_out))
    return rows


def fp4_archs(rows: list[ArchRow]) -> list[str]:
    return [row.arch for row in rows if row.fp4 == "yes"]
