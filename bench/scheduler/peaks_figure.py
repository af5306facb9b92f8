"""The scheduler's peaks against the memory cap, per build policy: one picture from results/scheduler.json.

Per policy (naive, upstream's, flash-attention's, the static job count, the governor), the peak memory its build
reached in the cgroup against the cap, with its OOM kills and its wall time over the lower bound; at the bench's
cap (100 GB host scale) and at the tight one (64 GB). A bar at the cap is a build the OOM killer stopped there.

    python bench/scheduler/peaks_figure.py [--results bench/scheduler/results/scheduler.json] [--out bench/scheduler/peaks.svg]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared readers
from figures import pyplot, save
from raw_pack import ROOT

RESULTS = ROOT / "bench" / "scheduler" / "results" / "scheduler.json"
OUT = ROOT / "bench" / "scheduler" / "peaks.svg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    plt = pyplot()
    panels = [("bench cap", data["results"]), ("tight cap", data["tight_cap"]["results"])]
    fig, axes = plt.subplots(1, len(panels), figsize=(9, 3.4), sharey=True)
    for ax, (what, rows) in zip(axes, panels, strict=True):
        cap = rows[0]["cap_gb"]
        names = [r["policy"] for r in rows]
        colours = ["firebrick" if r["oom_kills"] else "seagreen" for r in rows]
        ax.bar(names, [r["peak_gb"] for r in rows], color=colours)
        ax.axhline(cap, color="black", linestyle="--", linewidth=1)
        ax.text(len(rows) - 0.5, cap, f"cap {cap:.0f} GB", ha="right", va="bottom", fontsize=8)
        for i, r in enumerate(rows):
            said = f"{r['oom_kills']} OOM\n{r['ratio']:.2f}x bound" + ("" if r["completed"] else "\nnot built")
            ax.text(i, r["peak_gb"] / 2, said, ha="center", va="center", fontsize=7, color="white")
        ax.set_title(f"{what}: {cap:.0f} GB (host scale)", loc="left")
        ax.tick_params(axis="x", labelrotation=20)
    axes[0].set_ylabel("peak memory in the cgroup, GB (host scale)")
    fig.suptitle("peak against the cap per policy (red: the OOM killer struck; figures: kills, wall / lower bound)",
                 fontsize=9, x=0.01, ha="left")
    fig.tight_layout()
    save(fig, args.out)


if __name__ == "__main__":
    main()
