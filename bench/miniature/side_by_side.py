"""Side-by-side benchmarks on the bundled miniature (one run, ratios, not lone times).

1. Full build vs cache hit of the same recipe (same machine, same run).
2. (TU, arch) compile units, wall and CPU time: 12.0a with the full series vs upstream's
   hard-coded arch list (series without the arch/FA3 patches), both asked for 12.0a.
   Each side is built once to warm up, then measured with --force, alternating.
   Wall time only drops when there are fewer cores than units; CPU time always does.

    python bench/miniature/side_by_side.py [--out bench/miniature/results/NAME.json]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel import recipe
from build_kernel.plan import resolve
from build_kernel.resources import probe
from build_kernel.series import load_series, write_lock
from build_kernel.stages import builder as build
from build_kernel.stages.builder import buildenv
from build_kernel.stages.fetch import workspace


def upstream_arch_patches(patches: list[str]) -> list[str]:
    """The series as upstream's hard-coded arch list needs it: without the patches that honour
    TORCH_CUDA_ARCH_LIST, the FA3 switch, and the arch pruning that builds on the arch list (0006's
    CMake hunk edits the lines 0005 adds: on its own it cannot apply)."""
    return [p for p in patches if not any(word in p for word in ("arch-list", "fa3", "prune-arch"))]


def project_with(tmp: Path, patches: list[str], version: str) -> Path:
    """A throw-away project root whose demo recipe uses a subset of the miniature series."""
    proj = tmp / f"proj-{version}"
    (proj / "recipes").mkdir(parents=True)
    series = proj / "patches" / "minikernel" / version
    series.mkdir(parents=True)
    src = ROOT / "patches" / "minikernel" / "v1"
    paths = {p.name: p.path for p in load_series(src).patches}  # the pool's files, found by their sha256
    for name in patches:
        shutil.copy(paths[name], series / name)
    shutil.copy(src / "info.toml", series / "info.toml")
    (series / "series").write_text("".join(f"{n}\n" for n in patches))
    write_lock(series)
    text = (ROOT / "recipes" / "demo.toml").read_text().replace('version = "v1"', f'version = "{version}"')
    text = text.replace("[build.defines]\n", '[build.defines]\nCMAKE_EXPORT_COMPILE_COMMANDS = "ON"\n')
    (proj / "recipes" / "demo.toml").write_text(text)
    return proj


def run_build(proj: Path, cache: Path, *, force: bool = False) -> tuple[float, float, build.BuildResult]:
    """(wall seconds, CPU seconds of all compiler processes, result)."""
    plan = resolve(recipe.load("demo", proj), cache_dir=cache, output_dir=proj / "wheels")
    tree = workspace.prepare(plan)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = build.build(plan, tree, buildenv.python_for(plan), force=force)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.monotonic() - start, cpu, result


def compile_units(cache: Path, key: str) -> tuple[int, int]:
    """(TUs, (TU, arch) units) from the CMake build folder's compile_commands.json."""
    commands = json.loads((cache / "build" / key / "cmake" / "compile_commands.json").read_text())
    units = 0
    for entry in commands:
        archs = set(re.findall(r"code=(sm_\d+[af]?)", entry["command"]))
        units += max(1, len(archs))
    return len(commands), units


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "miniature" / "results" / "latest.json")
    args = parser.parse_args()
    patches = sorted((ROOT / "patches/minikernel/v1/series").read_text().split())
    with tempfile.TemporaryDirectory(prefix="bk-bench-") as tmp_str:
        tmp = Path(tmp_str)
        full = project_with(tmp, patches, "v1")
        upstream_archs = project_with(tmp, upstream_arch_patches(patches), "noarch")
        # Warm-up pass of each (first configure, page cache), then the measured pass with
        # --force, alternating, so neither side pays the cold start.
        run_build(full, tmp / "cache-a")
        run_build(upstream_archs, tmp / "cache-b")
        cold_s, cold_cpu, cold = run_build(full, tmp / "cache-a", force=True)
        up_s, up_cpu, up = run_build(upstream_archs, tmp / "cache-b", force=True)
        hit_s, _, hit = run_build(full, tmp / "cache-a")
        assert hit.cached and not cold.cached
        ours_tu, ours_units = compile_units(tmp / "cache-a", cold.key)
        up_tu, up_units = compile_units(tmp / "cache-b", up.key)
    res = probe()
    results = {
        "machine": {"cpus": res.cpus, "memory_gb": round(res.memory_gb, 1), "jobs": cold.provenance["jobs"],
                    "nvcc": cold.provenance["toolchain"]["nvcc_version"], "torch": cold.provenance["toolchain"]["torch"]},
        "full_build_s": round(cold_s, 2), "cache_hit_s": round(hit_s, 3),
        "full_over_cache_hit": round(cold_s / hit_s, 1),
        "ours_12_0a": {"tus": ours_tu, "tu_arch_units": ours_units, "build_s": round(cold_s, 1),
                       "cpu_s": round(cold_cpu, 1)},
        "upstream_arch_list_asked_12_0a": {"tus": up_tu, "tu_arch_units": up_units, "build_s": round(up_s, 1),
                                           "cpu_s": round(up_cpu, 1)},
        "units_ratio_upstream_over_ours": round(up_units / ours_units, 1),
        "wall_time_ratio_upstream_over_ours": round(up_s / cold_s, 1),
        "cpu_time_ratio_upstream_over_ours": round(up_cpu / cold_cpu, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
