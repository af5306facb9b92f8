"""sglang's NVFP4 JIT modules prewarmed ahead of time and proven by their SASS (issue 25, item 3).

Runs build-kernel's own prewarm (`stages/serve/jit_prewarm.build_item`, sglang's builders in the
given interpreter) for one arch into a fresh tvm-ffi cache, verifies each module with
`stages/verify/jit_cache` (cuobjdump/nvdisasm), then loads each module again in a fresh process
with sglang's real `load_jit` (tvm-ffi's load_inline: ninja runs, finds nothing to do) and times
it. Every number in the output comes from those runs. No upstream code is in the repository:
the interpreter must see an sglang `python/` tree, tvm-ffi, flashinfer (its CUTLASS headers), torch.

    python bench/jit_prewarm_nvfp4.py --python /tmp/jitvenv/bin/python --cuda-home /usr/local/cuda-13.0 \\
        --cache /tmp/jit-cache --arch 12.0a --builder _jit_nvfp4_quant_module --builder _jit_nvfp4_scaled_mm_module \\
        --out bench/results/jit-prewarm-nvfp4-sm120a.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from build_kernel import process
from build_kernel.archs import parse_arch_list
from build_kernel.errors import ServeError
from build_kernel.stages.serve import jit_prewarm
from build_kernel.stages.verify import jit_cache

ENTRY = "sglang.jit_kernel.nvfp4"
PATTERNS = (r"OMMA\.SF\.\S*E2M1", r"E2M1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--cuda-home", required=True)
    ap.add_argument("--cache", required=True, type=Path)
    ap.add_argument("--arch", default="12.0a")
    ap.add_argument("--builder", action="append", required=True)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    arch = parse_arch_list([args.arch])[0]
    if args.cache.exists():
        shutil.rmtree(args.cache)
    env = {**os.environ, "CUDA_HOME": args.cuda_home, jit_prewarm.CACHE_VAR: str(args.cache),
           "PATH": f"{Path(args.python).parent}:{os.environ.get('PATH', '')}"}
    log_path = args.cache.parent / f"{args.cache.name}.log"
    found = jit_prewarm._child(args.python, "list", {"entries": [ENTRY]}, env, what="listing", log_path=log_path,
                               timeout=600)[ENTRY]
    rows = []
    for builder in args.builder:
        item = jit_prewarm.Item(ENTRY, builder, arch.torch)
        start = time.monotonic()
        built = jit_prewarm.build_item(args.python, item, env, args.cache, log_path)
        wall = time.monotonic() - start
        for b in built:
            so = Path(b["so"])
            report = jit_cache.verify(args.cache, [arch], PATTERNS, env, only=[so])
            ninja_log = so.parent / ".ninja_log"
            before = (so.stat().st_mtime_ns, ninja_log.read_text())
            load = jit_prewarm._child(args.python, "load", {"entry": ENTRY, "builder": builder, "arch": arch.torch},
                                      env, what=f"loading {builder} again", log_path=log_path, timeout=3600)
            after = (so.stat().st_mtime_ns, ninja_log.read_text())
            gencode = next(ln for ln in (so.parent / "build.ninja").read_text().splitlines()
                           if ln.startswith("cuda_cflags"))
            rows.append({"builder": builder, "module": b["name"], "entry_dir": so.parent.name,
                         "compile_s": b["seconds"], "child_wall_s": round(wall, 1), "so_bytes": b["size"],
                         "cubins": report.modules[0].cubins, "sass": report.modules[0].sass,
                         "verify_failures": report.failures, "gencode": [w for w in gencode.split() if "gencode" in w],
                         "second_load_s": load["seconds"], "second_load_module": load["module"],
                         "second_load_rebuilt": before != after})
    nvcc = process.probe([Path(args.cuda_home) / "bin" / "nvcc", "--version"]) or ""
    out = {"what": "sglang NVFP4 JIT modules prewarmed by build-kernel and verified by SASS",
           "arch": arch.torch, "entry": ENTRY, "builders_in_sglang": found, "patterns": list(PATTERNS),
           "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "gpu": "none"},
           "nvcc": nvcc.strip().splitlines()[-1] if nvcc else None,
           "python": args.python, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    try:
        main()
    except ServeError as exc:
        sys.exit(f"error: {exc.render()}")
