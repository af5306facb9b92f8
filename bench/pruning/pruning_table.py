"""The real sgl-kernel 12.0a build on the H200 host, side by side: the table of issue 22 item 4.

Reads the raw outputs each device call brought back (one `<label>-raw.tar.gz` per run: the
build's `.ninja_log`, the profile recorder's SQLite rows, a 0.5 s memory sample, the build
log and `rc`) and writes one JSON file. Nothing in it is typed by hand:

- wall: the ninja span (first edge start to last edge end, from `.ninja_log`) and the tool's
  own build step (its `✕/✓ build … (N s)` line);
- compiler CPU s: the sum of the recorder's per-compile CPU (compiler and children);
- peak GB: the largest `total - available` in the memory sample, less the first sample;
- OOM kills: recorder rows killed by the OOM killer;
- lower bound: max(ΣCPU / cores, longest edge); the run's ratio to it;
- upstream's default build (7 archs x 2 libraries) estimated from the per-TU profile in
  bench/data (7-arch / 12.0a-only CPU ratio, median over the profiled TUs) times this
  run's 12.0a CPU, times two libraries (FA3 and FlashMLA left out: a low estimate).

    python bench/h200_arch_pruning.py bench/raw/h200-2026-12-01/{a1,b,a2}-raw.tar.gz \
        bench/raw/h200-2026-12-02/{u,p,c}-raw.tar.gz --baseline u \
        --proof bench/raw/h200-2026-12-02/prune-proof-p-vs-u.json [--out bench/results/h200-arch-pruning.json]

The small TUs in batches (series v5, 0007), side by side with v3 on one host (p then b in two calls
back to back on the same machine; c and c3 in a 32 GiB memory cgroup; u, yesterday's unpruned run on
another host, only for the estimate of upstream's build):

    python bench/h200_arch_pruning.py bench/raw/h200-2026-12-02-unity/{p,b,c,c3}-raw.tar.gz \
        bench/raw/h200-2026-12-02/u-raw.tar.gz --baseline p --upstream-from u \
        --proof bench/raw/h200-2026-12-02-unity/prune-proof-b-vs-p.json --out bench/results/h200-unity-batches.json

The sparse flash-attention kernels left out (series v6, 0008), side by side with v5 (b5 then b6 in one
call, then c6 in a 32 GiB cgroup in the next call on the same warm machine; a6, upstream's sources in
CMake's order with the static scheduler, and b6b, b6 again, in one later call on a fresh start of the
machine, both cut off by the call's limit; upstream's build estimated from a6, so a lower bound):

    python bench/h200_arch_pruning.py bench/raw/h200-2026-12-02-sparse/{a6,b5,b6,c6,b6b}-raw.tar.gz \
        --baseline b5 --upstream-from a6 \
        --proof bench/raw/h200-2026-12-02-sparse/prune-proof-b6-vs-b5.json --out bench/results/h200-sparse-fa.json
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sqlite3
import statistics
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROFILE_CSV = ROOT / "bench" / "data" / "sgl-kernel-tu-compile-profile.csv"
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


def upstream_factor() -> tuple[float, dict[str, float]]:
    """Median CPU ratio of upstream's 7-arch gencode list to 12.0a alone, per profiled TU (--threads=1)."""
    lines = [ln for ln in PROFILE_CSV.read_text().splitlines() if not ln.startswith("#")]
    cpu: dict[tuple[str, str], float] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        if r["threads"] == "1" and r["machine"].startswith("h200"):
            cpu[(r["tu"], r["arch_setting"])] = float(r["user_s"]) + float(r["sys_s"])
    ratios = {tu: cpu[(tu, "B")] / cpu[(tu, "A")] for tu, s in cpu if s == "A" and (tu, "B") in cpu}
    return statistics.median(ratios.values()), {k: round(v, 2) for k, v in sorted(ratios.items())}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", nargs="+", type=Path, help="<label>-raw.tar.gz files; the label is the part before -raw")
    parser.add_argument("--proof", type=Path, action="append", default=[], help="prune-proof / verify JSON outputs to embed")
    parser.add_argument("--baseline", default="a1", help="the label of the run the others are compared with")
    parser.add_argument("--upstream-from", help="the label of the unpruned run upstream's build is estimated from "
                                                "(default: the baseline)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "h200-arch-pruning.json")
    args = parser.parse_args()
    runs = {p.name.split("-raw")[0]: run_figures(p) for p in args.raw}
    factor, per_tu = upstream_factor()
    result: dict[str, Any] = {"what": __doc__.split("\n\n")[0], "runs": runs,
                              "upstream_estimate": {"factor_7_archs_vs_12_0a": round(factor, 2), "per_tu": per_tu}}
    base, unpruned = args.baseline, args.upstream_from or args.baseline
    if base in runs and unpruned in runs:
        upstream_cpu = runs[unpruned]["compiler_cpu_s"] * factor * 2
        # From a run cut off by the call's limit the estimate (and each ratio to it) is a lower bound.
        result["upstream_estimate"].update(compiler_cpu_s=round(upstream_cpu), from_run=unpruned,
                                           lower_bound=not runs[unpruned]["built"])
        for label, r in runs.items():
            if not r["built"]:
                continue  # a build cut off by the call's limit: its CPU is a part, not the whole
            r["cpu_ratio_upstream_to_this"] = round(upstream_cpu / r["compiler_cpu_s"], 1)
            if label != base and runs[base]["built"]:
                a = runs[base]
                r[f"vs_{base}"] = {k: round(a[k] / r[k], 2) for k in ("ninja_wall_s", "compiler_cpu_s", "peak_gb") if r[k]}
    result["proofs"] = {p.name: json.loads(p.read_text()) for p in args.proof}
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: {m: v[m] for m in ("ninja_wall_s", "compiler_cpu_s", "peak_gb", "oom_kills",
                                             "lower_bound_s", "ratio_to_lower_bound")} for k, v in runs.items()}, indent=1))


if __name__ == "__main__":
    main()
