"""The real build's compile timeline with the memory it held, on 2 cores and on 16: one picture from two raw packs.

Each pack (as arch_builds/build_one.sh packs a build) holds the recorder's rows (per compile: start, wall, the peak of
its process tree) and a memory sample with absolute times (`mem.txt`: unix seconds, bytes in use), so both share one
clock. Each compile is a bar on the lowest lane free at its start (the build's concurrent jobs), coloured by its
peak; over the same seconds, the summed peaks of the compiles running (what the scheduler budgets: the same counter
as `build`'s own trace JSON) and the host's memory in use, where the sample holds it (the 2-core packs' sampler
saturated at 2 GiB: builds_report.py's SATURATED, left out). Defaults: nightly-0.4 (series v12, pruned) at 12.0a,
the 2-core / 24 GB box and the 16-core H100 host.

    python bench/real_build/timeline_figure.py [PACK ...] [--out bench/real_build/timeline.svg]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared readers
from figures import pyplot, save
from raw_pack import ROOT, member

SATURATED = 2**31 - 1  # arch_builds/builds_report.py: the 2-core sampler's ceiling

PACKS = [ROOT / "bench/arch_builds/raw/local-2c-2026-12-06c-nightly04/p43v12-sm120a-2c-raw.tar.gz",
         ROOT / "bench/arch_builds/raw/h100-2026-12-06e/h43-sm120a-raw.tar.gz"]
OUT = ROOT / "bench" / "real_build" / "timeline.svg"


def read(pack: Path) -> dict[str, Any]:
    """The pack's compiles within its memory sample's span, and the sample, in seconds from the sample's start."""
    with tarfile.open(pack) as tar:
        db, mem, host = member(tar, "/profile.sqlite"), member(tar, "/mem.txt"), member(tar, "/host.txt")
    if not db or not mem:
        sys.exit(f"{pack}: no profile.sqlite or mem.txt in this pack: no timeline")
    samples = [(float(t), int(b)) for t, b, *_ in (line.split() for line in mem.decode().splitlines() if line.strip())]
    t0, t1 = samples[0][0], samples[-1][0]
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as fh:
        fh.write(db)
        fh.flush()
        conn = sqlite3.connect(fh.name)
        rows = conn.execute("SELECT source, at, wall_s, tree_peak_mb FROM compiles WHERE at >= ? AND at <= ? "
                            "ORDER BY at", (t0, t1)).fetchall()
        conn.close()
    lines = (host or b"").decode().splitlines()
    cores = next((ln.strip() for ln in lines if ln.strip().isdigit()), "?")
    saturated = any(b == SATURATED for _, b in samples)
    return {"rows": [(s, at - t0, wall, peak / 1024) for s, at, wall, peak in rows], "cores": cores,
            "memory": [] if saturated else [(t - t0, (b - samples[0][1]) / 1e9) for t, b in samples],
            "label": pack.name.split("-raw")[0]}


def summed_peaks(rows: list[tuple[str, float, float, float]]) -> list[tuple[float, float]]:
    """(seconds, GB): the summed tree peaks of the compiles running, as a step line."""
    marks = sorted([(start, peak) for _, start, _, peak in rows] + [(start + wall, -peak) for _, start, wall, peak in rows])
    held, out = 0.0, [(0.0, 0.0)]
    for t, delta in marks:
        out.append((t, held))
        held = max(0.0, held + delta)
        out.append((t, held))
    return out


def lanes(rows: list[tuple[str, float, float, float]]) -> list[int]:
    ends: list[float] = []
    out = []
    for _, start, wall, _ in rows:
        lane = next((i for i, end in enumerate(ends) if end <= start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = start + wall
        out.append(lane)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packs", nargs="*", type=Path, default=PACKS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    plt = pyplot()
    runs = [read(p) for p in args.packs]
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False)
    cmap = plt.get_cmap("viridis")
    top = max(peak for run in runs for *_, peak in run["rows"])
    for ax, run in zip(axes[:, 0], runs, strict=True):
        for (_, start, wall, peak), lane in zip(run["rows"], lanes(run["rows"]), strict=True):
            ax.barh(lane, wall, left=start, height=0.8, color=cmap(peak / top), linewidth=0)
        ax.set_ylabel("job lane")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("seconds from the build's start")
        last = max(start + wall for _, start, wall, _ in run["rows"])
        ax.set_title(f"{run['label']}: {len(run['rows'])} compiles on {run['cores']} cores, {last:.0f} s "
                     f"(bar colour: the compile's peak, up to {top:.1f} GB)", loc="left")
        mem = ax.twinx()
        steps = summed_peaks(run["rows"])
        mem.plot([t for t, _ in steps], [g for _, g in steps], color="darkorange", linewidth=1,
                 label="compiles running: summed peaks")
        if run["memory"]:
            mem.plot([t for t, _ in run["memory"]], [g for _, g in run["memory"]], color="crimson", linewidth=1,
                     label="host memory in use (above the start)")
        mem.legend(loc="upper right", fontsize=7, frameon=False)
        mem.set_ylabel("GB", color="crimson")
        mem.spines["right"].set_visible(True)
        mem.set_ylim(bottom=0)
    fig.tight_layout()
    save(fig, args.out)


if __name__ == "__main__":
    main()
