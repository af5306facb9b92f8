"""CPUs and memory really available to this process, and the job count derived from them.

Host totals lie inside containers: a 128 GB host with a 24 GB cgroup limit OOM-kills a
build sized for 128 GB. So memory is min(MemAvailable, every cgroup limit up the tree
minus its usage) and CPUs are the affinity mask capped by the cgroup CPU quota.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

GB = 1024**3


@dataclass(frozen=True)
class Resources:
    cpus: int
    cpus_why: str
    memory_bytes: int
    memory_why: str

    @property
    def memory_gb(self) -> float:
        return self.memory_bytes / GB


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("max", "") else int(text)


def _cgroup_paths(proc_self_cgroup: Path) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory path) of this process, from /proc/self/cgroup."""
    v2 = v1 = None
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _walk_up(root: Path, rel: str) -> list[Path]:
    """The cgroup folder of `rel` and each ancestor up to (and including) the root."""
    here = root / rel.lstrip("/")
    chain = []
    while True:
        chain.append(here)
        if here == root or root not in here.parents:
            break
        here = here.parent
    return chain


def memory_stat(folder: Path, key: str) -> int:
    """One counter of a cgroup's memory.stat (0 when absent), e.g. the inactive file pages: page
    cache the kernel drops before it OOM-kills anyone."""
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_memory_headroom(cgroup_root: Path, proc_self_cgroup: Path) -> tuple[int | None, str]:
    """Smallest (limit − usage) over every cgroup level above us, v2 or v1.

    Usage counts the page cache of every file read (a build reads many); its inactive part is
    reclaimed before anyone is killed, so it is left out (as kubelet's working set does). The
    governor reads this every step: counted in, cache alone would hold a build back.
    """
    v2, v1 = _cgroup_paths(proc_self_cgroup)
    best: tuple[int, str] | None = None
    if v2 is not None:
        for folder in _walk_up(cgroup_root, v2):
            limit = _read_int(folder / "memory.max")
            if limit is None:
                continue
            used = max(0, (_read_int(folder / "memory.current") or 0) - memory_stat(folder, "inactive_file"))
            room = max(limit - used, 0)
            if best is None or room < best[0]:
                best = (room, f"cgroup v2 {folder}: memory.max {limit / GB:.1f} GB - current {used / GB:.1f} GB")
    if v1 is not None:
        for folder in _walk_up(cgroup_root / "memory", v1):
            limit = _read_int(folder / "memory.limit_in_bytes")
            # v1 reports "no limit" as a huge page-aligned number.
            if limit is None or limit >= 1 << 60:
                continue
            used = max(0, (_read_int(folder / "memory.usage_in_bytes") or 0) - memory_stat(folder, "total_inactive_file"))
            room = max(limit - used, 0)
            if best is None or room < best[0]:
                best = (room, f"cgroup v1 {folder}: limit {limit / GB:.1f} GB - usage {used / GB:.1f} GB")
    return (best[0], best[1]) if best else (None, "no cgroup memory limit")


def cgroup_cpu_quota(cgroup_root: Path, proc_self_cgroup: Path) -> float | None:
    """CPUs allowed by cpu.max (v2) or cfs quota/period (v1); None when unlimited."""
    v2, _ = _cgroup_paths(proc_self_cgroup)
    quotas: list[float] = []
    if v2 is not None:
        for folder in _walk_up(cgroup_root, v2):
            try:
                quota, period = (folder / "cpu.max").read_text().split()
            except (OSError, ValueError):
                continue
            if quota != "max":
                quotas.append(int(quota) / int(period))
    for folder in (cgroup_root / "cpu", cgroup_root / "cpu,cpuacct"):
        quota_v1, period_v1 = _read_int(folder / "cpu.cfs_quota_us"), _read_int(folder / "cpu.cfs_period_us")
        if quota_v1 and quota_v1 > 0 and period_v1:
            quotas.append(quota_v1 / period_v1)
    return min(quotas) if quotas else None


def probe(cgroup_root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> Resources:
    """What this process may really use now."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root, proc / "self" / "cgroup")
    if quota is not None and math.ceil(quota) < affinity:
        cpus, cpus_why = max(1, math.ceil(quota)), f"cgroup CPU quota {quota:g} (affinity {affinity})"
    else:
        cpus, cpus_why = affinity, f"CPU affinity {affinity}"
    available = psutil.virtual_memory().available
    room, room_why = cgroup_memory_headroom(cgroup_root, proc / "self" / "cgroup")
    if room is not None and room < available:
        memory, memory_why = room, room_why
    else:
        memory, memory_why = available, f"MemAvailable {available / GB:.1f} GB"
    return Resources(cpus, cpus_why, memory, memory_why)


@dataclass(frozen=True)
class JobPlan:
    jobs: int
    derivation: str
    per_job_gb: float
    source: str  # "auto", "recipe", "environment", "command line"
    # A count given by hand that this machine cannot hold (more jobs than CPUs, or than memory allows).
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def plan_jobs(
    res: Resources,
    *,
    job_memory_gb: float,
    nvcc_threads: int,
    n_archs: int,
    reserve_gb: float,
) -> JobPlan:
    """jobs = clamp(floor((available - reserve) / (per-job GB x archs in flight)), 1, CPUs).

    nvcc runs one cicc per arch, up to --threads of them at once, so a job holds
    min(threads, archs) of them in memory together.
    """
    in_flight = max(1, min(nvcc_threads, n_archs))
    per_job = job_memory_gb * in_flight
    usable = res.memory_gb - reserve_gb
    by_memory = math.floor(usable / per_job) if per_job > 0 else res.cpus
    jobs = max(1, min(by_memory, res.cpus))
    derivation = (
        f"jobs = clamp(floor(({res.memory_gb:.1f} GB available [{res.memory_why}] - {reserve_gb:g} GB reserve)"
        f" / ({job_memory_gb:g} GB x {in_flight} arch(s) in flight)) = {by_memory}, 1, {res.cpus} CPUs"
        f" [{res.cpus_why}]) = {jobs}"
    )
    return JobPlan(jobs, derivation, per_job, "auto")


def given_jobs(n: int, source: str, res: Resources, *, job_memory_gb: float, nvcc_threads: int, n_archs: int,
               reserve_gb: float) -> JobPlan:
    """A job count set by hand: taken as given, but what it asks beyond this machine is said (a build that
    OOM-kills resumes with fewer jobs, so it is a warning, not a refusal)."""
    per_job = job_memory_gb * max(1, min(nvcc_threads, n_archs))
    usable = res.memory_gb - reserve_gb
    warnings = []
    if n > res.cpus:
        warnings.append(f"jobs = {n} (set by {source}) is more than the {res.cpus} CPUs here [{res.cpus_why}]: "
                        "the extra jobs only wait and hold memory")
    if n * per_job > usable:
        fits = max(1, math.floor(usable / per_job)) if per_job > 0 else n
        warnings.append(f"jobs = {n} (set by {source}) x {per_job:g} GB a job = {n * per_job:g} GB, above the "
                        f"{usable:.1f} GB available ({res.memory_gb:.1f} GB [{res.memory_why}] - {reserve_gb:g} GB "
                        f"reserve): expect OOM kills; {fits} fit, or leave jobs to \"auto\"")
    return JobPlan(n, f"jobs = {n} (set by {source})", per_job, source, tuple(warnings))
