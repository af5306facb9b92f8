"""Is the pruned build SASS-identical? Each prune-proof's verdict per function of the kernel library, in one picture.

Per proof (the pruned wheel against an unpruned build of the same commit, `build-kernel prune-proof`): the functions
of the pruned library whose normalised SASS is identical to the unpruned one's, those the pruning removed (kernels of
GPU families the wheel does not run on), and those that differ or are missing. The shipped 0.3.21 series (12.0a,
H200) and nightly-0.4 (12.0a and 9.0a, H100); the 9.0a proof's 2 differing functions are fp8 GEMM kernels whose
source the pruning does not touch: prune_context.py recompiled their TU with every family on and got the unpruned
SASS (raw/local-2c-2026-12-06d-prune-context).

    python bench/pruning/proof_figure.py [--out bench/pruning/proof.svg]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared readers
from figures import pyplot, save
from raw_pack import ROOT

HERE = ROOT / "bench" / "pruning" / "raw"
H100 = ROOT / "bench" / "arch_builds" / "raw" / "h100-2026-12-06e"
PROOFS = [
    ("0.3.21 v3 pruned vs unpruned, 12.0a (H200)", HERE / "h200-2026-12-02" / "prune-proof-p-vs-u.json"),
    ("0.3.21 v5 unity batches vs v3, 12.0a (H200)", HERE / "h200-2026-12-02-unity" / "prune-proof-b-vs-p.json"),
    ("0.3.21 v6 sparse FA out vs v5, 12.0a (H200)", HERE / "h200-2026-12-02-sparse" / "prune-proof-b6-vs-b5.json"),
    ("0.4.3 v12 pruned vs unpruned, 12.0a (H100)", H100 / "h43u-sm120a-prune-proof.json"),
    ("0.4.3 v12 pruned vs unpruned, 9.0a (H100)", H100 / "h43u-sm90a-prune-proof.json"),
]
OUT = ROOT / "bench" / "pruning" / "proof.svg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    plt = pyplot()
    rows = []
    for title, path in PROOFS:
        proof = json.loads(path.read_text())
        [lib] = [lib for lib in proof["libraries"] if "common_ops" in lib["path"]]
        rows.append((title, lib["identical"], lib["removed"], len(lib["differing"]), len(lib["missing"]),
                     proof["passed"]))
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.2))
    kinds = [("identical SASS", "seagreen"), ("removed by pruning", "silver"), ("other SASS", "firebrick"),
             ("missing", "black")]
    for i, (_title, *counts, _passed) in enumerate(rows[::-1]):
        left = 0
        for (kind, colour), n in zip(kinds, counts, strict=True):
            ax.barh(i, n, left=left, color=colour, label=kind if i == 0 else None)
            left += n
        said = (f"{counts[0]:,} identical, {counts[1]} removed"
                + (f", {counts[2]} other: their TU's other kernels (prune_context.py)" if counts[2] else ""))
        ax.text(left + 15, i, said, va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows[::-1]], fontsize=8)
    ax.set_xlabel("functions of the unpruned kernel library (common_ops), per prune-proof")
    ax.set_xlim(0, max(sum(r[1:5]) for r in rows) * 1.55)
    ax.set_title("is the pruned build SASS-identical? every kept function, by normalised SASS", loc="left")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False, fontsize=7)
    fig.tight_layout()
    save(fig, args.out)


if __name__ == "__main__":
    main()
