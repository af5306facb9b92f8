"""The compile profile: one SQLite row per compile the recorder saw, and what the planner asks of it.

`<cache>/profile.sqlite`, written concurrently by every recorder of a parallel build (WAL,
a long busy timeout), read by the planner: a TU's memory is a high percentile of its
recorded tree peaks (not the mean: the planner must not under-predict), by source and
flags digest, falling back to the same source under other flags.

Sources are named relative to the build's tree (recorder --strip), so a moved checkout of a project
finds its rows; projects sharing a cache may then name different files alike (`csrc/kernel.cu`), so
each row also says whose it is (`project`, scheduling.project_key: the recipe's source repository and
subdir) and a project reads its own rows. Rows recorded before that column existed belong to no
project: they still count, for a source the project has no row of its own for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

# The table and its writer live with the recorder, which must import nothing of build_kernel (see there).
from build_kernel.stages.builder import recorder

FILE = "profile.sqlite"
PERCENTILE = 0.9


@dataclass(frozen=True)
class Compile:
    """One compile as the recorder measured it (a row of the `compiles` table)."""

    at: float  # unix time it started
    source: str  # relative to a --strip root where one matched
    output: str
    compiler: str  # basename: nvcc, c++, g++
    flags_digest: str  # sha256 (16 hex) of the flags, source/output/depfile and build roots left out
    archs: str  # "sm_120a,sm_90a"
    threads: int  # nvcc --threads (1 when not given)
    wall_s: float
    cpu_s: float  # user + sys of the whole tree (each step waits for its children)
    user_s: float
    sys_s: float
    tree_peak_mb: float  # peak of the summed RSS of the compiler's process tree (cicc, ptxas included)
    max_rss_mb: float  # the largest single process (getrusage): understates a multi-threaded nvcc
    peak_procs: int
    exit: int  # the compiler's exit code; -N when a signal N ended it
    signal: int  # 0, or the signal that ended the compiler (9: SIGKILL, the OOM killer's)
    oom_kill: int  # 1: SIGKILL, exit 137, an OOM kill in its cgroup meanwhile, or the compiler saying a step was killed
    cgroup_oom_kills: int  # OOM kills in the recorder's own cgroup while the compile ran
    cwd: str
    project: str = ""  # scheduling.project_key of the build; "" for rows recorded before it was kept


assert tuple(f.name for f in fields(Compile)) == recorder.COLUMN_NAMES, "profile.Compile and recorder.COLUMNS differ"


def insert(db: Path, rows: Iterable[Compile]) -> None:
    recorder.insert(db, [astuple(r) for r in rows])

def rows(db: Path, source: str | None = None, *, project: str | None = None) -> list[Compile]:
    """Every recorded compile (of one source), oldest first; none when there is no profile yet. With `project`:
    its own rows, and the unkeyed rows of older profiles for the sources it has none of its own for."""
    if not db.is_file():
        return []
    names = [f.name for f in fields(Compile)]
    conn = recorder.connect(db)  # adds `project` to an older profile
    try:
        where, args = ("WHERE source = ?", (source,)) if source is not None else ("", ())
        cur = conn.execute(f"SELECT {', '.join(names)} FROM compiles {where} ORDER BY id", args)
        # `project` NULL: a row of an older profile.
        found = [Compile(**{**dict(zip(names, r, strict=True)), "project": r[-1] or ""}) for r in cur.fetchall()]
    finally:
        conn.close()
    if project is None:
        return found
    own = {r.source for r in found if r.project == project}
    return [r for r in found if r.project == project or (not r.project and r.source not in own)]


def percentile(values: Sequence[float], q: float = PERCENTILE) -> float:
    """Nearest-rank percentile: a value that was really seen, never an interpolation below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Estimate:
    peak_mb: float
    wall_s: float | None
    runs: int
    source: str  # "profile", "profile (other flags)" or "default"


def estimate(recorded: Sequence[Compile], source: str, flags_digest: str | None, *, default_mb: float) -> Estimate:
    """A TU's predicted peak and duration: its recorded runs, the exact flags first.

    An OOM-killed run's peak is where it was stopped, so it only raises the estimate (a lower
    bound of what the TU needs); its time says nothing and is left out.
    """
    mine = [r for r in recorded if r.source == source]
    exact = [r for r in mine if r.flags_digest == flags_digest] if flags_digest else mine
    runs, how = (exact, "profile") if exact else (mine, "profile (other flags)")
    ok = [r for r in runs if r.exit == 0]
    killed = [r.tree_peak_mb for r in runs if r.oom_kill]
    if not ok and not killed:
        return Estimate(default_mb, None, 0, "default")
    peak = max(([percentile([r.tree_peak_mb for r in ok])] if ok else []) + killed)
    wall = percentile([r.wall_s for r in ok]) if ok else None
    return Estimate(peak, wall, len(runs), how)
