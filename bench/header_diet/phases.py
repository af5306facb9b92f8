"""Issue 71 item 1: each heavy 12.0a TU of series v8 against its header-diet form (v13), phase by phase.

Each TU compiles with build.ninja's own nvcc line (the configured v8 build folder's: flags, defines, include
folders), from a source tree of each series (`--tree v8=DIR --tree v13=DIR`, a `sgl-kernel` folder of the patched
source: its include/ and csrc/ are searched before the build folder's). The v8 and v13 forms of one TU compile at
the same time (`--parallel 2`, one per core), so both see the same load; each under `/usr/bin/time` (CPU seconds,
the peak RSS of nvcc's largest process) with `nvcc --time` (seconds per phase). Header probes (`--probe NAME=FILE`:
a .cu of only some headers) compile with the first TU's line and the first tree's folders. `report` reads what
`run` wrote (each compile's .time and .csv) and writes results/phases.json.

    python bench/header_diet/phases.py run <build>/cmake --tree v8=/tmp/src-v8 --tree v13=/tmp/src-v13 \
        --tu csrc/gemm/nvfp4_scaled_mm_kernels --out bench/header_diet/raw/<dir>
    python bench/header_diet/phases.py report bench/header_diet/raw/<dir> --out bench/header_diet/results/phases.json
    python bench/header_diet/phases.py frontend <build>/cmake --tree /tmp/src-v13 --tu ... --all-families --out DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sqlite3
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# split_tus' reader of build.ninja's compile lines, loaded by path: both scripts are named phases.py.
_spec = importlib.util.spec_from_file_location("split_tus_phases",
                                               Path(__file__).resolve().parents[1] / "split_tus" / "phases.py")
assert _spec is not None and _spec.loader is not None
split_phases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(split_phases)

ROOT = Path(__file__).resolve().parents[2]
TIME_FORMAT = "%e %U %S %M"  # wall s, user s, system s, peak RSS KiB
DIETED = ("nvfp4_scaled_mm_kernels.cu", "nvfp4_blockwise_moe.cu", "fp8_gemm_kernel.cu", "fp8_blockwise_gemm_kernel.cu")


def nvcc_command(cmake: Path, target_dir: str, source: str) -> list[str]:
    """build.ninja's nvcc line for `source`'s object (the whole TU), as split_tus' phases.py reads it, without
    `-x cu` too, and without a second launcher (the tool's nvcc_paths.py since e7c93fa: `... -- nvcc ...`; it maps
    the build folder's paths only, and both series compile with the same line)."""
    line = split_phases.nvcc_command(cmake, target_dir, source, part="", drop=("-MD", "-c", "-x", "cu"))
    return line[len(line) - line[::-1].index("--"):] if "--" in line else line


def _pair(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    return name, Path(path).resolve()


def run(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    trees = dict(args.tree)
    commands = {tu: nvcc_command(args.cmake, args.target_dir, tu) for tu in args.tu}
    # (name, command's TU, tree, source); the pair of a TU next to each other so that they run at the same time.
    jobs = [] if args.only_probes else [(f"{label}__{Path(tu).name}", tu, tree, tree / f"{tu}.cu")
                                        for tu in args.tu for label, tree in trees.items()]
    first_tree = next(iter(trees.values()))
    jobs += [(f"probe__{name}", args.tu[0], first_tree, path) for name, path in args.probe]
    if args.resume:  # a compile with a finished record is not run again
        jobs = [job for job in jobs if not ((args.out / f"{job[0]}.time").is_file()
                                            and (args.out / f"{job[0]}.time").read_text().strip())]

    def one(job: tuple[str, str, Path, Path]) -> dict[str, Any]:
        name, tu, tree, source = job
        nvcc, *flags = commands[tu]
        # the tree's own folders first: its utils.h and headers, not the build folder's
        cmd = ["/usr/bin/time", "-f", TIME_FORMAT, "-o", str(args.out / f"{name}.time"), "nice", "-n", str(args.nice),
               nvcc, f"-I{tree / 'include'}", f"-I{tree / 'csrc'}", *flags, "--time", str(args.out / f"{name}.csv"),
               "-x", "cu", "-c", str(source), "-o", str(args.out / f"{name}.o")]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if args.keep_objects:  # for object_proof.py: the object's SASS against v8's
            args.keep_objects.mkdir(parents=True, exist_ok=True)
            if (args.out / f"{name}.o").is_file():
                (args.out / f"{name}.o").replace(args.keep_objects / f"{name}.o")
        (args.out / f"{name}.o").unlink(missing_ok=True)
        return {"file": name, "source": str(source), "rc": proc.returncode,
                "wall_s": round(time.monotonic() - start, 1), "stderr_tail": proc.stderr[-600:]}

    with ThreadPoolExecutor(args.parallel) as pool:
        done = list(pool.map(one, jobs))
    runs = args.out / "runs.json"  # what the compilers said; a later run (more probes) adds to the earlier one's
    earlier = [r for r in json.loads(runs.read_text()) if r["file"] not in {d["file"] for d in done}] \
        if runs.is_file() else []
    runs.write_text(json.dumps(earlier + done, indent=1) + "\n")
    (args.out / "command.txt").write_text(shlex.join(commands[args.tu[0]]) + "\n")
    print(json.dumps(done, indent=1))


def frontend(args: argparse.Namespace) -> None:
    """Each TU of the tree through nvcc's front end alone (`--cuda`: the preprocessor and cudafe++, which checks
    every name and instantiates every host template), with build.ninja's line; `--all-families` drops 0005's
    pruning defines (SGL_KERNEL_ARCH_PRUNED, SGL_KERNEL_ARCHS, SGL_ARCH_*), so the SM90 and SM100 branches a
    12.0a build leaves out are parsed too: a name the lean header lacks fails here without a 9.0a build."""
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for tu in args.tu:
        nvcc, *flags = nvcc_command(args.cmake, args.target_dir, tu)
        if args.all_families:
            flags = [f for f in flags if not f.startswith(("-DSGL_KERNEL_ARCH_PRUNED", "-DSGL_KERNEL_ARCHS",
                                                           "-DSGL_ARCH_"))]
        name = Path(tu).name
        ii = args.out / f"{name}.cu.cpp.ii"
        cmd = ["/usr/bin/time", "-f", TIME_FORMAT, "-o", str(args.out / f"{name}.time"), "nice", "-n", str(args.nice),
               nvcc, f"-I{args.tree / 'include'}", f"-I{args.tree / 'csrc'}", *flags, "--cuda", "-x", "cu",
               str(args.tree / f"{tu}.cu"), "-o", str(ii)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        ii.unlink(missing_ok=True)
        results.append({"tu": tu, "rc": proc.returncode, "errors": [line for line in proc.stderr.splitlines()
                                                                     if "error" in line][:20]})
        print(tu, proc.returncode, flush=True)
    (args.out / "frontend.json").write_text(json.dumps({"all_families": args.all_families, "tus": results},
                                                       indent=1) + "\n")


def _time(path: Path) -> dict[str, Any]:
    """/usr/bin/time's last line (`wall user system maxrss_kib`); a failed command adds `Command exited with
    non-zero status N` before it."""
    lines = path.read_text().splitlines()
    wall, user, system, rss = lines[-1].split()
    failed = [line for line in lines[:-1] if "exited with non-zero status" in line]
    return {"rc": int(failed[0].split()[-1]) if failed else 0, "wall_s": float(wall),
            "cpu_s": round(float(user) + float(system), 1), "peak_rss_gib": round(int(rss) / 2**20, 2)}


def _recorder_rows(pack: Path, key: str) -> dict[str, dict[str, float]]:
    """The dieted TUs' compiles in a build_one.sh pack's recorder rows, of the build folder `key` only (the cache's
    SQLite holds every build that used it)."""
    with tarfile.open(pack) as tar:
        db = next(tar.extractfile(m) for m in tar.getmembers() if m.name.endswith("/profile.sqlite"))
        data = db.read() if db else b""
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(data)
        f.flush()
        conn = sqlite3.connect(f.name)
        rows = conn.execute("SELECT source, cpu_s, wall_s, tree_peak_mb, cwd FROM compiles ORDER BY at").fetchall()
        conn.close()
    return {Path(source).stem: {"cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "tree_peak_gib": round(peak / 1024, 2)}
            for source, cpu, wall, peak, cwd in rows if f"/{key}/" in f"{cwd}/" and source.endswith(DIETED)}


def report(args: argparse.Namespace) -> None:
    # Each compile's .time file is its record (a run stopped midway keeps those it finished); an unfinished
    # compile's (an empty .time) is left out.
    files: dict[str, dict[str, Any]] = {}
    for folder in [args.raw, *args.more]:  # a later run's folder (a repeat) names its compiles `<name>#<n>`
        for path in sorted(folder.glob("*.time")):
            if not path.read_text().strip():
                continue
            name = path.stem if folder == args.raw else f"{path.stem}#{[args.raw, *args.more].index(folder) + 1}"
            files[name] = _time(path)
            if path.with_suffix(".csv").is_file():
                files[name]["phases_s"] = split_phases.phase_seconds(path.with_suffix(".csv"))
    labels = sorted({n.split("__")[0] for n in files if not n.startswith("probe__")})
    tus = sorted({n.split("__")[1] for n in files if not n.startswith("probe__")})
    pairs: dict[str, Any] = {}
    if len(labels) == 2:
        base, new = ("v8", "v13") if set(labels) == {"v8", "v13"} else tuple(labels)
        for tu in tus:
            a, b = files.get(f"{base}__{tu}"), files.get(f"{new}__{tu}")
            if a and b and a["rc"] == 0 and b["rc"] == 0:
                pairs[tu] = {"cpu_s": [a["cpu_s"], b["cpu_s"]], "cpu_ratio": round(b["cpu_s"] / a["cpu_s"], 3),
                             "saved_cpu_s": round(a["cpu_s"] - b["cpu_s"], 1),
                             "peak_rss_gib": [a["peak_rss_gib"], b["peak_rss_gib"]]}
        total = [sum(p["cpu_s"][i] for p in pairs.values()) for i in (0, 1)]
        pairs["all"] = {"cpu_s": [round(total[0], 1), round(total[1], 1)],
                        "saved_cpu_s": round(total[0] - total[1], 1)}
    out: dict[str, Any] = {"issue": 71, "what": (__doc__ or "").splitlines()[0],
                           "raw": [str(r.resolve().relative_to(ROOT)) for r in [args.raw, *args.more]], "files": files, "pairs": pairs}
    if args.baseline_pack:
        # v8's own build (the recorder's rows of its build folder), against each v13 compile of the same TU here
        v8_rows = _recorder_rows(args.baseline_pack, args.baseline_key)
        out["v8_build"] = {"raw": str(args.baseline_pack.resolve().relative_to(ROOT)), "tus": v8_rows}
        def v13(tu: str, figure: str) -> list[float]:  # each finished v13 compile of `tu`, the repeats too
            return [f[figure] for n, f in sorted(files.items())
                    if n.startswith("v13__") and n.split("#")[0].endswith(f"__{tu}") and f["rc"] == 0]
        out["against_v8_build"] = {tu: {"cpu_s": [v8_rows[tu]["cpu_s"], *v13(tu, "cpu_s")],
                                        # v8: the recorder's peak of the compile's process tree; v13: /usr/bin/time's
                                        # largest process (cicc): not the same measure, the tree's is the larger
                                        "peak_gib": {"v8_tree": v8_rows[tu]["tree_peak_gib"],
                                                     "v13_largest_process": v13(tu, "peak_rss_gib")}}
                                   for tu in sorted(v8_rows)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(pairs, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("cmake", type=Path, help="a configured build's cmake folder (build.ninja)")
    r.add_argument("--target-dir", default="common_ops_sm100_build")
    r.add_argument("--tree", action="append", type=_pair, required=True, help="LABEL=DIR, a patched sgl-kernel folder")
    r.add_argument("--tu", action="append", required=True, help="a TU without .cu, e.g. csrc/gemm/fp8_gemm_kernel")
    r.add_argument("--probe", action="append", type=_pair, default=[], help="NAME=FILE, a header probe .cu")
    r.add_argument("--only-probes", action="store_true", help="compile the probes alone (the TUs were compiled)")
    r.add_argument("--keep-objects", type=Path, help="move each object here (kept out of raw/: binaries)")
    r.add_argument("--resume", action="store_true", help="skip the compiles a stopped run finished")
    r.add_argument("--parallel", type=int, default=2)
    r.add_argument("--nice", type=int, default=10)
    r.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("frontend")
    f.add_argument("cmake", type=Path, help="a configured build's cmake folder (build.ninja)")
    f.add_argument("--target-dir", default="common_ops_sm100_build")
    f.add_argument("--tree", type=Path, required=True, help="the patched sgl-kernel folder")
    f.add_argument("--tu", action="append", required=True)
    f.add_argument("--all-families", action="store_true", help="without 0005's pruning defines")
    f.add_argument("--nice", type=int, default=10)
    f.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("report")
    p.add_argument("raw", type=Path)
    p.add_argument("--more", action="append", type=Path, default=[], help="another run's folder (a repeat)")
    p.add_argument("--baseline-pack", type=Path, help="v8's build_one.sh pack: its own compiles of the dieted TUs")
    p.add_argument("--baseline-key", default="", help="that build's folder name (its key) in the recorder rows")
    p.add_argument("--out", type=Path, default=ROOT / "bench/header_diet/results/phases.json")
    args = parser.parse_args()
    {"run": run, "frontend": frontend, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
