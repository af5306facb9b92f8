"""What the device code in a library is: cubin and PTX archs (`cuobjdump --list-elf
--list-ptx`), SASS opcode counts of one arch's cubins (`cuobjdump -xelf` + `nvdisasm`), and
the SASS of every function (`cuobjdump -sass`, streamed: the prune proof).

Disassembling every cubin of a 370 MB library takes minutes; the FP4 verdict needs one FP4
instruction of the asked arch (a match of any `[verify] fp4_sass` pattern: the patterns are
alternatives, SM120's OMMA.SF and SM100's UTCOMMA never occur in the same arch). So only the
asked arch's cubins are extracted (`-arch`), disassembled likeliest first, in parallel, each
read as nvdisasm writes it, and the scan stops at the first FP4 instruction (nvdisasm killed).
Stopping when every pattern was seen never stopped at sm_120a (UTCOMMA is SM100's): sgl-kernel
0.3.21's 74 sm_120a cubins took 205 s cold on 2 cores; the first cubin (of the FP4-named ones)
decides it in about a second. One streamed `cuobjdump -sass -arch sm_120a` of the library took
100-142 s to its first FP4 line: it disassembles in file order, the FP4 cubins late.
Absence cannot stop early: kernel names do not reliably say FP4 (a block-scaled CUTLASS GEMM may
not), so every cubin is read (35 sm_120a cubins of sglang-kernel 0.4.10's sm100/common_ops: 34-37
CPU s here; nvdisasm `-c -ndf` measured no faster). Whole counts (`complete`: `verify --counts`,
the JIT cache) disassemble every cubin to its end. Each cubin's whole counts are kept by its
content (sha256 of the cubin, nvdisasm's version, the patterns) in `counts_dir`, so the same cubins
are not disassembled again (doctor run again, `verify --recheck`, a rebuild with unchanged kernels:
0.5-0.7 s for that library); a cubin whose reading was stopped is never kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import sys
import threading
from collections.abc import Generator, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from build_kernel import atomic, log, process
from build_kernel.errors import VerifyError

NO_DEVICE_CODE = "does not contain device code"
_FP4_NAME = re.compile(r"fp4|e2m1|nvfp4|mxf4", re.IGNORECASE)


def find_tool(name: str, env: Mapping[str, str]) -> str | None:
    """cuobjdump/nvdisasm: PATH, then the PyPI nvidia-cuda-* wheels, then CUDA_HOME."""
    found = shutil.which(name, path=env.get("PATH"))
    if found:
        return found
    for base in {Path(p) for p in sys.path if p}:
        for candidate in base.glob(f"nvidia/*/bin/{name}"):
            return str(candidate)
    candidate = Path(env.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / name
    return str(candidate) if candidate.is_file() else None


def tool_env(env: Mapping[str, str]) -> dict[str, str]:
    """cuobjdump -sass runs nvdisasm: put it on PATH."""
    out = dict(env)
    nvdisasm = find_tool("nvdisasm", env)
    if nvdisasm:
        out["PATH"] = f"{Path(nvdisasm).parent}:{out.get('PATH', '')}"
    return out


def cuobjdump(env: Mapping[str, str]) -> str:
    """cuobjdump, installed from PyPI into the tool's own environment when absent."""
    found = find_tool("cuobjdump", env)
    if found:
        return found
    log.info("cuobjdump not found: installing nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm")
    fix = "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or put the CUDA toolkit's bin on PATH"
    process.run([sys.executable, "-m", "pip", "install", "--quiet", "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"],
                error=VerifyError, what="cuobjdump not found and could not be installed", fix=fix, env=env)
    found = find_tool("cuobjdump", env)
    if not found:
        raise VerifyError("cuobjdump not found: installed nvidia-cuda-cuobjdump, but no cuobjdump appeared", hint=fix)
    return found


@dataclass(frozen=True)
class Listing:
    """The device code of one library: cubin archs and PTX archs (`sm_90` = compute_90 PTX)."""

    cubins: tuple[str, ...]
    ptx: tuple[str, ...]


def listing(so: Path, tool: str, env: Mapping[str, str]) -> Listing:
    """One `cuobjdump --list-elf --list-ptx` call (the library is read once)."""
    proc = process.run([tool, "--list-elf", "--list-ptx", so], error=VerifyError, what=f"cuobjdump --list-elf {so.name}",
                       env=env, check=False)
    if proc.returncode and NO_DEVICE_CODE not in proc.stderr + proc.stdout:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VerifyError(f"cuobjdump --list-elf {so.name} failed: {tail}")
    return Listing(tuple(sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", proc.stdout)))),
                   tuple(sorted(set(re.findall(r"\.(sm_\d+[af]?)\.ptx", proc.stdout)))))


@dataclass
class Scan:
    """SASS matches per pattern in the cubins disassembled, and how many there were."""

    matches: dict[str, int]
    scanned: int
    total: int
    kept: int = 0  # of the scanned, those whose counts were kept from an earlier scan (not disassembled again)
    whole: bool = True  # False: stopped at the first FP4 instruction, the counts are of what was read
    disassembled: tuple[str, ...] = ()  # the cubins nvdisasm read (to their end or until stopped), as started
    first: str = ""  # where the scan stopped: the instruction and its cubin

    def describe(self, arch: str) -> str:
        where = f": {self.first}" if self.first else " in the kept counts"
        stop = "" if self.whole else f" (stopped at the first FP4 instruction{where}; --counts counts them all)"
        kept = f", {self.kept} of them by their kept counts" if self.kept else ""
        return f"{self.scanned} of {self.total} {arch} cubins disassembled{kept}{stop}"


def _fp4_first(cubin: Path) -> tuple[int, int]:
    """Order: cubins whose kernels are named for FP4 first (names only order the search;
    the opcodes are the proof), then the larger ones."""
    with cubin.open("rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        names = [s.name for s in symtab.iter_symbols()] if isinstance(symtab, SymbolTableSection) else []
    return (-sum(1 for n in names if _FP4_NAME.search(n)), -cubin.stat().st_size)


def _count(cubin: Path, nvdisasm: str, patterns: tuple[str, ...], env: Mapping[str, str]) -> dict[str, int]:
    # Failing, the same one line as the early-stopping reader's (process.lines): the command, its exit, its last word.
    proc = process.run([nvdisasm, cubin], error=VerifyError, what=f"nvdisasm {cubin.name}", env=env,
                       fix="install nvidia-cuda-nvdisasm matching cuobjdump")
    return {p: len(re.findall(p, proc.stdout)) for p in patterns}


_BLOCK = 4096  # lines searched at once: one regex call per block, not per line (a large cubin is millions of lines)


def _blocks(lines: Iterable[str]) -> Iterator[str]:
    block: list[str] = []
    for line in lines:
        block.append(line)
        if len(block) == _BLOCK:
            yield "".join(block)
            block = []
    if block:
        yield "".join(block)


def _word(text: str, hit: re.Match[str]) -> str:
    """The whole instruction word a pattern matched in (`E2M1` -> `F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C`)."""
    start = max(text.rfind(c, 0, hit.start()) for c in " \t\n") + 1
    ends = [e for c in " \t\n," if (e := text.find(c, hit.end())) >= 0]
    return text[start:min(ends, default=len(text))]


def _count_until(cubin: Path, nvdisasm: str, patterns: tuple[str, ...], env: Mapping[str, str],
                 found: threading.Event, first: list[str]) -> tuple[dict[str, int], bool]:
    """`cubin`'s counts read as nvdisasm writes them, until an FP4 instruction is seen here (`found` is set, the
    instruction added to `first`) or by another cubin's reader: (counts, whole). Stopping kills nvdisasm
    (process.lines). An SASS instruction is one line, so the patterns are counted within blocks of lines, as in
    the whole text."""
    anyone = re.compile("|".join(f"(?:{p})" for p in patterns))
    counts = {p: 0 for p in patterns}
    lines = process.lines([nvdisasm, cubin], error=VerifyError, what=f"nvdisasm {cubin.name}", env=env,
                          fix="install nvidia-cuda-nvdisasm matching cuobjdump")
    try:
        for block in _blocks(lines):
            if hit := anyone.search(block):
                for p in patterns:
                    counts[p] += len(re.findall(p, block))
                first.append(f"{_word(block, hit)} in {cubin.name}")
                found.set()
            if found.is_set():
                return counts, False
    finally:
        if isinstance(lines, Generator):  # not read to its end: closing it stops nvdisasm
            lines.close()
    return counts, True


class _Counts:
    """Per-cubin opcode counts kept by content: `<counts_dir>/<key>.json`, key = sha256 of the cubin's bytes,
    nvdisasm's own version line and the patterns. None: nothing kept."""

    def __init__(self, folder: Path | None, nvdisasm: str, patterns: tuple[str, ...], env: Mapping[str, str]) -> None:
        self.folder = folder
        if folder is None:
            self.salt = b""
            return
        version = process.run([nvdisasm, "--version"], error=VerifyError, what="nvdisasm --version", env=env,
                              check=False).stdout.strip().splitlines()
        self.salt = json.dumps([version[-1:], patterns]).encode()

    def _path(self, cubin: Path) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / f"{hashlib.sha256(cubin.read_bytes() + self.salt).hexdigest()[:40]}.json"

    def get(self, cubin: Path) -> dict[str, int] | None:
        path = self._path(cubin)
        try:
            return dict(json.loads(path.read_text())) if path else None
        except (OSError, ValueError):
            return None  # not kept yet, or damaged: disassembled again

    def put(self, cubin: Path, counts: dict[str, int]) -> None:
        path = self._path(cubin)
        if path is not None:
            with contextlib.suppress(OSError):  # a cache that cannot be written costs time, never the verdict
                atomic.write_text(path, json.dumps(counts))


def fp4_scan(so: Path, arch: str, patterns: tuple[str, ...], tool: str, env: Mapping[str, str], workdir: Path,
             workers: int, *, complete: bool = False, counts_dir: Path | None = None) -> Scan:
    """Disassemble `arch`'s cubins of `so` (no other arch's: `cuobjdump -arch`), likeliest first, in parallel,
    until an FP4 instruction (a match of any pattern) is seen; every cubin when none is (absence needs all of
    them). `complete`: every cubin to its end, for whole counts. Whole counts kept in `counts_dir` for a cubin of
    the same bytes are taken as they are; counts of a cubin whose reading was stopped are never kept."""
    out = workdir / f"{so.name}.{arch}"
    out.mkdir(parents=True, exist_ok=True)
    process.run([tool, "-arch", arch, "-xelf", "all", so.resolve()], error=VerifyError,
                what=f"cuobjdump -xelf {so.name}", cwd=out, env=env)
    cubins = sorted(out.glob("*.cubin"), key=_fp4_first)
    nvdisasm = find_tool("nvdisasm", env)
    if nvdisasm is None:
        raise VerifyError("nvdisasm not found", hint="pip install nvidia-cuda-nvdisasm (the FP4 check disassembles SASS)")
    kept = _Counts(counts_dir, nvdisasm, patterns, env)
    seen = {p: 0 for p in patterns}
    known = {c: counted for c in cubins if (counted := kept.get(c)) is not None and set(counted) == set(patterns)}
    for counted in known.values():
        for p, n in counted.items():
            seen[p] += n
    todo = [c for c in cubins if c not in known]
    found = threading.Event()
    started: list[str] = []  # list.append is atomic: the pool's threads record what they disassemble
    first: list[str] = []  # the FP4 instructions that stopped the scan (two readers may find one at once)

    def count(cubin: Path) -> tuple[dict[str, int], bool]:
        if found.is_set():
            return {p: 0 for p in patterns}, False  # decided before this one started: not disassembled
        started.append(cubin.name)
        counted, whole = (_count(cubin, nvdisasm, patterns, env), True) if complete else \
            _count_until(cubin, nvdisasm, patterns, env, found, first)
        if whole:
            kept.put(cubin, counted)
        return counted, whole

    results: list[tuple[dict[str, int], bool]] = []
    if todo and (complete or not any(seen.values())):
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            pending = [pool.submit(count, c) for c in todo]
            for future in as_completed(pending):
                if future.exception() is not None:  # a reader's error is the scan's: the others stop first
                    found.set()
                    for other in pending:
                        other.cancel()
                    future.result()
                if found.is_set():  # never set by a find when complete
                    for other in pending:
                        other.cancel()
                    break
        # Leaving the pool waited for the ones already running (stopped by `found`): what they read counts too.
        results = [f.result() for f in pending if not f.cancelled()]
    total = {p: seen[p] + sum(counted[p] for counted, _ in results) for p in patterns}
    whole = len(known) + sum(1 for _, w in results if w) == len(cubins)
    return Scan(total, len(known) + len(started), len(cubins), len(known), whole, tuple(started),
                first[0] if first and not whole else "")


def sass_lines(so: Path, tool: str, env: Mapping[str, str]) -> Iterator[str]:
    """`cuobjdump -sass` of every cubin in `so`, line by line: one call per library, streamed,
    because a large library (a real kernel library's largest) disassembles to hundreds of MB of text.
    A library without device code yields nothing."""
    yield from process.lines([tool, "-sass", so], error=VerifyError, what=f"cuobjdump -sass {so.name}",
                             fix="install nvidia-cuda-nvdisasm matching cuobjdump", env=tool_env(env),
                             tolerate=NO_DEVICE_CODE)
