"""Issue 53's arch table: every arch CUDA 13's nvcc lists, planned from the shipped recipe with no overlay, beside
the real builds of bench/arch_builds/results/arch-builds.json and the GPU host's 9.0a build that served the tiny MoE
(bench/serving/results/moe-serve.json, its "run").

Per arch: whether the shipped recipe plans it (or the one line that refuses it), the libraries its GPUs load,
FP4, FA3, sparse FA and FlashMLA as the plan says (verify's own rules: targets.arch_rows), and, where a build of
that arch exists, its tool step, compiler CPU s, jobs, OOM kills and verify per library. Planning compiles
nothing; the toolkit's list is this host's `nvcc --list-gpu-arch` (each arch also with `a` from 9.0 and `f` from 10.0, as nvcc takes
it, and `+PTX` rows).

    python bench/arch_builds/arch_table.py [--recipe nightly-cu130] [--builds bench/arch_builds/results/arch-builds.json] \
        [--serve-run bench/serving/results/moe-serve.json] [--out bench/arch_builds/results/arch-table.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from build_kernel import recipe, targets
from build_kernel.errors import BuildKernelError
from build_kernel.plan import resolve
from build_kernel.resources import Resources

ROOT = Path(__file__).resolve().parents[2]
# The plan's job count is not part of the table: fixed resources keep each row independent of this box's load.
RESOURCES = Resources(cpus=16, cpus_why="table", memory_bytes=128 * 1024**3, memory_why="table")


def asked_archs(kit: targets.Toolkit) -> list[str]:
    """Each arch nvcc lists, as torch spells it, with its arch-specific `a` (9.0 on) and family `f` (10.0 on)
    variants: nvcc lists the plain `compute_NN` only, and takes the suffixes on those."""
    out: list[str] = []
    for digits in sorted(kit.archs, key=int):
        major, minor = int(digits[:-1]), digits[-1]
        out += [f"{major}.{minor}{suffix}" for suffix in ("", "a", "f") if suffix == "" or
                (suffix == "a" and major >= 9) or (suffix == "f" and major >= 10)]
    return out


def plan_row(name: str, arch: str) -> dict[str, Any]:
    try:
        plan = resolve(recipe.load(name), env=dict(os.environ), arch=arch, resources=RESOURCES)
    except BuildKernelError as exc:
        return {"arch": arch, "plans": False, "refused": str(exc).splitlines()[0]}
    rows = targets.arch_rows(plan.archs, plan.recipe.verify)
    row = rows[0]
    return {"arch": arch, "plans": True, "arch_list": plan.arch_list, "libraries": row.libraries, "fp4": row.fp4,
            **{part: has for part, has in row.parts.items()}}


def built(builds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arch list of a build: its figures and verify per library."""
    out = {}
    for b in builds:
        key = ";".join(b["archs"])
        fig = b.get("build") or {}
        ver = b.get("verify") or {}
        out[key] = {"label": b.get("raw"), "tool_build_step_s": fig.get("tool_build_step_s"),
                    "compiler_cpu_s": fig.get("compiler_cpu_s"), "jobs": b.get("jobs"),
                    "cores": fig.get("cores") or (b.get("host") or {}).get("cores"),
                    "edge_seconds_sum": fig.get("edge_seconds_sum"), "gpu": (b.get("host") or {}).get("gpu"),
                    "oom_kills": fig.get("oom_kills"), "verify_passed": not ver.get("failures") if ver else None,
                    "verify_libraries": [{"path": lib["path"], "archs": lib["archs"], "missing": lib["missing"],
                                          "fp4": lib["fp4"]} for lib in ver.get("libraries", []) if lib["applies"]]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="nightly-cu130")
    ap.add_argument("--builds", type=Path, default=ROOT / "bench" / "arch_builds" / "results" / "arch-builds.json")
    ap.add_argument("--serve-run", type=Path, default=ROOT / "bench" / "serving" / "results" / "moe-serve.json")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "arch_builds" / "results" / "arch-table.json")
    args = ap.parse_args()
    kit = targets.toolkit(dict(os.environ))
    archs = asked_archs(kit)
    rows = [plan_row(args.recipe, a) for a in [*archs, "8.6+PTX", "12.0a+PTX"]]
    builds = built(json.loads(args.builds.read_text())["builds"]) if args.builds.is_file() else {}
    if args.serve_run.is_file():
        run = json.loads(args.serve_run.read_text()).get("run") or {}
        b = run.get("build") or {}
        if b.get("archs"):
            builds.setdefault(";".join(b["archs"]), {
                "label": f"{run.get('raw')} (GPU host, recipe {b.get('recipe')}, series {b.get('patch_series')})",
                "tool_build_step_s": b.get("seconds"), "compiler_cpu_s": b.get("cpu_seconds"), "jobs": b.get("jobs"),
                "cores": None, "oom_kills": b.get("oom_kills"), "verify_passed": (run.get("verify") or {}).get("passed"),
                "verify_libraries": None})
    for row in rows:
        row["built"] = builds.get(row["arch"])
    multi = {k: v for k, v in builds.items() if ";" in k}
    result = {"what": __doc__.split("\n\n")[0], "recipe": args.recipe, "toolkit": kit.source,
              "rows": rows, "multi_arch_builds": multi,
              "planned": sum(r["plans"] for r in rows), "refused": [r["arch"] for r in rows if not r["plans"]]}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in rows:
        b = r["built"]
        print(f"{r['arch']:10} " + (f"{', '.join(r['libraries']):70} FP4 {r['fp4'][:3]:4} FA3 {r['FA3']!s:5} "
                                    f"sparse FA {r['sparse FA']!s:5}" if r["plans"] else r["refused"][:120])
              + (f"  built {b['tool_build_step_s']} s, verify {'passed' if b['verify_passed'] else 'FAILED'}"
                 if b else ""))
    print(args.out)


if __name__ == "__main__":
    main()
