"""verify on a real wheel: today's code vs a baseline commit, side by side in one run.

Each side verifies the same bytes (hard links in a folder per side, as the record lies
beside the wheel) with its own repository's nightly recipe, taking this machine's torch,
asked for 12.0a; then ours verifies again (the record). The upstream sgl-kernel 0.3.21
wheel from PyPI (535 MB, CUDA 12) is the case of the issue: download it into a scratch
folder (`pip download sgl-kernel==0.3.21 --no-deps -d DIR`), never into the repository.

    python bench/house_speed/verify_speed.py WHEEL [--baseline 8cc7a1e] [--work /tmp/bench-verify]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.baseline import checkout

OVERLAY = 'extends = "{recipes}/nightly-cu130.toml"\n[toolchain]\ntorch = "existing"\n'


def side(src: Path, work: Path, wheel: Path, *extra: str) -> tuple[float, dict[str, object]]:
    """One `verify` by the CLI of checkout `src`; (seconds, its --json report)."""
    proj = work / "proj"
    (proj / "recipes").mkdir(parents=True, exist_ok=True)
    if not (proj / "patches").exists():
        (proj / "patches").symlink_to(src / "patches")
    (proj / "recipes" / "bench.toml").write_text(OVERLAY.format(recipes=src / "recipes"))
    env = {**os.environ, "PYTHONPATH": str(src), "NO_COLOR": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "build_kernel", "--json", "--arch", "12.0a", "--cache-dir",
                           str(work / "cache"), "verify", str(wheel), "--recipe", str(proj / "recipes" / "bench.toml"),
                           *extra], cwd=src, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if not proc.stdout.strip():
        raise SystemExit(f"{src}: verify printed no report:\n{proc.stderr[-3000:]}")
    return seconds, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--baseline", default="8cc7a1e")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-verify"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "house_speed" / "results" / "verify_speed.json")
    args = parser.parse_args()
    base_src = checkout(args.baseline, args.work)
    wheels = {}
    for name in ("baseline", "ours"):
        folder = args.work / name / "wheel"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        wheels[name] = folder / args.wheel.name
        os.link(args.wheel.resolve(), wheels[name])
    base_s, base = side(base_src, args.work / "baseline", wheels["baseline"])
    ours_s, ours = side(ROOT, args.work / "ours", wheels["ours"])
    static_s, static = side(ROOT, args.work / "ours", wheels["ours"], "--static")
    # A record is reused only when it passed: the static one here (the full verify fails the import).
    again_s, again = side(ROOT, args.work / "ours", wheels["ours"], "--static")
    result = {
        "wheel": args.wheel.name, "bytes": args.wheel.stat().st_size, "cpus": os.cpu_count(), "baseline": args.baseline,
        "baseline_s": round(base_s, 1), "ours_s": round(ours_s, 1), "ratio": round(base_s / ours_s, 1),
        "ours_again_s": round(again_s, 2), "again_from_record": again.get("from_record"),
        "ours_static_s": round(static_s, 1),
        "baseline_failures": base["failures"], "ours_failures": ours["failures"], "ours_warnings": ours["warnings"],
        "ours_libraries": [{k: lib[k] for k in ("path", "archs", "ptx", "missing", "jit", "rule", "applies",
                                                "fp4_matches", "fp4_scanned")} for lib in ours["libraries"]],
        "static_passed": static["passed"],
    }
    print(f"baseline {base_s:.1f} s ({len(base['failures'])} failures), ours {ours_s:.1f} s "
          f"({len(ours['failures'])} failures): {base_s / ours_s:.1f}x; static {static_s:.1f} s, again {again_s:.2f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
