"""The proof that arch pruning removed only code that cannot run (issue 22 item 2).

A pruned wheel (the arch-dispatch patch: only the asked families' branches instantiated) is
compared with an unpruned build of the same commit and archs: for every library and every
arch (cubin) of the pruned one, each of its functions must exist in the unpruned library with
the same SASS, and the FP4 opcode counts (`[verify] fp4_sass`) must be equal per library.
Functions only the unpruned side has are what pruning removed (listed, not a failure).

Each library is disassembled by one streamed `cuobjdump -sass` call (cubins.sass_lines); every
function is kept as a digest plus its compressed text, so a 16 MB common_ops with 67 cubins
stays small in memory and a differing function can still name its first differing instruction.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import zlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from build_kernel.stages.verify import cubins
from build_kernel.stages.verify.checks import unpack

# What is normalised, and why (everything else must be byte-for-byte the same text):
# - the `/*0120*/` offset and the `/* 0x... */` encoding comments: the encoding repeats the
#   instruction (and carries relocated values, below); offsets are implied by the order;
# - the bank offset of constant banks other than 0, `c[0x4][0x10]` -> `c[0x4][~]`: bank 0 is
#   the kernel's parameters (laid out by its signature: kept), but the other banks (global
#   addresses filled in by relocations, `__constant__` data) are laid out per cubin, so the
#   same variable sits elsewhere once other kernels are gone;
# - call targets, `CALL.REL.NOINC 0x1a0` -> `CALL.REL.NOINC ~`: a callee in another section
#   is at a layout-dependent distance;
# - relocation expressions of relocatable code, `32@lo(sym)` -> `32@lo(~)`;
# - nvcc's per-compilation tag in anonymous-namespace names, `_GLOBAL__N__93fb1d96_` ->
#   `_GLOBAL__N__~_`: it differs between two compiles of one file (seen: the miniature's
#   pruned and unpruned builds), so every kernel in an anonymous namespace would look missing.
# - nvcc's per-compilation tag in internal-linkage names, `_INTERNAL_02384fa1_14_gguf_kernel_cu_cd241319`
#   -> `_INTERNAL_~_14_gguf_kernel_cu_~`: the same kind of tag (seen: the real 12.0a pair, 129 gguf
#   and other `static` kernels of unpruned files looked missing);
# - a register index into a bank other than 0 set by an immediate just before, `MOV R8, 0x148` then
#   `LDC.64 R8, c[0x4][R8]` -> `MOV R8, ~`: the same layout-dependent offset as above, spelled in two
#   instructions (seen: the real 12.0a pair with the small TUs batched, build_tree_efficient);
# - with `across_tus` (a build that compiles several sources as one TU: unity batches), the TU's own
#   name in anonymous-namespace and internal-linkage names, `_ZN39_GLOBAL__N__9fe90409_7_topk_cu_e84ba852`
#   -> `_ZN~_GLOBAL__N__~`: nvcc names them after the file it compiled, the batch, not the file that
#   holds the function (a same-named function of two files is then one name with two bodies).
# Branch targets (`BRA 0x180`) are kept: cuobjdump prints them relative to the function's own
# section, so identical code has identical targets and a changed jump is a real difference.
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(.*?)\s*(?:/\* 0x[0-9a-f]+ \*/)?\s*$")
_FUNCTION = re.compile(r"^\s+Function : (\S+)")
_ARCH = re.compile(r"^arch = (\S+)")
_BANK = re.compile(r"c\[0x([0-9a-f]+)\]\[[^\]]*\]")
_CALL = re.compile(r"^((?:@!?U?P\w+\s+)?CALL\.\S+)\s+0x[0-9a-f]+")
_RELOC = re.compile(r"(32@(?:lo|hi))\([^)]*\)")
_ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_")
# `_INTERNAL_<tag>_<n>_<file name, n characters>_<8-hex tag>`; the file name's length is read, since
# the next mangled name starts with digits a greedy hex match would take.
_INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]+_(\d+)_")
_INTERNAL_TAIL = re.compile(r"_[0-9a-f]{8}")
# The whole namespace of `across_tus`: `<length>_GLOBAL__N__<tag>_<n>_<file name, n characters>_<8-hex>`.
_TU_NAMESPACE = re.compile(r"(\d+)(_GLOBAL__N__|_INTERNAL_)[0-9a-f]+_(\d+)_")
_BANK_INDEX = re.compile(r"c\[0x0*[1-9a-f][0-9a-f]*\]\[(U?R\d+)\]")
_MOV_IMM = re.compile(r"^((?:@!?U?P\w+\s+)?U?MOV\S*\s+(U?R\d+),\s*)0x[0-9a-f]+$")
_BACK = 8  # how far back the immediate of a bank index is looked for


def untag(name: str) -> str:
    """A name with nvcc's per-compilation tags replaced by `~` (anonymous namespaces, internal linkage)."""
    name = _ANON.sub("_GLOBAL__N__~_", name)
    out, pos = [], 0
    for m in _INTERNAL.finditer(name):
        if m.start() < pos:
            continue
        end = m.end() + int(m.group(1))
        tail = _INTERNAL_TAIL.match(name, end)
        if tail is None:
            continue
        out += [name[pos:m.start()], f"_INTERNAL_~_{m.group(1)}_{name[m.end():end]}_~"]
        pos = tail.end()
    return "".join(out) + name[pos:]


def untag_tu(name: str) -> str:
    """`untag` that also drops the TU's own name (see `across_tus` above); the length prefix goes too."""
    out, pos = [], 0
    for m in _TU_NAMESPACE.finditer(name):
        if m.start() < pos:
            continue
        tail = _INTERNAL_TAIL.match(name, m.end() + int(m.group(3)))
        if tail is None or tail.end() - m.end(1) != int(m.group(1)):
            continue  # not a whole length-prefixed namespace: left to untag
        out += [name[pos:m.start()], f"~{m.group(2)}~"]
        pos = tail.end()
    return untag("".join(out) + name[pos:])


def bank_index_immediates(instructions: list[str]) -> list[str]:
    """Each `MOV Rn, 0x…` whose register indexes a bank other than 0 within the next few instructions,
    with its immediate as `~` (see above)."""
    out = list(instructions)
    for i, text in enumerate(instructions):
        for reg in _BANK_INDEX.findall(text):
            for j in range(i - 1, max(-1, i - 1 - _BACK), -1):
                if (m := _MOV_IMM.match(out[j].rstrip(" ;"))) is not None and m.group(2) == reg:
                    out[j] = f"{m.group(1)}~"
                    break
    return out


def _bank(m: re.Match[str]) -> str:
    return m.group(0) if m.group(1) == "0" else f"c[0x{m.group(1)}][~]"


def normalise(instruction: str) -> str:
    text = instruction.rstrip(" ;")
    text = _BANK.sub(_bank, text)
    text = _CALL.sub(r"\1 ~", text)
    return untag(_RELOC.sub(r"\1(~)", text))


@dataclass(frozen=True)
class Body:
    """One function's normalised SASS: its digest, its instruction count, the text compressed."""

    digest: bytes
    count: int
    packed: bytes

    def lines(self) -> list[str]:
        return zlib.decompress(self.packed).decode().split("\n") if self.count else []


@dataclass
class Disassembly:
    """A library's functions per (arch, name); a name may repeat (one copy per cubin)."""

    functions: dict[tuple[str, str], list[Body]] = field(default_factory=dict)
    fp4: dict[str, int] = field(default_factory=dict)  # "sm_120a:PATTERN" -> matches

    @property
    def archs(self) -> list[str]:
        return sorted({arch for arch, _ in self.functions})

    def count(self) -> int:
        return sum(len(bodies) for bodies in self.functions.values())


def parse(lines: Iterable[str], patterns: tuple[str, ...], *, across_tus: bool = False) -> Disassembly:
    """`cuobjdump -sass` text to functions; FP4 opcodes counted per arch as they go by."""
    out = Disassembly()
    compiled = [(p, re.compile(p)) for p in patterns]
    arch, name, body = "", "", list[str]()
    name_of = untag_tu if across_tus else untag

    def close() -> None:
        if not name:
            return
        text = "\n".join(normalise(i) for i in bank_index_immediates(body))
        out.functions.setdefault((arch, name), []).append(
            Body(hashlib.blake2b(text.encode(), digest_size=16).digest(), len(body), zlib.compress(text.encode(), 1)))
        for pattern, rx in compiled:
            key = f"{arch}:{pattern}"
            out.fp4[key] = out.fp4.get(key, 0) + len(rx.findall(text))

    for line in lines:
        if (m := _INSTRUCTION.match(line)) is not None:
            if name:
                body.append(m.group(1))
        elif (m := _FUNCTION.match(line)) is not None:
            close()
            name, body = name_of(m.group(1)), []
        elif (m := _ARCH.match(line)) is not None:
            close()
            name, body, arch = "", [], m.group(1)
            for pattern, _ in compiled:
                out.fp4.setdefault(f"{arch}:{pattern}", 0)
    close()
    return out


@dataclass
class Difference:
    arch: str
    function: str
    first: str  # the first differing instruction, both sides


@dataclass
class LibraryProof:
    path: str
    archs: list[str]
    functions_pruned: int = 0
    functions_unpruned: int = 0
    identical: int = 0
    # Functions of the pruned library the unpruned one lacks ("arch function"): a failure.
    missing: list[str] = field(default_factory=list)
    differing: list[Difference] = field(default_factory=list)
    # In the unpruned library only: what pruning removed ("arch function", one per copy).
    removed: int = 0
    removed_functions: list[str] = field(default_factory=list)
    fp4_pruned: dict[str, int] = field(default_factory=dict)
    fp4_unpruned: dict[str, int] = field(default_factory=dict)


@dataclass
class Proof:
    pruned: str
    unpruned: str
    libraries: list[LibraryProof] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "passed": self.passed}


def first_difference(ours: Body, theirs: Body) -> str:
    a, b = ours.lines(), theirs.lines()
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # one may be longer: handled below
        if x != y:
            return f"instruction {i}: pruned `{x}`, unpruned `{y}`"
    i = min(len(a), len(b))
    return f"instruction {i}: pruned {f'`{a[i]}`' if i < len(a) else 'ends'}, " \
           f"unpruned {f'`{b[i]}`' if i < len(b) else 'ends'}"


def compare(path: str, pruned: Disassembly, unpruned: Disassembly) -> LibraryProof:
    lib = LibraryProof(path, pruned.archs, pruned.count(), unpruned.count())
    left = {key: list(bodies) for key, bodies in unpruned.functions.items()}
    for (arch, name), bodies in sorted(pruned.functions.items()):
        theirs = left.get((arch, name), [])
        for body in bodies:
            same = next((i for i, other in enumerate(theirs) if other.digest == body.digest), None)
            if same is not None:
                theirs.pop(same)
                lib.identical += 1
            elif not theirs:
                lib.missing.append(f"{arch} {name}")
            else:
                lib.differing.append(Difference(arch, name, first_difference(body, theirs.pop(0))))
    # What the unpruned side still holds unmatched is what pruning removed.
    lib.removed_functions = [f"{arch} {name}" for (arch, name), rest in sorted(left.items()) for _ in rest]
    lib.removed = len(lib.removed_functions)
    lib.fp4_pruned, lib.fp4_unpruned = pruned.fp4, unpruned.fp4
    return lib


def _failures(lib: LibraryProof, unpruned_archs: list[str]) -> list[str]:
    out = []
    absent = sorted(set(lib.archs) - set(unpruned_archs))
    if absent:
        out.append(f"{lib.path}: the unpruned library has no {', '.join(absent)} code to compare with")
    if lib.missing:
        out.append(f"{lib.path}: {len(lib.missing)} function(s) of the pruned library are not in the unpruned one "
                   f"(first: {lib.missing[0]})")
    if lib.differing:
        d = lib.differing[0]
        out.append(f"{lib.path}: {len(lib.differing)} function(s) have other SASS than in the unpruned library "
                   f"(first: {d.function} on {d.arch}, {d.first})")
    counts = {k: (lib.fp4_pruned.get(k, 0), lib.fp4_unpruned.get(k, 0)) for k in lib.fp4_pruned
              if k.split(":", 1)[0] in lib.archs}
    unequal = {k: v for k, v in counts.items() if v[0] != v[1]}
    if unequal:
        out.append(f"{lib.path}: FP4 opcode counts differ: "
                   + ", ".join(f"{k} pruned {a} vs unpruned {b}" for k, (a, b) in sorted(unequal.items())))
    return out


def prove(pruned: Path, unpruned: Path, patterns: tuple[str, ...], *, env: Mapping[str, str],
          across_tus: bool = False) -> Proof:
    """Compare every CUDA library of `pruned` with its counterpart (same path) in `unpruned`."""
    tool = cubins.cuobjdump(env)
    proof = Proof(pruned.name, unpruned.name)
    with tempfile.TemporaryDirectory(prefix="bk-prune-proof-") as tmp_str:
        tmp = Path(tmp_str)
        ours, _ = unpack(pruned, tmp / "pruned", libraries_only=True)
        theirs, _ = unpack(unpruned, tmp / "unpruned", libraries_only=True)
        rel_ours = {str(so.relative_to(tmp / "pruned")): so for so in ours}
        rel_theirs = {str(so.relative_to(tmp / "unpruned")): so for so in theirs}
        jobs = [*rel_ours.values(), *(rel_theirs[r] for r in rel_ours if r in rel_theirs)]
        # cuobjdump runs in its own process; the parsing threads share the GIL but overlap with it.
        with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 2) or 1) as pool:
            done = dict(zip(jobs, pool.map(lambda so: parse(cubins.sass_lines(so, tool, env), patterns,
                                                                across_tus=across_tus), jobs),
                            strict=True))
    for rel, so in sorted(rel_ours.items()):
        mine = done[so]
        if not mine.functions:
            continue  # no device code (a host-only library)
        if rel not in rel_theirs:
            proof.failures.append(f"{rel}: not in the unpruned wheel {unpruned.name} (compare with a wheel of the same "
                                  "commit and archs built without the arch-pruning patch)")
            continue
        other = done[rel_theirs[rel]]
        lib = compare(rel, mine, other)
        proof.libraries.append(lib)
        proof.failures.extend(_failures(lib, other.archs))
    if not proof.libraries and not proof.failures:
        proof.failures.append(f"{pruned.name}: no CUDA library with device code to compare (give the built wheel, "
                              "not a pure-Python one)")
    return proof
