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

    python bench/pruning/pruning_table.py bench/pruning/raw/h200-2026-12-01/{a1,b,a2}-raw.tar.gz \
        bench/pruning/raw/h200-2026-12-02/{u,p,c}-raw.tar.gz --baseline u \
        --proof bench/pruning/raw/h200-2026-12-02/prune-proof-p-vs-u.json [--out bench/pruning/results/arch-pruning.json]

The small TUs in batches (series v5, 0007), side by side with v3 on one host (p then b in two calls
back to back on the same machine; c and c3 in a 32 GiB memory cgroup; u, yesterday's unpruned run on
another host, only for the estimate of upstream's build):

    python bench/pruning/pruning_table.py bench/pruning/raw/h200-2026-12-02-unity/{p,b,c,c3}-raw.tar.gz \
        bench/pruning/raw/h200-2026-12-02/u-raw.tar.gz --baseline p --upstream-from u \
        --proof bench/pruning/raw/h200-2026-12-02-unity/prune-proof-b-vs-p.json --out bench/pruning/results/unity-batches.json

The sparse flash-attention kernels left out (series v6, 0008), side by side with v5 (b5 then b6 in one
call, then c6 in a 32 GiB cgroup in the next call on the same warm machine; a6, upstream's sources in
CMake's order with the static scheduler, and b6b, b6 again, in one later call on a fresh start of the
machine, both cut off by the call's limit; upstream's build estimated from a6, so a lower bound):

    python bench/pruning/pruning_table.py bench/pruning/raw/h200-2026-12-02-sparse/{a6,b5,b6,c6,b6b}-raw.tar.gz \
        --baseline b5 --upstream-from a6 \
        --proof bench/pruning/raw/h200-2026-12-02-sparse/prune-proof-b6-vs-b5.json --out bench/pruning/results/sparse-flash-attn.json
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import ROOT, run_figures

PROFILE_CSV = ROOT / "bench" / "data" / "sgl-kernel-tu-compile-profile.csv"


def upstream_factor() -> tuple[float, dict[str, float]]:
    """Median CPU ratio of upstream's 7-arch gencode list to 12.0a alone, per profiled TU (--threads=1)."""
    lines = [ln for ln in PROFILE_CSV.read_text().splitlines() if not ln.startswith("#")]
    cpu: dict[tuple[str, str], float] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        if r["threads"] == "1" and r["machine"].startswith("h200"):
            cpu[(r["tu"], r["arch_setting"])] = float(r["user_s"]) + float(r["sys_s"])
    ratios = {tu: cpu[(tu, "B")] / cpu[(tu, "A")] for tu, s in cpu if s == "A" and (tu, "B") in cpu}
    return statistics.median(ratios.values()), {k: round(v, 2) for k, v in sorted(ratios.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", nargs="+", type=Path, help="<label>-raw.tar.gz files; the label is the part before -raw")
    parser.add_argument("--proof", type=Path, action="append", default=[], help="prune-proof / verify JSON outputs to embed")
    parser.add_argument("--baseline", default="a1", help="the label of the run the others are compared with")
    parser.add_argument("--upstream-from", help="the label of the unpruned run upstream's build is estimated from "
                                                "(default: the baseline)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "pruning" / "results" / "arch-pruning.json")
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
