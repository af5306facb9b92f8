"""The build's compile timeline as a trace-event JSON (Chrome's trace format), for Perfetto and chrome://tracing.

Written from what the recorder measured (profile.py's rows: per compile its start, wall, CPU and the peak of
its process tree), as ninjatracing writes one from a `.ninja_log`: one complete event (`"ph": "X"`, `ts` and
`dur` in microseconds from the build's start) per compile, on the lowest lane free when it started (the lanes
are the build's concurrent jobs, as ninja's are), and a counter (`"ph": "C"`) of the summed tree peaks of the
compiles running, so the memory the build held is drawn under its timeline. A compile the OOM killer ended is
named so (its peak is where it was stopped). No recorder, no timeline: `[build] profile = false` writes none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from build_kernel.stages.builder.profile import Compile

US = 1_000_000
PID = 1


def of_build(rows: Sequence[Compile], *, project: str, since: float, folder: Path) -> list[Compile]:
    """This build's compiles among a profile's rows: its project's, started at or after `since` (unix time)
    in its own build folder (a profile is shared by every build of a cache)."""
    root = str(folder)
    return [r for r in rows if r.project == project and r.at >= since
            and (r.cwd == root or r.cwd.startswith(root + os.sep))]


def _lanes(compiles: Sequence[Compile]) -> list[int]:
    """Per compile (in the given order, sorted by start), the lowest lane free at its start."""
    ends: list[float] = []
    lanes = []
    for c in compiles:
        free = next((i for i, end in enumerate(ends) if end <= c.at), None)
        if free is None:
            free = len(ends)
            ends.append(0.0)
        ends[free] = c.at + c.wall_s
        lanes.append(free)
    return lanes


def events(compiles: Sequence[Compile], start: float, name: str) -> dict[str, Any]:
    """The trace of `compiles`, times from `start` (unix seconds)."""
    ordered = sorted(compiles, key=lambda c: (c.at, c.source))
    out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": name}}]
    for c, lane in zip(ordered, _lanes(ordered), strict=True):
        out.append({
            "name": c.source + (" (OOM-killed)" if c.oom_kill else ""), "cat": c.compiler, "ph": "X",
            "ts": round((c.at - start) * US), "dur": max(1, round(c.wall_s * US)), "pid": PID, "tid": lane,
            "args": {"output": c.output, "archs": c.archs, "threads": c.threads, "wall_s": c.wall_s,
                     "cpu_s": c.cpu_s, "tree_peak_mb": c.tree_peak_mb, "exit": c.exit, "oom_kill": bool(c.oom_kill)},
        })
    # The memory counter: at each start and end, the summed tree peaks of the compiles then running (an upper
    # bound of what they held together: each at its own peak).
    marks = sorted([(c.at, c.tree_peak_mb) for c in ordered] + [(c.at + c.wall_s, -c.tree_peak_mb) for c in ordered],
                   key=lambda m: (m[0], m[1]))  # at one instant, ends before starts
    held = 0.0
    for at, delta in marks:
        held += delta
        out.append({"name": "compile tree peaks (GB)", "ph": "C", "pid": PID, "ts": round((at - start) * US),
                    "args": {"GB": round(max(held, 0.0) / 1024, 3)}})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"what": "build-kernel compile timeline", "build": name, "compiles": len(ordered)}}


def write(path: Path, compiles: Sequence[Compile], start: float, name: str) -> Path:
    """Write the trace (beside and renamed over: a viewer never opens half a file); its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(events(compiles, start, name), indent=0) + "\n")
    os.replace(tmp, path)
    return path


def leave(db: Path, *, project: str, since: float, folder: Path, path: Path, name: str) -> Path | None:
    """The trace of the build that ran in `folder` since `since`, from the profile `db`; None when the profile
    holds none of its compiles (the recipe records nothing, or nothing was compiled)."""
    from build_kernel.stages.builder import profile

    mine = of_build(profile.rows(db, project=project), project=project, since=since, folder=folder)
    return write(path, mine, since, name) if mine else None
