"""Memory cgroups this tool creates: a cap for a benchmark or a test, its counters, its removal.

cgroup v2 (`memory.max`, `memory.swap.max`) where the unified hierarchy holds the memory
controller, else v1's memory hierarchy (`memory.limit_in_bytes`, plus `memsw` so swap
cannot stretch the cap). Needs root; a group that cannot be made is one error that says
what was tried at each version.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from build_kernel.errors import BuildKernelError
from build_kernel.resources import memory_stat
from build_kernel.stages.builder.recorder import oom_kills

__all__ = ["CgroupUnavailable", "available", "in_cgroup", "limit", "limit_hits", "memory_cgroup", "oom_kills", "peak",
           "remove", "working_set"]

ROOT = Path("/sys/fs/cgroup")


class CgroupUnavailable(BuildKernelError):
    """No memory cgroup could be made here (not root, or no memory controller)."""


def _fstype(mountpoint: Path) -> str | None:
    """The type of what is mounted at `mountpoint` (the last mount there wins)."""
    kinds = [f[2] for f in (line.split() for line in Path("/proc/self/mounts").read_text().splitlines())
             if len(f) > 2 and f[1] == str(mountpoint)]
    return kinds[-1] if kinds else None


def _v2_group(root: Path, cap: int, name: str, tried: list[str]) -> Path | None:
    kind = _fstype(root)
    if kind != "cgroup2":
        tried.append(f"cgroup v2: {root} is {kind or 'not a mount point'}, not a cgroup2 mount")
        return None
    if "memory" not in (root / "cgroup.controllers").read_text().split():
        tried.append(f"cgroup v2: no memory controller in {root}/cgroup.controllers (held by a v1 hierarchy?)")
        return None
    subtree = root / "cgroup.subtree_control"
    if "memory" not in subtree.read_text().split():
        try:
            subtree.write_text("+memory")
        except OSError as exc:
            tried.append(f"cgroup v2: writing +memory to {subtree}: {exc}")
            return None
    group = root / name
    try:
        group.mkdir()
        (group / "memory.max").write_text(str(cap))
        if (group / "memory.swap.max").exists():
            (group / "memory.swap.max").write_text("0")
    except OSError as exc:
        tried.append(f"cgroup v2: creating {group} with memory.max={cap}: {exc}")
        if group.is_dir():
            group.rmdir()
        return None
    return group


def _v1_group(root: Path, cap: int, name: str, tried: list[str]) -> Path | None:
    base = root / "memory"
    if not base.is_dir():
        tried.append(f"cgroup v1: no memory hierarchy at {base}")
        return None
    group = base / name
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(cap))
        if (group / "memory.memsw.limit_in_bytes").exists():
            (group / "memory.memsw.limit_in_bytes").write_text(str(cap))
    except OSError as exc:
        tried.append(f"cgroup v1: creating {group} with memory.limit_in_bytes={cap}: {exc}")
        if group.is_dir():
            group.rmdir()
        return None
    return group


def remove(group: Path) -> None:
    """Kill what is left in the group (the caller's own children), then remove it."""
    if (group / "cgroup.kill").exists():
        (group / "cgroup.kill").write_text("1")
    else:
        for pid in (group / "cgroup.procs").read_text().split():
            with suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)  # a killed task takes a moment to leave
    group.rmdir()


@contextmanager
def memory_cgroup(cap: int, name: str, root: Path = ROOT) -> Iterator[Path]:
    """A fresh memory cgroup capped at `cap` bytes, no swap; removed (and emptied) on exit."""
    tried: list[str] = []
    full = f"build-kernel-{name}-{os.getpid()}"
    group = _v2_group(root, cap, full, tried) or _v1_group(root, cap, full, tried)
    if group is None:
        raise CgroupUnavailable("cannot create a memory cgroup: " + "; ".join(tried),
                                hint="run as root on a host with a cgroup memory controller")
    try:
        yield group
    finally:
        remove(group)


def in_cgroup(group: Path, argv: list[str]) -> list[str]:
    """argv, run as a process that first moves itself into `group` (its children follow)."""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *argv]


def peak(group: Path) -> int:
    """The group's peak memory use, page cache included (bytes)."""
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        if (group / name).is_file():
            return int((group / name).read_text())
    return 0


def limit(group: Path) -> int:
    for name in ("memory.max", "memory.limit_in_bytes"):
        if (group / name).is_file():
            return int((group / name).read_text())
    raise FileNotFoundError(f"no memory limit file in {group}")


def working_set(group: Path) -> int:
    """Usage minus inactive page cache (what the kernel cannot simply drop), as kubelet counts it.

    Raw usage counts the page cache of every file the build read, which the kernel reclaims
    before it kills anyone; counting it would starve a build of memory it really has.
    """
    for name, inactive in (("memory.current", "inactive_file"), ("memory.usage_in_bytes", "total_inactive_file")):
        if (group / name).is_file():
            return max(0, int((group / name).read_text()) - memory_stat(group, inactive))
    return 0


def available(group: Path) -> int:
    """The cap minus the working set: what the group's processes may still take (bytes)."""
    return max(0, limit(group) - working_set(group))


def limit_hits(group: Path) -> int:
    """Times the group's usage ran into its cap (v1 memory.failcnt, v2 memory.events `max`)."""
    if (group / "memory.failcnt").is_file():
        return int((group / "memory.failcnt").read_text())
    events = group / "memory.events"
    for line in events.read_text().splitlines() if events.is_file() else []:
        if line.startswith("max "):
            return int(line.split()[1])
    return 0
