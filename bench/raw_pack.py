"""What a run's raw pack holds, read one way for every study: `<label>-raw.tar.gz` as the build runs pack it
(arch_builds/build_one.sh, the GPU-host scripts): the build's `.ninja_log`, the profile recorder's SQLite rows, a
memory sample, the tool's stderr and `host.txt`. Imported by the studies' report scripts (they put bench/ on
sys.path), never run.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORES = 16  # the H200 host's; its host.txt says so too (checked below)


def member(tar: tarfile.TarFile, suffix: str) -> bytes | None:
    for m in tar.getmembers():
        if m.name.endswith(suffix):
            f = tar.extractfile(m)
            return f.read() if f else None
    return None


def ninja_edges(text: str) -> list[tuple[float, float, str]]:
    """(start s, end s, output) per edge of a v5+ `.ninja_log`; the last line for an output wins."""
    edges: dict[str, tuple[float, float, str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, out, _hash = line.split("\t")
        edges[out] = (int(start) / 1000, int(end) / 1000, out)
    return sorted(edges.values())


def compiles(db: bytes) -> list[dict[str, Any]]:
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(db)
        f.flush()
        conn = sqlite3.connect(f.name)
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT source, wall_s, cpu_s, tree_peak_mb, oom_kill FROM compiles")]
        conn.close()
    return rows


def run_figures(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        log = member(tar, "-ninja_log.txt")
        db = member(tar, "-profile.sqlite")
        mem = member(tar, "-mem.txt")
        err = (member(tar, "-build.err") or b"").decode()
        host = (member(tar, "-host.txt") or b"").decode()
        cg_peak, cg_events, cg_before = (member(tar, s) for s in ("-memory.peak", "-memory.events", "-cgroup-before.txt"))
        trace = member(tar, "-trace.jsonl")
    assert log and db and mem, f"{path}: the raw outputs are incomplete"
    cores = int(host.split()[0]) if host.split() and host.split()[0].isdigit() else CORES
    edges = ninja_edges(log.decode())
    rows = compiles(db)
    samples = [used_bytes(line) for line in mem.decode().splitlines() if line.strip()]
    cpu = sum(r["cpu_s"] for r in rows)
    longest = max(rows, key=lambda r: r["wall_s"])
    span = max(e[1] for e in edges) - min(e[0] for e in edges)
    bound = max(cpu / cores, longest["wall_s"])
    step = re.search(r"[✓✕] build .*? \(([\d.]+) s\)", err)
    heaviest = sorted(rows, key=lambda r: -r["wall_s"])[:5]
    starts = {e[2]: e[0] for e in edges}
    progress = re.findall(r"\[(\d+)/(\d+)\]", err)
    out: dict[str, Any] = {
        "raw": path.name,
        "built": "✓ build" in err,
        "tool_build_step_s": float(step.group(1)) if step else None,
        "ninja_wall_s": round(span, 1),
        "edges": len(edges),
        "compiles": len(rows),
        "compiler_cpu_s": round(cpu, 1),
        "peak_gb": round((max(samples) - samples[0]) / 1e9, 1),
        "oom_kills": sum(1 for r in rows if r["oom_kill"]),
        "cores": cores,
        "longest_edge": {"source": longest["source"], "s": round(longest["wall_s"], 1)},
        "lower_bound_s": round(bound, 1),
        "ratio_to_lower_bound": round(span / bound, 3),
        "heaviest": [{"source": r["source"], "wall_s": round(r["wall_s"], 1),
                      "started_at_s": next((round(s, 1) for o, s in starts.items() if o.endswith(r["source"] + ".o")), None),
                      "peak_gb": round(r["tree_peak_mb"] / 1024, 1)} for r in heaviest],
        # Compiles at once: the most, and the mean over the span (edge seconds / span).
        "concurrency": {"max": max_overlap(edges), "mean": round(sum(e[1] - e[0] for e in edges) / span, 1)},
        "edges_of_build": int(progress[-1][1]) if progress else None,
    }
    if cg_before and cg_peak and cg_events:
        # The kernel's own counters of the memory cgroup the run was capped by (run c).
        limit = re.search(r"memory\.max: (\d+)", cg_before.decode())
        events = dict(line.split() for line in cg_events.decode().splitlines() if line.strip())
        out["cgroup"] = {"memory_max_gib": round(int(limit.group(1)) / 2**30, 1) if limit else None,
                         "memory_peak_gib": round(int(cg_peak) / 2**30, 1), "oom_kill": int(events["oom_kill"])}
    if trace:
        # The governor's own record (<build>/jobserver/trace.jsonl): compiles running and tokens out, also
        # for a run cut off by the call's limit, whose .ninja_log lacks the compiles still running.
        steps = [json.loads(line) for line in trace.decode().splitlines() if line.strip()]
        out["governor"] = {"most_running": max(len(s["running"]) for s in steps),
                           "most_slots": max(s["slots"] for s in steps),
                           "waiting_when_listed": next((s["waiting"] for s in steps if s["complete"]), None),
                           "budget_gb": steps[-1]["budget_gb"], "last_t_s": steps[-1]["t"]}
    return out


def used_bytes(line: str) -> int:
    """Host memory in use from one memory sample: `seconds used [cgroup current]`, or `used` alone where
    the sampler's clock failed (run b of h200-2026-12-02-unity: the host has no `bc`)."""
    fields = line.split()
    return int(fields[1] if len(fields) > 1 else fields[0])


def max_overlap(edges: list[tuple[float, float, str]]) -> int:
    points = sorted([(s, 1) for s, _, _ in edges] + [(e, -1) for _, e, _ in edges])
    now = most = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most
