"""CUDA toolkit from PyPI wheels: setup time cold (empty cache folder) vs cached, one run.

Cold = pip downloads and installs nvidia-cuda-nvcc & co. (pip's own cache is off, so it
really downloads), assembles the toolkit root and smoke-compiles a kernel. Cached = the
same call again: the marker is read, nothing is installed. Offline = cached with
`offline=True` (what an air-gapped build does).

    python bench/toolkit_setup/cold_vs_cached.py [--cuda 13.0] [--out bench/toolkit_setup/results/toolkit_setup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel.stages.builder import cudawheels


def timed(cache: Path, cuda: str, offline: bool = False) -> tuple[float, cudawheels.Toolkit]:
    start = time.monotonic()
    tk = cudawheels.ensure_toolkit(cache, cuda, python=sys.executable, offline=offline, env=os.environ)
    return time.monotonic() - start, tk


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", default="13.0", help="CUDA major.minor to set up (default 13.0, torch 2.14.1's)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "toolkit_setup" / "results" / "toolkit_setup.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bk-toolkit-bench-") as tmp:
        cache = Path(tmp)
        cold_s, cold = timed(cache, args.cuda)
        cached_s, cached = timed(cache, args.cuda)
        offline_s, offline = timed(cache, args.cuda, offline=True)
        assert not cold.cached and cached.cached and offline.cached and cached.root == cold.root
        size = du(cold.root.parent.parent)
    results = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "cuda": args.cuda, "nvcc": cold.version, "packages": dict(cold.packages),
        "installed_mb": round(size / 2**20),
        "cold_s": round(cold_s, 2), "cached_s": round(cached_s, 4), "offline_cached_s": round(offline_s, 4),
        "cold_over_cached": round(cold_s / cached_s, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"toolkit setup: cold {cold_s:.2f} s, cached {cached_s * 1000:.1f} ms -> {cold_s / cached_s:.0f}x")


if __name__ == "__main__":
    main()
