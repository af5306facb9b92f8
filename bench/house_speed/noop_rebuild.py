"""No-op rebuild and re-verify, today's code vs a baseline commit, side by side in one run.

Each side gets its own checkout (the baseline as a git worktree), cache and output folder,
builds and verifies the miniature once to warm up, then alternates: `build` on a cache
hit, and `verify` of the same bytes again. Medians of N runs of the real CLI in a fresh
process each (what a user waits for).

    python bench/house_speed/noop_rebuild.py [--baseline 8cc7a1e] [--runs 5] [--work /tmp/bench-house]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.baseline import checkout


def cli(src: Path, work: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(src), "NO_COLOR": "1",
           "BUILD_KERNEL_CACHE_DIR": str(work / "cache"), "BUILD_KERNEL_OUTPUT_DIR": str(work / "out")}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "build_kernel", *args], cwd=src, env=env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{src}: build-kernel {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return seconds, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="8cc7a1e")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-house"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "house_speed" / "results" / "house_timing.json")
    args = parser.parse_args()
    base_src = checkout(args.baseline, args.work)
    sides = {"baseline": (base_src, args.work / "base"), "ours": (ROOT, args.work / "ours")}
    for src, work in sides.values():  # warm-up: the wheel and its verification record exist
        cli(src, work, "build", "--recipe", "demo")
        cli(src, work, "verify", "--recipe", "demo")
    times: dict[str, dict[str, list[float]]] = {name: {"build_cache_hit": [], "reverify": []} for name in sides}
    for _ in range(args.runs):
        for name, (src, work) in sides.items():
            seconds, proc = cli(src, work, "build", "--recipe", "demo", "--offline")
            assert "cache hit" in proc.stderr + proc.stdout
            times[name]["build_cache_hit"].append(seconds)
            times[name]["reverify"].append(cli(src, work, "verify", "--recipe", "demo")[0])
    result: dict[str, object] = {"baseline": args.baseline, "runs": args.runs, "cpus": os.cpu_count()}
    for what in ("build_cache_hit", "reverify"):
        base, ours = (statistics.median(times[n][what]) for n in ("baseline", "ours"))
        result[what] = {"baseline_s": round(base, 3), "ours_s": round(ours, 3), "ratio": round(base / ours, 1),
                        "baseline_runs": [round(t, 3) for t in times["baseline"][what]],
                        "ours_runs": [round(t, 3) for t in times["ours"][what]]}
        print(f"{what}: baseline {base:.2f} s, ours {ours:.2f} s ({base / ours:.1f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
