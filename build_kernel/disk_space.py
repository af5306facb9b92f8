"""Disk space: what a plan needs in each folder it writes, and a full disk said as one line.

Before any work, readiness (the pipeline's first step, `build`'s, and `doctor --recipe`) compares each folder's
free space with `needs(plan)`. During the work, a write that meets a full disk (ENOSPC in this process, or
"No space left on device" from a program it ran: CMake, nvcc, pip, git) ends as a `DiskFullError` naming the
folder, what the work needs there and what is free; the stage's other errors stay theirs. Every write that a
rerun reads is atomic (build_kernel/atomic.py), so after space is freed the same command resumes.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from build_kernel import examples
from build_kernel.errors import BuildKernelError, DiskFullError

if TYPE_CHECKING:
    from build_kernel.plan import Plan

MB = 1_000_000
GB = 1_000_000_000

# What the demo (a miniature of `example:` sources) needs, measured: `python bench/faults/disk_full.py need` runs
# `build-kernel --recipe demo` with its cache, output, index and TMPDIR each on a tmpfs of its own and samples
# their use every 0.1 s (bench/faults/raw/disk_full/need.json, 2026-12-07): peaks 34.4 MB (cache: the test
# environment 26 MB, the build folder 7 MB), 94 kB (output), 82 kB (index), 7.3 MB (TMPDIR: nvcc's intermediate
# files). The needs are the peaks doubled and rounded up, the two small ones raised to 1 MB.
DEMO_CACHE = 70 * MB
DEMO_OUTPUT = 1 * MB
DEMO_INDEX = 1 * MB
DEMO_TEMPORARY = 16 * MB
# A real build (sgl-kernel), from its measured parts: the source and its dependencies (the git mirrors of
# cutlass, flashinfer, mscclpp, sgl-flash-attn, DeepGEMM, FlashMLA: 330 MB packed, checkouts about twice that),
# ~50 objects of 0.3-1.4 MB each (obj_bytes of /work/shared/data/sgl-kernel-tu-compile-profile.csv), a 15.8 MB
# common_ops.abi3.so, an 11.8 MB wheel (bench/real_build/raw/local-2c-2026-12-07-fresh-clone): about 1 GB; 4 GB
# keeps room for CMake's FetchContent copies and a second build folder (another commit). The build environment
# (torch 2.14.1+cu130: 1.2 GB of torch, 3.2 GB of nvidia/, pip's downloads kept): 8 GB.
REAL_CACHE = 4 * GB
ENV = 8 * GB
REAL_WHEEL = 24 * MB  # the 11.8 MB wheel, twice (the wheel beside its verify and test records; a second build)
# A rerun whose wheel is already built (same recipe, commit and archs in the cache): records, logs, and the test
# stage's environment (the demo's: 26 MB measured, need.json), doubled and rounded up.
CACHED_BUILD = 64 * MB
# Free space below which a folder counts as full whatever the failure said: less than the smallest file a stage
# writes in one go (a page, a record: a few kB; the demo's wheel 94 kB), so a disk this full fails the next write.
NEARLY_FULL = 256_000
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|\[Errno 28\]|\bENOSPC\b")
# A log a message names (process.run's `; full log: PATH`, a build's `see PATH`): read for what its tail says.
_LOG_PATH = re.compile(r"(/\S+\.log)\b")


@dataclass(frozen=True)
class Need:
    role: str  # cache, output, index, temporary
    folder: Path
    bytes: int
    basis: str  # where the figure comes from
    fix: str  # how to put the folder on a larger disk

    def free(self) -> int:
        return free_bytes(self.folder)

    @property
    def label(self) -> str:
        return {"output": "output folder", "temporary": "temporary folder"}.get(self.role, self.role)


def human(n: float) -> str:
    for unit, size in (("GB", GB), ("MB", MB), ("kB", 1000)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def existing(folder: Path) -> Path:
    """The folder, or its nearest existing parent (nothing is created to ask)."""
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(existing(folder)).free


def _cached_build(plan: Plan) -> bool:
    """Whether the cache holds a wheel of this recipe, source commit and archs (the build stage will reuse it)."""
    archs = [a.torch for a in plan.archs]
    for record in (plan.cache_dir / "wheels").glob("*/provenance.json"):
        try:
            p = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if (p.get("recipe"), p.get("commit"), p.get("archs")) == (plan.recipe.name, plan.recipe.source.commit, archs):
            return True
    return False


def static_index(plan: Plan) -> Path | None:
    """The recipe's [publish] target when it is a folder (a static index this host writes); None otherwise."""
    target = plan.recipe.publish.target
    if not target or target in plan.recipe.publish.targets:
        return None
    if re.match(r"^[a-z][a-z0-9+.-]*://", target):
        return Path(target[len("file://"):]) if target.startswith("file://") else None
    return Path(target).expanduser().resolve() if ("/" in target or target.startswith((".", "~"))) else None


def needs(plan: Plan, *, env_built: bool) -> list[Need]:
    """What the plan writes, folder by folder: the cache (sources, build folder, environments), the output folder
    (the wheel), the recipe's static index, and the temporary folder (compilers' intermediate files)."""
    miniature = examples.is_example(plan.recipe.source.repo)
    cached = _cached_build(plan)
    if cached:
        cache, basis = CACHED_BUILD, "its wheel is in the cache: records, logs and a test run"
    elif miniature:
        cache, basis = DEMO_CACHE, "a miniature build, measured"
    else:
        cache, basis = REAL_CACHE, "a build of sgl-kernel's size"
    if not env_built and not miniature:
        cache, basis = cache + ENV, f"{basis}, and the build environment with torch"
    wheel = DEMO_OUTPUT if miniature else REAL_WHEEL
    found = [Need("cache", plan.cache_dir, cache, basis, "pass --cache-dir on a larger disk"),
             Need("output", plan.output_dir, wheel, "the wheel and its records", "pass --output-dir on a larger disk")]
    if (index := static_index(plan)) is not None:
        found.append(Need("index", index, DEMO_INDEX if miniature else REAL_WHEEL, "the wheel and its pages",
                          "set [publish] target to a folder on a larger disk"))
    if miniature and not cached:  # a real build's temporary files are not measured: not asked of the disk
        found.append(Need("temporary", Path(tempfile.gettempdir()), DEMO_TEMPORARY, "compilers' intermediate files",
                          "set TMPDIR to a folder on a larger disk"))
    return found


def short(needs_: Sequence[Need]) -> list[str]:
    """One line per folder with less free than the plan needs there (folders on one disk: their needs summed)."""
    by_disk: dict[int, list[Need]] = {}
    for need in needs_:
        by_disk.setdefault(os.stat(existing(need.folder)).st_dev, []).append(need)
    lines = []
    for together in by_disk.values():
        total, free = sum(n.bytes for n in together), together[0].free()
        if free >= total:
            continue
        names = " and ".join(f"the {n.label} {n.folder} ({human(n.bytes)}: {n.basis})" for n in together)
        lines.append(f"{human(free)} free in {existing(together[0].folder)}; {names} "
                     f"{'need' if len(together) > 1 else 'needs'} about {human(total)} there "
                     f"(free space, or {together[0].fix})")
    return lines


# ---- a full disk during the work --------------------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def _log_says_full(text: str) -> bool:
    for match in _LOG_PATH.finditer(text):
        path = Path(match.group(1))
        try:
            with path.open("rb") as fh:
                fh.seek(max(0, path.stat().st_size - 64_000))
                if _FULL_TEXT.search(fh.read().decode(errors="replace")):
                    return True
        except OSError:
            continue
    return False


def full_path(exc: BaseException) -> Path | bool:
    """Whether `exc` is a full disk: the path it could not write (when it says one), True when it does not say,
    False when it is not a full disk."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            # A copy names its source first and the file it was writing second (shutil's sendfile copy).
            written = e.filename2 if isinstance(e.filename2, str) else e.filename
            return Path(written) if isinstance(written, str) else True
    for e in _chain(exc):
        text = e.render() if isinstance(e, BuildKernelError) else str(e)
        # A child's output kept on the exception (subprocess.CalledProcessError: ensurepip in a full cache).
        text += "".join(x if isinstance(x, str) else x.decode(errors="replace")
                        for x in (getattr(e, "output", None), getattr(e, "stderr", None)) if isinstance(x, str | bytes))
        if _FULL_TEXT.search(text) or _log_says_full(text):
            return True
    return False


def disk_full(exc: BaseException, needs_: Sequence[Need], doing: str) -> DiskFullError | None:
    """`exc` as a full disk (None when it is not one): the folder it was writing (the path it names, else the
    plan's folder with the least free space for what it needs), what the plan needs there and what is free."""
    where = full_path(exc)
    if where is False:
        # Not said as a full disk, but a folder the work writes has (next to) nothing free: the failure is that
        # (nvcc with a full TMPDIR says `Could not open output file`, which a read-only folder says too).
        nearly_full = [n for n in needs_ if n.free() < min(n.bytes, NEARLY_FULL)]
        if not nearly_full:
            return None
        return full_error(min(nearly_full, key=lambda n: n.free()), doing)
    if not needs_:
        return None
    chosen = None
    if isinstance(where, Path):
        inside = [n for n in needs_ if where.is_relative_to(n.folder) or n.folder in where.parents]
        chosen = max(inside, key=lambda n: len(n.folder.parts), default=None)
    if chosen is None:
        chosen = min(needs_, key=lambda n: n.free() - n.bytes)
    return full_error(chosen, doing)


def full_error(need: Need, doing: str) -> DiskFullError:
    return DiskFullError(f"no space left in {need.folder} (the {need.label}) during {doing}: about "
                         f"{human(need.bytes)} needed there ({need.basis}), {human(need.free())} free",
                         hint=f"free space there, or {need.fix}, then run the same command again")
