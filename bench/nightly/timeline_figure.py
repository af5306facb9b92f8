"""The replay's picture: which sm120 series version each night of sgl-kernel 0.3.21 -> 0.4.3 would build, the
conflict nights (no version applies that is no silent downgrade) and the nights a patch was retired; one column
per night of results/replay.json (one run of the replay, the series choice of build_kernel/nightly/series_choice.py; nothing built).

    python bench/nightly/timeline_figure.py [--out bench/nightly/timeline.svg]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared readers
from figures import pyplot, save
from raw_pack import ROOT

RESULTS = ROOT / "bench" / "nightly" / "results" / "replay.json"
OUT = ROOT / "bench" / "nightly" / "timeline.svg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    plt = pyplot()
    nights = json.loads(RESULTS.read_text())["nights"]
    versions = sorted({n["series"] for n in nights if n["series"]}, key=lambda v: int(v[1:]))
    colours = dict(zip(versions, plt.get_cmap("tab10").colors, strict=False))
    fig, ax = plt.subplots(figsize=(10, 2.6))
    for i, n in enumerate(nights):
        colour = colours[n["series"]] if n["series"] else "#d62728"
        hatch = "//" if n["drops"] else None
        ax.bar(i, 1, width=0.9, color=colour, hatch=hatch, edgecolor="white", linewidth=0)
        if n["retired"]:
            ax.plot(i, 1.08, marker="v", color="black", markersize=6)
    for v in versions:
        ax.bar(0, 0, color=colours[v], label=f"series {v}")
    ax.bar(0, 0, color="#d62728", label="conflict: no version applies\nwithout dropping patches")
    if any(n["drops"] for n in nights):
        ax.bar(0, 0, color="white", hatch="//", edgecolor="grey", label="drops unretired v8 patches")
    ax.plot([], [], "v", color="black", label="patch retired")
    step = max(1, len(nights) // 12)
    ax.set_xticks(range(0, len(nights), step), [nights[i]["night"] for i in range(0, len(nights), step)],
                  rotation=35, ha="right")
    ax.set_yticks([])
    ax.set_ylim(0, 1.2)
    ax.set_xlim(-0.6, len(nights) - 0.4)
    ax.set_title(f"nightly-cu130 replayed over sgl-kernel 0.3.21 -> 0.4.3: {len(nights)} nights "
                 "(one per day upstream touched sgl-kernel/), series chosen per night", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    save(fig, args.out)


if __name__ == "__main__":
    main()
