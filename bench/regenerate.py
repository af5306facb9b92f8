"""Remake every results file of bench/ from its raw output by its study's script, and say which come out byte for byte.

    python bench/regenerate.py [--only STUDY] [--write]

Each study's README gives the same commands. A results file measured live (a benchmark run on this machine, not read
from a raw pack: the scheduler under a memory cap, the miniature side by side, the compile cache, ...) has no raw
output to remake it from: it is listed as such, with the command that measures it again. `--write` replaces a
results file that differs (after the script changed, e.g. a pattern fixed); without it nothing in bench/ changes.
Each study's picture (an SVG, matplotlib: the `bench` extra) is drawn again the same way and compared too.
Exit 1 when a file remade from raw differs, or its script fails.
"""

from __future__ import annotations

import argparse
import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def raw(study: str, folder: str, *names: str) -> list[str]:
    return [f"bench/{study}/raw/{folder}/{n}" for n in names]


# results file -> (script, arguments before --out). Paths relative to the repository root.
FROM_RAW: dict[str, tuple[str, list[str]]] = {
    "bench/pruning/results/arch-pruning.json": ("bench/pruning/pruning_table.py", [
        *raw("pruning", "h200-2026-12-01", "a1-raw.tar.gz", "b-raw.tar.gz", "a2-raw.tar.gz"),
        *raw("pruning", "h200-2026-12-02", "u-raw.tar.gz", "p-raw.tar.gz", "c-raw.tar.gz"),
        "--baseline", "u", "--proof", *raw("pruning", "h200-2026-12-02", "prune-proof-p-vs-u.json")]),
    "bench/pruning/results/unity-batches.json": ("bench/pruning/pruning_table.py", [
        *raw("pruning", "h200-2026-12-02-unity", "p-raw.tar.gz", "b-raw.tar.gz", "c-raw.tar.gz", "c3-raw.tar.gz"),
        *raw("pruning", "h200-2026-12-02", "u-raw.tar.gz"), "--baseline", "p", "--upstream-from", "u",
        "--proof", *raw("pruning", "h200-2026-12-02-unity", "prune-proof-b-vs-p.json")]),
    "bench/pruning/results/sparse-flash-attn.json": ("bench/pruning/pruning_table.py", [
        *raw("pruning", "h200-2026-12-02-sparse", *(f"{x}-raw.tar.gz" for x in ("a6", "b5", "b6", "c6", "b6b"))),
        "--baseline", "b5", "--upstream-from", "a6",
        "--proof", *raw("pruning", "h200-2026-12-02-sparse", "prune-proof-b6-vs-b5.json")]),
    "bench/real_build/results/2-cores.json": ("bench/real_build/build_report.py",
                                             raw("real_build", "local-2c-2026-12-02", "2c-raw.tar.gz")),
    "bench/real_build/results/2-cores-pruned.json": ("bench/real_build/build_report.py",
                                                    raw("real_build", "local-2c-2026-12-02", "p2c-raw.tar.gz")),
    "bench/eta/results/eta-replay.json": ("bench/eta/eta_replay.py", [
        "report", *raw("eta", "h200-2026-12-03-unpruned", "v7u-eta.json", "v8-beside-tests-eta.json"),
        *raw("pruning", "h200-2026-12-02-sparse", "b6b-eta.json")]),
    # plan's build-time forecast against seven real builds (their packs are named in the script).
    "bench/eta/results/plan-forecast.json": ("bench/eta/plan_forecast.py", []),
    "bench/arch_builds/results/arch-builds.json": ("bench/arch_builds/builds_report.py", [
        *raw("arch_builds", "local-2c-2026-12-05-arch", *(f"{x}-2c-raw.tar.gz" for x in
                                                          ("sm100a", "sm121a", "sm89", "sm90a-sm120a"))),
        *raw("serving", "h200-2026-12-05-pair", "pt-raw.tar.gz")]),
    "bench/arch_builds/results/pair-reference-build.json": ("bench/arch_builds/builds_report.py",
                                                           raw("arch_builds", "local-2c-2026-12-05-pair",
                                                               "v7u-sm90a-2c-raw.tar.gz")),
    "bench/arch_builds/results/nightly-0.4-builds.json": ("bench/arch_builds/builds_report.py", [
        *raw("upstream_tests", "h100-2026-12-06b", "h43-sm90a-raw.tar.gz"),
        *raw("arch_builds", "local-2c-2026-12-05-nightly04", "p43-sm120a-2c-raw.tar.gz", "u43-sm120a-2c-raw.tar.gz"),
        *raw("arch_builds", "local-2c-2026-12-06-nightly04", "o43p-sm90a-2c-raw.tar.gz", "o43p12-sm90a-2c-raw.tar.gz"),
        *raw("arch_builds", "local-2c-2026-12-06c-nightly04", "u43v12-sm120a-2c-raw.tar.gz",
             "p43v12-sm120a-2c-raw.tar.gz"),
        *raw("arch_builds", "h100-2026-12-06e", "h43-sm120a-raw.tar.gz", "h43u-sm120a-raw.tar.gz",
             "h43u-sm90a-raw.tar.gz"),
        "--resumed", *raw("arch_builds", "local-2c-2026-12-05-nightly04", "u43-sm120a-2c-raw.tar.gz"),
        "--pair", *raw("arch_builds", "local-2c-2026-12-06c-nightly04", "u43v12-sm120a-2c-raw.tar.gz",
                       "p43v12-sm120a-2c-raw.tar.gz"),
        "--pair", *raw("arch_builds", "h100-2026-12-06e", "h43u-sm120a-raw.tar.gz", "h43-sm120a-raw.tar.gz")]),
    "bench/split_tus/results/split-builds.json": ("bench/arch_builds/builds_report.py", [
        *raw("split_tus", "local-2c-2026-12-05-split", "v10-sm121a-2c-raw.tar.gz", "v11-sm121a-2c-raw.tar.gz"),
        *raw("split_tus", "local-2c-2026-12-06-split-pair", "v8-sm120a-2c-raw.tar.gz", "v11-sm120a-2c-raw.tar.gz"),
        "--pair", *raw("split_tus", "local-2c-2026-12-06-split-pair", "v8-sm120a-2c-raw.tar.gz",
                       "v11-sm120a-2c-raw.tar.gz")]),
    "bench/split_tus/results/split-phases.json": ("bench/split_tus/phases.py", [
        "report", "bench/split_tus/raw/local-2c-2026-12-06-split-pair/phases"]),
    "bench/header_diet/results/phases.json": ("bench/header_diet/phases.py", [
        "report", "bench/header_diet/raw/local-2c-2026-12-07-tus", "--more",
        "bench/header_diet/raw/local-2c-2026-12-07-tus-repeat", "--baseline-pack",
        *raw("header_diet", "local-2c-2026-12-07-tus", "v8-sm120a-2c-raw.tar.gz"), "--baseline-key", "b5c13932b44c4a5edbff"]),
    "bench/header_diet/results/probes.json": ("bench/header_diet/phases.py", [
        "report", "bench/header_diet/raw/local-2c-2026-12-07-probes"]),
    "bench/header_diet/results/builds-2c.json": ("bench/header_diet/builds.py", [
        *raw("header_diet", "local-2c-2026-12-07-pair", "v8-sm120a-2c-raw.tar.gz", "v13-sm120a-2c-raw.tar.gz")]),
    "bench/header_diet/results/builds-h100.json": ("bench/header_diet/builds.py", [
        *raw("header_diet", "h100-2026-12-07-pair", "v8-sm120a-h100-raw.tar.gz", "v13-sm120a-h100-raw.tar.gz")]),
    "bench/upstream_tests/results/upstream-tests.json": ("bench/upstream_tests/tests_report.py", [
        "report", *raw("upstream_tests", "h200-2026-12-03-tests", "v6-raw.tar.gz", "v7-raw.tar.gz"),
        *raw("upstream_tests", "h200-2026-12-03-fa3", "v8-raw.tar.gz"),
        *raw("eta", "h200-2026-12-03-unpruned", "v7u-raw.tar.gz")]),
    "bench/upstream_tests/results/shipped-tests.json": ("bench/upstream_tests/tests_report.py", [
        "report", *raw("upstream_tests", "h100-2026-12-06b", "shipped-raw.tar.gz")]),
    "bench/upstream_tests/results/nightly-0.4-tests.json": ("bench/upstream_tests/tests_report.py", [
        "report", *raw("upstream_tests", "h100-2026-12-06b", "t43-raw.tar.gz"),
        *raw("upstream_tests", "h200-2026-12-06c", "t43v12-raw.tar.gz")]),
    "bench/serving/results/moe-serve.json": ("bench/serving/moe_serve_report.py", [
        *raw("serving", "h100-2026-12-05b-moe", "moe-serve-raw.tar.gz"),
        "--run", *raw("serving", "h100-2026-12-05b-moe", "i54-raw.tar.gz"),
        "--bisect", *raw("serving", "h100-2026-12-05b-moe", "moe-serve-raw-pcg-context4096.tar.gz"),
        "--throughput-pair", *raw("serving", "h200-2026-12-05-pair", "moe-serve-raw-ours.tar.gz",
                                  "moe-serve-raw-reference.tar.gz", "moe-serve-raw-ours-again.tar.gz"),
        "--upstream-wheel", *raw("arch_builds", "local-2c-2026-12-05-pair", "upstream-wheel-doctor.json",
                                 "upstream-wheel.sha256")]),
    "bench/serving/results/nightly-0.4-serve.json": ("bench/serving/moe_serve_report.py", [
        *raw("serving", "h100-2026-12-06d", "moe-serve-raw-t43.tar.gz"),
        "--run", *raw("serving", "h100-2026-12-06d", "i55-raw.tar.gz")]),
    "bench/serving/results/tiny_moe_model.json": ("bench/serving/tiny_moe_report.py", [
        *raw("serving", "local-2c-2026-12-07-moe70c", "training.json"),
        "--fp8-tolerance", *raw("serving", "local-2c-2026-12-07-moe70c", "fp8-tolerance.json")]),
    # issue 70 on the H100 host: bf16, FP8 through the wheel's cutlass kernels, the piecewise CUDA-graph start.
    "bench/serving/results/evidence-h100.json": ("bench/serving/evidence_report.py", [
        *raw("serving", "h100-2026-12-07-evidence", "evidence-raw.tar.gz"),
        "--first-try", *raw("serving", "h100-2026-12-07-evidence", "try1-evidence-raw.tar.gz")]),
    "bench/serving/results/llama-serve.json": ("bench/serving/llama_serve_report.py", [
        *raw("pruning", "h200-2026-12-02", "s9-raw.tar.gz", "serve9a-raw.tar.gz", "serve9b-raw.tar.gz")]),
    "bench/flash_attn/results/flash-attn.json": ("bench/flash_attn/build_report.py", [
        *raw("flash_attn", "h200-2026-12-04-fa", "fa-h-raw.tar.gz"), *raw("flash_attn", "h200-2026-12-03-fa",
                                                                          "fa-c-raw.tar.gz"),
        "--arch-cost", *raw("flash_attn", "local-2c-2026-12-03-fa", "arch-cost.json")]),
    "bench/jit_prewarm/results/nvfp4-sm120a.json": ("bench/jit_prewarm/prewarm_report.py",
                                                    raw("real_build", "local-2c-2026-12-02", "jit-prewarm-nvfp4-raw.json")),
    "bench/jit_prewarm/results/nvfp4-sm120a-h100.json": ("bench/jit_prewarm/prewarm_report.py", [
        "--tool", *raw("upstream_tests", "h100-2026-12-06b", "i55-raw.tar.gz")]),
    # A cold verify --static, today's code vs the commit before the FP4 early stop (issue 71 item 4), alternately.
    "bench/house_speed/results/verify_cold.json": ("bench/house_speed/verify_cold.py", [
        "report", *(f for label, wheel in (("upstream", "sgl_kernel-0.3.21"), ("upstream-b", "sgl_kernel-0.3.21"),
                                           ("own-12.0a", "sgl_kernel-0.3.21+cu130.torch2.14.sm120a.g6ffc74e.pe29f8d"))
                    for f in raw("house_speed", f"local-2c-2026-12-07-{label}", "meta.json",
                                 *(f"{wheel}-{side}-{n}.json" for side in ("baseline", "ours") for n in (1, 2))))]),
    # The nightly replayed over sgl-kernel 0.3.21 -> 0.4.3 (47 nights' records; bench/nightly/replay_run.sh), the
    # real nights merged (--built); the run before omitted patches were declined (98bccea); the real nights' table.
    "bench/nightly/results/replay.json": ("bench/nightly/replay_table.py",
                                          ["bench/nightly/raw/local-2c-2026-12-07-built-3-nights"]),
    "bench/nightly/results/replay-before-omitted.json": ("bench/nightly/replay_table.py",
                                                         ["bench/nightly/raw/local-2c-2026-12-07"]),
    "bench/nightly/results/builds.json": ("bench/nightly/builds_table.py",
                                          ["bench/nightly/raw/local-2c-builds-2026-12-07"]),
    # The same replay from a tree without patches/sm120/v13 (the rule's other case: v8 first, then v12, newer).
    "bench/nightly/results/replay-without-v13.json": ("bench/nightly/replay_table.py",
                                                      ["bench/nightly/raw/local-2c-2026-12-07-without-v13"]),
    # Reproducible wheels: pairs of builds in two folders with two caches (issue 68 item 6).
    "bench/faults/results/reproducible.json": ("bench/faults/reproducible.py", ["report", "bench/faults/raw/reproducible"]),
    # SIGKILL anywhere and a full disk (issue 68 items 2 and 3; bench/faults/kill_and_disk.md).
    "bench/faults/results/kill_anywhere.json": ("bench/faults/kill_anywhere.py",
                                                ["report", "bench/faults/raw/kill_anywhere"]),
    "bench/faults/results/disk_full.json": ("bench/faults/disk_full.py", ["report", "bench/faults/raw/disk_full"]),
}

# Each study's picture -> the script that draws it (from the raw packs or results above); byte-stable SVG.
FIGURES = {
    "bench/pruning/proof.svg": "bench/pruning/proof_figure.py",
    "bench/real_build/timeline.svg": "bench/real_build/timeline_figure.py",
    "bench/split_tus/per-tu.svg": "bench/split_tus/per_tu_figure.py",
    "bench/scheduler/peaks.svg": "bench/scheduler/peaks_figure.py",
    "bench/arch_builds/builds.svg": "bench/arch_builds/builds_figure.py",
    "bench/nightly/timeline.svg": "bench/nightly/timeline_figure.py",
    # The replay's history page (the tool's page writer; its history.json the same way, by the suffix).
    "bench/nightly/page/history/nightly-cu130/index.html": "bench/nightly/replay_page.py",
    "bench/nightly/page/history/nightly-cu130/history.json": "bench/nightly/replay_page.py",
}

# Measured live (no raw pack): the command that measures it again, on the machine the study names.
MEASURED = {
    "bench/scheduler/results/scheduler.json": "make bench-scheduler (root: a memory cgroup)",
    "bench/header_diet/results/object-proof.json": "python bench/header_diet/object_proof.py --pair TU V13_OBJECT V8_OBJECT ...",
    "bench/header_diet/results/object-proof-sm90.json":
        "raw/local-2c-2026-12-07-sm90: run.sh compiles the objects (not kept: upstream code), then its README's step 3",
    "bench/header_diet/results/object-proof-sm121.json":
        "raw/local-2c-2026-12-07-sm121: run.sh compiles the objects (not kept: upstream code), then prove.sh",
    "bench/miniature/results/latest.json": "make bench-build",
    "bench/miniature/results/h200-host-16c.json": "python bench/miniature/side_by_side.py on the GPU host (16 cores)",
    "bench/real_build/results/16-cores-sm120a.json": "the GPU host's build of series v2 (patches/sm120/v2/NOTES.md)",
    "bench/house_speed/results/house_timing.json": "python bench/house_speed/noop_rebuild.py --baseline COMMIT",
    "bench/house_speed/results/ninja_wrapper.json": "python bench/house_speed/configure_wrapper.py --baseline COMMIT",
    "bench/house_speed/results/verify_speed.json": "python bench/house_speed/verify_speed.py WHEEL --baseline COMMIT",
    "bench/compile_cache/results/compile_cache.json": "python bench/compile_cache/cold_warm.py",
    "bench/fetch_cost/results/fetch_cost.json": "python bench/fetch_cost/mirrors_vs_tool.py --recipe nightly-cu130",
    "bench/toolkit_setup/results/toolkit_setup.json": "python bench/toolkit_setup/cold_vs_cached.py",
    "bench/code_health/results/error_sites.json": "python bench/code_health/error_sites.py (extra: bench)",
    "bench/code_health/results/mutation.json": "make mutate",
    "bench/arch_builds/results/arch-table.json": "python bench/arch_builds/arch_table.py (plans with this machine's nvcc)",
    "bench/faults/results/network.json": "python bench/faults/network.py (git daemon, pypiserver, an HTTP index, here)",
    "bench/faults/results/bad_input.json": "python bench/faults/bad_input.py --cases 10000 --seed 68",
    "bench/fa3_variants/results/fa3-variants-commands.json":
        "python bench/fa3_variants/compare_commands.py compare FULL.json PRUNED.json (digests of two configures)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="one study's folder name (e.g. pruning)")
    parser.add_argument("--write", action="store_true", help="replace a results file that differs")
    args = parser.parse_args()
    bad = 0
    listed = set(FROM_RAW) | set(MEASURED)
    for path in sorted(p.relative_to(ROOT).as_posix() for p in BENCH.glob("*/results/*.json")):
        if path not in listed:
            print(f"{path}: no regeneration listed (add it to bench/regenerate.py)")
            bad = 1
    # Results from their raw packs, then pictures from their scripts: each rewritten into a scratch folder and
    # compared byte for byte with the committed file.
    jobs = [(path, script, [*argv, "--out"], "writes") for path, (script, argv) in FROM_RAW.items()]
    jobs += [(path, script, ["--out"], "draws") for path, script in FIGURES.items()]
    with tempfile.TemporaryDirectory() as tmp:
        for path, script, argv, verb in jobs:
            if args.only and not path.startswith(f"bench/{args.only}/"):
                continue
            out = Path(tmp) / Path(path).name
            proc = subprocess.run([sys.executable, script, *argv, str(out)], cwd=ROOT, capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0 or not out.is_file():
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{path}: {script} failed (rc {proc.returncode}): {last}")
                bad = 1
            elif filecmp.cmp(out, ROOT / path, shallow=False):
                print(f"{path}: byte-identical")
            else:
                print(f"{path}: DIFFERS from what {script} {verb} now" + (" (rewritten)" if args.write else ""))
                if args.write:
                    (ROOT / path).write_bytes(out.read_bytes())
                else:
                    bad = 1
    for path, how in MEASURED.items():
        if not args.only or path.startswith(f"bench/{args.only}/"):
            print(f"{path}: measured live, no raw pack: {how}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
