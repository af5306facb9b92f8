"""CMake's own calls to CMAKE_MAKE_PROGRAM in a configure: today's ordering script vs a baseline's, side by side.

CMake calls the make program for itself during a configure (`--version`, then a build in each try-compile
folder); the script orders build.ninja only in the build folder. Each side installs its script from its own
checkout (the baseline as a git worktree) with a `python` that logs each start, then configures the same
CUDA + CXX project into a fresh folder, alternating sides, N runs. Medians of the configure's wall time and
the count of Python starts per configure.

    python bench/house_speed/configure_wrapper.py [--baseline 9c00f9c] [--runs 5] [--work /tmp/bench-ninja-wrapper]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.baseline import checkout

INSTALL = """
import sys
from pathlib import Path
from build_kernel.stages.builder import ninja_order
folder, python, ninja, build = sys.argv[1:]
ninja_order.install(Path(folder), python=python, ninja=ninja, build_dir=Path(build),
                    data=ninja_order.predictions(Path(folder) / "profile.sqlite", None, []))
"""


def write_project(root: Path) -> Path:
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "k.cu").write_text("__global__ void k(int* x) { *x = 1; }\n")
    (src / "h.cpp").write_text("int h() { return 1; }\n")
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.20)\nproject(t CXX CUDA)\n"
                                        "add_library(t SHARED k.cu h.cpp)\n")
    return src


def install(src: Path, folder: Path, build: Path, log: Path, ninja: str) -> Path:
    python = folder / "logged-python"
    folder.mkdir(parents=True, exist_ok=True)
    python.write_text(f'#!/bin/sh\necho start >> {log}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    subprocess.run([sys.executable, "-c", INSTALL, str(folder), str(python), ninja, str(build)], check=True, cwd=src,
                   env={**os.environ, "PYTHONPATH": str(src)})
    return folder / "ninja"


def configure(src: Path, project: Path, ninja: str, side: Path, run: int) -> tuple[float, int]:
    """One configure of `project` into a fresh folder with `src`'s script: (wall seconds, Python starts)."""
    build, log = side / f"build-{run}", side / f"starts-{run}"
    script = install(src, side / f"bin-{run}", build, log, ninja)
    start = time.perf_counter()
    subprocess.run(["cmake", "-S", str(project), "-B", str(build), "-G", "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={script}"], check=True, capture_output=True)
    seconds = time.perf_counter() - start
    return seconds, len(log.read_text().splitlines()) if log.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default="9c00f9c")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-ninja-wrapper"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "house_speed" / "results" / "ninja_wrapper.json")
    args = parser.parse_args()
    ninja = shutil.which("ninja")
    if not ninja:
        raise SystemExit("ninja is not on PATH: run from the project's venv (make venv; PATH=.venv/bin:$PATH)")
    sides = {"baseline": checkout(args.baseline, args.work), "ours": ROOT}
    src = write_project(args.work)
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in sides}
    for run in range(args.runs):
        for name, side_src in sides.items():
            runs[name].append(configure(side_src, src, ninja, args.work / name, run))
    result: dict[str, object] = {"baseline": args.baseline, "runs": args.runs, "cpus": os.cpu_count(),
                                 "project": "CUDA + CXX, one .cu and one .cpp, a fresh build folder each run"}
    median: dict[str, float] = {}
    for name in sides:
        seconds = [s for s, _ in runs[name]]
        median[name], starts = statistics.median(seconds), statistics.median(n for _, n in runs[name])
        result[name] = {"configure_s": round(median[name], 3), "python_starts": starts,
                        "configure_runs_s": [round(s, 3) for s in seconds]}
        print(f"{name}: configure {median[name]:.2f} s, {starts:.0f} Python starts")
    result["configure_ratio"] = round(median["baseline"] / median["ours"], 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
