"""Issue 71 item 3: the v8 and v13 builds of one host side by side, from the packs build_one.sh wrote.

Each pack holds the recorder's SQLite rows of its cache; where both builds shared one cache (the 2-core box,
2026-12-07: run at the same time to fit the session), a build's compiles are the rows whose `cwd` is its own build
folder (build.json's `key`). Per build: the tool's build step, compiler CPU s (the recorder's user + system of each
compile's process tree), compiles, the longest compile, the largest compile's peak, OOM kills; per dieted TU its CPU
s and peak in both; and the control: the other TUs, which 0012 leaves byte for byte as they are, so their CPU
ratio v13/v8 is what the load alone did to CPU seconds (both builds' figures are divided by it in `normalized`).
The proof is `prune-proof.json` in v13's pack.

    python bench/header_diet/builds.py <v8 pack> <v13 pack> --out bench/header_diet/results/builds-2c.json
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import ROOT, member

DIETED = ("csrc/gemm/nvfp4_scaled_mm_kernels.cu", "csrc/moe/nvfp4_blockwise_moe.cu", "csrc/gemm/fp8_gemm_kernel.cu",
          "csrc/gemm/fp8_blockwise_gemm_kernel.cu")


def _json(tar: tarfile.TarFile, suffix: str) -> Any:
    raw = member(tar, suffix)
    return json.loads(raw) if raw and raw.strip() else None


def _rows(db: bytes, key: str) -> list[dict[str, Any]]:
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(db)
        f.flush()
        conn = sqlite3.connect(f.name)
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute(
            "SELECT source, wall_s, cpu_s, tree_peak_mb, oom_kill, cwd FROM compiles ORDER BY at")]
        conn.close()
    mine = [r for r in rows if f"/{key}/" in f"{r['cwd']}/"]
    last: dict[str, dict[str, Any]] = {}
    for r in mine:  # a compile run again (after an OOM kill) counts once: its last run
        last[r["source"]] = r
    return list(last.values())


def build(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        result = _json(tar, "/build.json") or {}
        err = (member(tar, "/build.err") or b"").decode()
        host = (member(tar, "/host.txt") or b"").decode()
        db = member(tar, "/profile.sqlite")
        proof = _json(tar, "/prune-proof.json")
    assert db and result.get("key"), f"{path}: no recorder rows or no build key (the build did not finish?)"
    rows = _rows(db, result["key"])
    step = re.search(r"[✓✕] build .*? \(([\d.]+) s\)", err)
    longest = max(rows, key=lambda r: r["wall_s"])
    heaviest = max(rows, key=lambda r: r["tree_peak_mb"])
    by_source = {r["source"]: r for r in rows}
    out: dict[str, Any] = {
        "raw": str(path.resolve().relative_to(ROOT)),
        "host": host.splitlines()[:2],
        "series": result.get("provenance", {}).get("patch_series"), "wheel": Path(str(result.get("wheel", ""))).name,
        "tool_build_step_s": float(step.group(1)) if step else None,
        "compiles": len(rows),
        "compiler_cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
        "longest": {"source": longest["source"], "wall_s": round(longest["wall_s"], 1),
                    "cpu_s": round(longest["cpu_s"], 1)},
        "largest_peak": {"source": heaviest["source"], "gb": round(heaviest["tree_peak_mb"] / 1024, 1)},
        "oom_kills": sum(1 for r in rows if r["oom_kill"]),
        "dieted": {s: {"cpu_s": round(by_source[s]["cpu_s"], 1), "wall_s": round(by_source[s]["wall_s"], 1),
                       "peak_gb": round(by_source[s]["tree_peak_mb"] / 1024, 1)} for s in DIETED if s in by_source},
        "others_cpu_s": round(sum(r["cpu_s"] for r in rows if r["source"] not in DIETED), 1),
    }
    if proof:  # v13 (`pruned`) against v8 (`unpruned`): every function and its SASS, the FP4 opcode counts
        out["proof"] = {"passed": proof.get("passed"), "v13": proof.get("pruned"), "against": proof.get("unpruned"),
                        "libraries": {lib["path"]: {"functions": [lib["functions_pruned"], lib["functions_unpruned"]],
                                                    "identical": lib["identical"], "differing": len(lib["differing"]),
                                                    "missing": len(lib["missing"]),
                                                    "fp4": lib["fp4_pruned"],
                                                    "fp4_equal": lib["fp4_pruned"] == lib["fp4_unpruned"]}
                                      for lib in proof.get("libraries", [])}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("v8", type=Path)
    ap.add_argument("v13", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    v8, v13 = build(args.v8), build(args.v13)
    both = [s for s in DIETED if s in v8["dieted"] and s in v13["dieted"]]
    control = round(v13["others_cpu_s"] / v8["others_cpu_s"], 3)
    dieted = [sum(b["dieted"][s]["cpu_s"] for s in both) for b in (v8, v13)]
    out: dict[str, Any] = {
        "issue": 71, "what": (__doc__ or "").splitlines()[0],
        "v8": v8, "v13": v13,
        "v13_over_v8": {
            "compiler_cpu": round(v13["compiler_cpu_s"] / v8["compiler_cpu_s"], 3),
            "tool_build_step": (round(v13["tool_build_step_s"] / v8["tool_build_step_s"], 3)
                                if v8["tool_build_step_s"] and v13["tool_build_step_s"] else None),
            "dieted_tus_cpu": round(dieted[1] / dieted[0], 3) if dieted[0] else None,
            "control_others_cpu": control,
        },
        # The load's own effect taken out: v13's dieted TUs as if run under v8's load (their CPU over the control's
        # ratio), the rest as v8's.
        "normalized": {
            "dieted_tus_saved_cpu_s": round(dieted[0] - dieted[1] / control, 1),
            "compiler_cpu": round((v8["others_cpu_s"] + dieted[1] / control) / v8["compiler_cpu_s"], 3),
        },
        "per_tu": {s: {"cpu_s": [v8["dieted"][s]["cpu_s"], v13["dieted"][s]["cpu_s"]],
                       "peak_gb": [v8["dieted"][s]["peak_gb"], v13["dieted"][s]["peak_gb"]]} for s in both},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["v13_over_v8"] | out["normalized"], indent=1))


if __name__ == "__main__":
    main()
