"""What each arch's real build costs: the tool's build step and the compilers' CPU per build, one picture from the
builds results (results/arch-builds.json: the shipped recipe per arch; results/nightly-0.4-builds.json: 0.4.3 pruned
and unpruned), each bar labelled with its archs, its series and its host's cores.

    python bench/arch_builds/builds_figure.py [--out bench/arch_builds/builds.svg]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared readers
from figures import pyplot, save
from raw_pack import ROOT

RESULTS = [ROOT / "bench" / "arch_builds" / "results" / "arch-builds.json",
           ROOT / "bench" / "arch_builds" / "results" / "nightly-0.4-builds.json"]
OUT = ROOT / "bench" / "arch_builds" / "builds.svg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    plt = pyplot()
    rows = []
    for path in RESULTS:
        for b in json.loads(path.read_text())["builds"]:
            label = Path(b["raw"]).name.removesuffix("-raw.tar.gz")
            rows.append((f"{';'.join(b['archs'])}  {b.get('series') or ''}  {b['host'].get('cores')} cores  ({label})",
                         b["build"].get("tool_build_step_s"), b["build"].get("compiler_cpu_s")))
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(rows) + 1.3))
    for i, (_, step, cpu) in enumerate(rows[::-1]):
        if step is not None:
            ax.barh(i + 0.2, step, height=0.38, color="steelblue", label="tool's build step, s" if i == 0 else None)
        if cpu is not None:
            ax.barh(i - 0.2, cpu, height=0.38, color="darkorange", label="compilers' CPU, s" if i == 0 else None)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows[::-1]], fontsize=7)
    ax.set_xlabel("seconds (no CPU bar: the pack holds no recorder profile)")
    ax.set_title("real builds per arch: the shipped recipe (top) and nightly-0.4, pruned (p, h43) and unpruned (u, h43u)",
                 loc="left")
    ax.legend(loc="upper right", frameon=False)
    fig.tight_layout()
    save(fig, args.out)


if __name__ == "__main__":
    main()
