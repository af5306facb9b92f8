"""sglang's NVFP4 JIT modules prewarmed ahead of time and proven by their SASS (issue 25, item 3).

Writes the results file from the raw output of one run on the 2-core GPU-less host. That run
(kept outside the repository with the sglang tree it compiles: no upstream code here) used
build-kernel's own prewarm (`stages/serve/jit_prewarm.build_item`, sglang 0753182b's builders
in its interpreter) for 12.0a into a fresh tvm-ffi cache, verified each module with
`stages/verify/jit_cache`, then loaded each again in a fresh process with sglang's `load_jit`
(ninja finds nothing to do) and printed every figure as JSON: the raw file read here.

    python bench/jit_prewarm/prewarm_report.py bench/real_build/raw/local-2c-2026-12-02/jit-prewarm-nvfp4-raw.json \\
        [--out bench/jit_prewarm/results/nvfp4-sm120a.json]

`--tool`: the raw is a device run's pack instead (bench/gpu_host/nightly_build_test_serve.sh's i55-raw.tar.gz: `build-kernel --json
jit-prewarm` as a user runs it, its log, the host, the serve environment's packages), issue 55 item 4 on the GPU host:

    python bench/jit_prewarm/prewarm_report.py --tool bench/upstream_tests/raw/h100-2026-12-06b/i55-raw.tar.gz \\
        --out bench/jit_prewarm/results/nvfp4-sm120a-h100.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import member

ROOT = Path(__file__).resolve().parents[2]


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    """Per module: compile seconds, size, cubins, SASS counts, whether verify passed, the reload."""
    modules = []
    for r in raw["rows"]:
        modules.append({
            "module": r["module"], "builder": r["builder"], "compile_s": r["compile_s"],
            "so_mb": round(r["so_bytes"] / 1e6, 2), "cubins": r["cubins"], "sass": r["sass"],
            "verified": not r["verify_failures"], "gencode": r["gencode"],
            "reload_s": r["second_load_s"], "reload_rebuilt": r["second_load_rebuilt"],
        })
    return {"what": raw["what"], "arch": raw["arch"], "entry": raw["entry"], "patterns": raw["patterns"],
            "host": raw["host"], "nvcc": raw["nvcc"], "builders_in_sglang": raw["builders_in_sglang"],
            "modules": modules,
            "all_verified": all(m["verified"] for m in modules),
            "compile_s_total": round(sum(m["compile_s"] for m in modules), 1),
            "reload_s_max": max(m["reload_s"] for m in modules),
            "reload_rebuilt_any": any(m["reload_rebuilt"] for m in modules)}


def summarise_tool(pack: Path) -> dict[str, Any]:
    """The tool's own prewarm on a host: per module its compile seconds and size (prewarm.json), the cubins and
    SASS counts its verify read, and the host's GPU, nvcc and sglang."""
    with tarfile.open(pack) as tar:
        out, host, packages = ((member(tar, n) or b"").decode(errors="replace")
                               for n in ("/prewarm.json", "/host.txt", "/sgenv-list.txt"))
    data = json.loads(out)
    verified = {m["name"]: m for m in data["verify"]["modules"]}
    lines = host.splitlines()
    sglang = re.search(r"^sglang\s+(\S+)", packages, re.M)
    modules = [{"module": m["name"], "builder": m["builder"], "compile_s": m["seconds"],
                "so_mb": round(m["size"] / 1e6, 2), "cubins": verified[m["name"]]["cubins"],
                "sass": verified[m["name"]]["sass"]} for m in data["modules"]]
    return {"what": "sglang NVFP4 JIT modules prewarmed by `build-kernel jit-prewarm` on the GPU host and verified "
                    "by their SASS", "arch": sorted({i["arch"] for i in data["items"]}),
            "entry": sorted({i["entry"] for i in data["items"]}), "host": {"gpu": lines[1] if len(lines) > 1 else "",
            "cpus": lines[2] if len(lines) > 2 else "", "nvcc": next((ln for ln in lines if "cuda_" in ln), "")},
            "sglang": sglang.group(1) if sglang else None, "modules": modules,
            "all_verified": bool(data["verify"]["passed"]), "verify_failures": data["verify"]["failures"],
            "compile_s_total": round(sum(m["compile_s"] for m in modules), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("--tool", action="store_true", help="RAW is a device run's pack of `build-kernel jit-prewarm`")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "jit_prewarm" / "results" / "nvfp4-sm120a.json")
    args = ap.parse_args()
    raw = args.raw.resolve()
    result = {"raw": raw.relative_to(ROOT).as_posix() if raw.is_relative_to(ROOT) else raw.as_posix(),
              **(summarise_tool(raw) if args.tool else summarise(json.loads(raw.read_text())))}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({m["module"]: (m["compile_s"], m["sass"]) for m in result["modules"]}, indent=1))


if __name__ == "__main__":
    main()
