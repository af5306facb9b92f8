"""The pair's per-TU compile times: series v8 (whole TUs) against v11 (the heaviest TUs split into parts), 12.0a,
both built cold one after the other on the 2-core box (build_pair.sh). One picture from the two raw packs.

A split TU's parts are drawn stacked beside the whole TU they came from (`<tu>_part<N>.cu` -> `<tu>.cu`): the
split buys a lower peak per compile and parts that can run side by side, and costs the headers each part parses
again (phases.py: where the time goes). The heaviest TUs by either build's time; seconds are each compile's wall as
the recorder measured it.

    python bench/split_tus/per_tu_figure.py [BASE_PACK NEW_PACK] [--top 14] [--out bench/split_tus/per-tu.svg]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared readers
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "real_build"))
from figures import pyplot, save
from raw_pack import ROOT
from timeline_figure import read

RAW = ROOT / "bench" / "split_tus" / "raw" / "local-2c-2026-12-06-split-pair"
PACKS = [RAW / "v8-sm120a-2c-raw.tar.gz", RAW / "v11-sm120a-2c-raw.tar.gz"]
OUT = ROOT / "bench" / "split_tus" / "per-tu.svg"
PART = re.compile(r"_part(\d+)(\.\w+)$")


def per_tu(pack: Path) -> dict[str, list[tuple[str, float]]]:
    """TU -> [(part name or "", wall s)] of the pack's own compiles."""
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for source, _, wall, _ in read(pack)["rows"]:
        m = PART.search(source)
        tu = PART.sub(r"\2", source) if m else source
        out[tu].append((f"part {m.group(1)}" if m else "", wall))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packs", nargs="*", type=Path, default=PACKS)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if len(args.packs) != 2:
        ap.error("two packs: BASE NEW")
    plt = pyplot()
    base, new = (per_tu(p) for p in args.packs)
    names = [p.name.split("-raw")[0] for p in args.packs]

    def total(runs: list[tuple[str, float]]) -> float:
        return sum(w for _, w in runs)

    tus = sorted(set(base) | set(new), key=lambda tu: -max(total(base.get(tu, [])), total(new.get(tu, []))))
    tus = tus[:args.top][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(tus) + 1.2))
    for i, tu in enumerate(tus):
        ax.barh(i + 0.2, total(base.get(tu, [])), height=0.38, color="slategray",
                label=names[0] if i == 0 else None)
        left = 0.0
        for j, (part, wall) in enumerate(sorted(new.get(tu, []))):
            ax.barh(i - 0.2, wall, left=left, height=0.38, color="teal" if j % 2 == 0 else "mediumaquamarine",
                    edgecolor="white", linewidth=0.5, label=names[1] if i == 0 and j == 0 else None)
            if part:
                ax.text(left + wall / 2, i - 0.2, part.split()[1], ha="center", va="center", fontsize=6, color="white")
            left += wall
    ax.set_yticks(range(len(tus)), [tu.removeprefix("csrc/") for tu in tus], fontsize=7)
    ax.set_xlabel("compile wall seconds (a split TU: its parts stacked, numbered)")
    ax.set_title(f"per-TU times, {names[0]} vs {names[1]} (the {len(tus)} longest)", loc="left")
    ax.legend(loc="lower right", frameon=False)
    fig.tight_layout()
    save(fig, args.out)


if __name__ == "__main__":
    main()
