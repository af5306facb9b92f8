"""The whole real 12.0a build on a GPU-less 2-core / 24 GB host (issue 28 item 3: series v2; issue 22: v3, arch-pruned), from its raw outputs.

Reads one `<label>-raw.tar.gz` of the run (`.ninja_log`, the profile recorder's SQLite rows,
a 0.5 s memory sample, the tool's stderr and `host.txt`, the same members as the H200 runs)
and writes one JSON file. The per-run figures (wall, compiler CPU s, peak GB, OOM kills,
lower bound) are raw_pack.py's `run_figures`; added here:

- concurrency over time: compiles running at each moment, from `.ninja_log`, as the seconds
  spent at each level and the list of intervals;
- the held token: every stretch of the compile phase where one compile ran while compiles
  still to start existed (the governor handed ninja no second token), with the compile that
  ran, its measured peak, and the host memory in use then (from the memory sample): the
  governor starts a second compile only while free memory covers the predicted peaks.

    python bench/real_build/build_report.py bench/real_build/raw/local-2c-2026-12-02/2c-raw.tar.gz [--out FILE]
    python bench/real_build/build_report.py bench/real_build/raw/local-2c-2026-12-02/p2c-raw.tar.gz --out bench/real_build/results/2-cores-pruned.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import ROOT, compiles, member, ninja_edges, run_figures

COMPILE_SUFFIXES = (".o", ".obj")
MIN_HELD_S = 5.0  # shorter gaps are ninja's own turn-around between two compiles


def levels(edges: list[tuple[float, float, str]]) -> list[tuple[float, float, int]]:
    """(start, end, compiles running) intervals over the span of `edges`."""
    points = sorted({t for s, e, _ in edges for t in (s, e)})
    out: list[tuple[float, float, int]] = []
    for a, b in itertools.pairwise(points):
        n = sum(1 for s, e, _ in edges if s <= a and e >= b)
        if out and out[-1][2] == n:
            out[-1] = (out[-1][0], b, n)
        else:
            out.append((a, b, n))
    return out


def memory_at(samples: list[tuple[float, int]], a: float, b: float, offset: float) -> float | None:
    """Largest memory in use (GB) sampled between build-relative times a and b."""
    inside = [used for t, used in samples if a <= t - offset <= b]
    return round(max(inside) / 1e9, 1) if inside else None


def held(edges: list[tuple[float, float, str]], rows: list[dict[str, Any]],
         samples: list[tuple[float, int]], offset: float) -> list[dict[str, Any]]:
    compiles_only = [e for e in edges if e[2].endswith(COMPILE_SUFFIXES)]
    last_start = max(s for s, _, _ in compiles_only)
    peaks = {r["source"]: r for r in rows}
    out = []
    for a, b, n in levels(compiles_only):
        if n != 1 or b - a < MIN_HELD_S or a >= last_start:
            continue
        [(_, _, running)] = [(s, e, o) for s, e, o in compiles_only if s <= a and e >= b]
        source = next((src for src in peaks if running.endswith(Path(src).name + ".o")), running)
        row = peaks.get(source)
        out.append({"from_s": round(a, 1), "to_s": round(b, 1), "running": source,
                    "running_peak_gb": round(row["tree_peak_mb"] / 1024, 1) if row else None,
                    "host_memory_in_use_gb": memory_at(samples, a, b, offset),
                    "waiting": sum(1 for s, _, _ in compiles_only if s >= b)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "real_build" / "results" / "2-cores.json")
    args = parser.parse_args()
    figures = run_figures(args.raw)
    with tarfile.open(args.raw) as tar:
        edges = ninja_edges((member(tar, "-ninja_log.txt") or b"").decode())
        rows = compiles(member(tar, "-profile.sqlite") or b"")
        mem = (member(tar, "-mem.txt") or b"").decode()
        host = (member(tar, "-host.txt") or b"").decode()
        rc = (member(tar, "-rc.txt") or b"").decode().strip()
    samples = [(float(ln.split()[0]), int(ln.split()[1])) for ln in mem.splitlines() if ln.strip()]
    # The memory sampler starts with the tool; ninja's clock with its first edge. Align them on
    # the tool's build step, which ends with ninja: the sample's last time is the build's end.
    offset = samples[-1][0] - max(e[1] for e in edges) if samples and edges else 0.0
    lv = levels([e for e in edges if e[2].endswith(COMPILE_SUFFIXES)])
    at_level: dict[int, float] = {}
    for a, b, n in lv:
        at_level[n] = at_level.get(n, 0.0) + (b - a)
    result = {
        "what": __doc__.split("\n\n")[0],
        "host": host.splitlines()[:2],
        "rc": rc,
        "run": figures,
        "concurrency_seconds": {str(k): round(v, 1) for k, v in sorted(at_level.items())},
        "concurrency_intervals": [[round(a, 1), round(b, 1), n] for a, b, n in lv],
        "held_second_token": held(edges, rows, samples, offset),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("rc", "concurrency_seconds")}, indent=1))
    print(json.dumps({k: figures[k] for k in ("ninja_wall_s", "compiler_cpu_s", "peak_gb", "oom_kills",
                                              "lower_bound_s", "ratio_to_lower_bound")}, indent=1))


if __name__ == "__main__":
    main()
