"""The build's ETA replayed on real H200 builds (issue 38 item 3): the edges of each build's ninja log fed to
planner.EtaFromLines at their end times, with the order profile and job count that build had, against the time
really left; beside it, the estimates the tool of that day printed in the same build's log.

Seen on the H200 (2026-12-03, run9): a 9.0a build of the unpruned reference (v7u) on the pruned recipe's shipped
profile (measured for 12.0a) printed "eta 151 s" from 12 s to 220 s, then 716 s to 1,035 s, and "eta 655 s" at
486 s of a 494 s build: the estimate stood still, counted TUs the build never compiles (the profile's 12.0a
batches) as still to come, and never matched a dependency's TU (built in a folder with a hash in its name).

    python bench/eta/eta_replay.py pack LABEL NINJA_LOG BUILD_ERR --profile recipes/X.profile.csv --jobs 15 \
        --out bench/eta/raw/h200-2026-12-03-unpruned/LABEL-eta.json
    python bench/eta/eta_replay.py report bench/eta/raw/h200-2026-12-03-unpruned/*-eta.json --out bench/eta/results/eta-replay.json

A raw file holds only what this reads: each edge's start, end (ms) and output, and the printed progress lines
(`[N/M] T s, eta E s`). The printed times count from the build step's start, configure included; the replay's
count from ninja's start, so a printed line is compared with the build's end shifted by the first printed line's
time (ninja's first edge, `[0/2]`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel.stages.builder import planner
from build_kernel.stages.builder.ninja_order import read_shipped_rows

PRINTED = re.compile(r"^\s*\[(\d+)/(\d+)\] (\d+) s, eta (\d+) s")
CHECKPOINTS = (0.25, 0.5, 0.75, 0.9)


def source_of(output: str) -> str | None:
    """The recorder's name of the source an edge compiles (None for a link or a copy): the path after CMake's
    `<target>.dir/`, a dependency's as `deps/<name>/<path>` (its folder's pin hashes dropped, mscclpp's own
    build folder mapped to its dependency)."""
    if not output.endswith(".o") or ".dir/" not in output:
        return None
    path = output.split(".dir/", 1)[1][:-2]
    if m := re.search(r"(?:^|/)deps/(repo-[a-z0-9-]+?)-[0-9a-f]{12}(?:-[0-9a-f]{8})?/(.+)$", path):
        return f"deps/{m[1]}/{m[2]}"
    return f"deps/repo-mscclpp/{path}" if output.startswith("mscclpp-build/") else path


def pack(ninja_log: Path, build_err: Path, profile: str, jobs: int) -> dict[str, Any]:
    edges = []
    for line in ninja_log.read_text().splitlines():
        cols = line.split("\t")
        if len(cols) >= 4 and not line.startswith("#"):
            edges.append([int(cols[0]), int(cols[1]), cols[3]])
    printed = [[int(m[1]), int(m[2]), int(m[3]), int(m[4])] for ln in build_err.read_text().splitlines()
               if (m := PRINTED.match(ln))]
    return {"profile": profile, "jobs": jobs, "edges": edges, "printed": printed}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# Shipped profiles renamed since a raw file named them (same content): nightly-cu130-pruned became nightly-cu130
# in a754ff1.
RENAMED = {"recipes/nightly-cu130-pruned.profile.csv": "recipes/nightly-cu130.profile.csv"}


def replay(raw: dict[str, Any], edges_file: Path) -> dict[str, Any]:
    rows = read_shipped_rows(ROOT / RENAMED.get(raw["profile"], raw["profile"]))
    tus = [planner.TU(src, int((peak or 0) * 1024**3), seconds, "shipped profile", 0) for src, (seconds, peak) in rows.items()]
    edges = sorted(raw["edges"], key=lambda e: e[1])
    end = edges[-1][1] / 1000
    sources = [s for _, _, out in edges if (s := source_of(out)) is not None]
    edges_file.write_text(json.dumps({"sources": sources}))
    clock = Clock()
    eta = planner.EtaFromLines(tus, raw["jobs"], clock=clock, edges=edges_file)
    points = []
    for i, (_, finish, out) in enumerate(edges, 1):
        clock.now = finish / 1000
        eta(f"[{i}/{len(edges)}] Building object {out}")
        if (left := eta.remaining()) is not None:
            points.append((clock.now, left, end - clock.now))
    offset = raw["printed"][0][2] if raw["printed"] else 0
    printed = [(t, e, end + offset - t) for _, _, t, e in raw["printed"]]
    return {"ninja_seconds": round(end, 1), "edges": len(edges), "compiles": len(sources),
            "profile_knows": sum(1 for s in dict.fromkeys(sources) if s in rows),
            "replayed": _errors(points, end), "printed_that_day": _errors(printed, end + offset, offset)}


def _errors(points: list[tuple[float, float, float]], end: float, offset: float = 0) -> dict[str, Any]:
    """At each checkpoint of the build, the estimate and the truth (the last line at or before it)."""
    out: dict[str, Any] = {}
    for share in CHECKPOINTS:
        at = offset + share * (end - offset)
        before = [p for p in points if p[0] <= at]
        if before:
            t, eta, truth = before[-1]
            out[f"{int(share * 100)}%"] = {"at_s": round(t), "eta_s": round(eta), "left_s": round(truth)}
    if points:
        out["mean_abs_error_s"] = round(sum(abs(e - t) for _, e, t in points) / len(points), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("label")
    p.add_argument("ninja_log", type=Path)
    p.add_argument("build_err", type=Path)
    p.add_argument("--profile", required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("report")
    r.add_argument("raws", type=Path, nargs="+")
    r.add_argument("--out", type=Path, default=ROOT / "bench/eta/results/eta-replay.json")
    args = parser.parse_args()
    if args.cmd == "pack":
        args.out.write_text(json.dumps({"label": args.label, **pack(args.ninja_log, args.build_err, args.profile,
                                                                       args.jobs)}) + "\n")
        return
    import tempfile
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.raws:
            raw = json.loads(path.read_text())
            results[raw["label"]] = {"raw": str(path.resolve().relative_to(ROOT)), "profile": raw["profile"], "jobs": raw["jobs"],
                                     **replay(raw, Path(tmp) / "edges.json")}
    args.out.write_text(json.dumps({"issue": 38, "what": __doc__.splitlines()[0], "builds": results}, indent=1) + "\n")
    for label, res in results.items():
        print(label, json.dumps({k: res[k] for k in ("ninja_seconds", "replayed", "printed_that_day")}))


if __name__ == "__main__":
    main()
