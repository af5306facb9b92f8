"""Issue 56: where a split TU's time goes, phase by phase (`nvcc --time`), whole against its parts.

A 0011 part file compiles the whole TU's text with `SGL_KERNEL_SPLIT_PART` set, so its parts can be
compiled beside the whole from the same source folder with build.ninja's own command (the v11 build's
folder: the unsplit TU is still there, unchanged from v8's). Each compile runs alone on its core, two
at a time (`--parallel`), its phases written by nvcc --time; `report` sums them per file.

    python bench/split_tus/phases.py run <build>/cmake --target-dir common_ops_sm100_build \
        --tu csrc/gemm/nvfp4_scaled_mm_kernels --tu csrc/gemm/fp8_gemm_kernel --out bench/split_tus/raw/<dir>/phases
    python bench/split_tus/phases.py report bench/split_tus/raw/<dir>/phases --out bench/split_tus/results/split-phases.json
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("", "_part1", "_part2")


def nvcc_command(cmake: Path, target_dir: str, source: str, *, part: str = "_part1",
                 drop: tuple[str, ...] = ("-MD", "-c")) -> list[str]:
    """build.ninja's nvcc line for `source{part}`'s object (a split part's by default; header_diet's phases.py asks
    for the whole TU's), without the recorder launcher, -o/-MF/-MT and their values, the words in `drop` and the
    source itself."""
    obj = f"CMakeFiles/{target_dir}.dir/{source}{part}.cu.o"
    listed = subprocess.run(["ninja", "-C", str(cmake), "-t", "commands", obj], capture_output=True, text=True,
                            check=True)
    line = listed.stdout.strip().splitlines()[-1]
    args = shlex.split(line[line.index(" -- ") + 4:] if " -- " in line else line)
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-o", "-MF", "-MT"):
            skip = True
        elif arg not in drop and not arg.endswith(".cu"):
            out.append(arg)
    return out


def run(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    src = (args.cmake / ".." / "src").resolve()
    commands = {tu: nvcc_command(args.cmake, args.target_dir, tu) for tu in args.tu}
    # (name, the TU whose command compiles it, the source): each TU and its parts, then the probes (e.g. a TU of
    # only the headers a split part includes) with the first TU's command.
    sources = [] if args.only_sources else [(f"{Path(tu).name}{v}", tu, src / f"{tu}{v}.cu")
                                            for tu in args.tu for v in VARIANTS]
    sources += [(extra.stem, args.tu[0], extra.resolve()) for extra in args.source]
    jobs = [(name, [*commands[tu], "--time", str(args.out / f"{name}.csv"), "-c", str(source),
                    "-o", str(args.out / f"{name}.o")]) for name, tu, source in sources]

    def one(job: tuple[str, list[str]]) -> dict[str, Any]:
        name, cmd = job
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        (args.out / f"{name}.o").unlink(missing_ok=True)
        return {"file": name, "rc": proc.returncode, "wall_s": round(time.monotonic() - start, 1),
                "stderr_tail": proc.stderr[-400:]}

    with ThreadPoolExecutor(args.parallel) as pool:
        done = list(pool.map(one, jobs))
    runs = args.out / "runs.json"  # a later run (header probes) adds to the earlier one's
    earlier = [r for r in json.loads(runs.read_text()) if r["file"] not in {d["file"] for d in done}] \
        if runs.is_file() else []
    runs.write_text(json.dumps(earlier + done, indent=1) + "\n")
    print(json.dumps(done, indent=1))


def phase_seconds(path: Path) -> dict[str, float]:
    """nvcc --time's CSV (`source file name , phase name , ... , metric , unit`: ms per phase), seconds by phase."""
    out: dict[str, float] = {}
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh, skipinitialspace=True):
            row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
            name, value = row.get("phase name", ""), row.get("metric", "")
            if name and value and row.get("unit") == "ms":
                out[name] = round(out.get(name, 0.0) + float(value) / 1000.0, 1)
    return out


def report(args: argparse.Namespace) -> None:
    runs = {r["file"]: r for r in json.loads((args.raw / "runs.json").read_text())}
    files = {}
    for name, r in runs.items():
        phases = phase_seconds(args.raw / f"{name}.csv") if (args.raw / f"{name}.csv").is_file() else {}
        files[name] = {"rc": r["rc"], "wall_s": r["wall_s"], "phases_s": phases}
    tus = {}
    for name in files:
        if not name.endswith(("_part1", "_part2")):
            parts = [files[f"{name}{v}"]["wall_s"] for v in VARIANTS[1:] if f"{name}{v}" in files]
            if len(parts) == len(VARIANTS) - 1:
                whole = files[name]["wall_s"]
                tus[name] = {"whole_s": whole, "parts_s": parts, "parts_over_whole": round(sum(parts) / whole, 2),
                             "longest_part_over_whole": round(max(parts) / whole, 2)}
    out = {"issue": 56, "what": __doc__.splitlines()[0], "raw": str(args.raw.resolve().relative_to(ROOT)),
           "files": files, "tus": tus}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(tus, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("cmake", type=Path, help="the v11 build's cmake folder (build.ninja)")
    r.add_argument("--target-dir", default="common_ops_sm100_build")
    r.add_argument("--tu", action="append", required=True, help="a split TU without .cu, e.g. csrc/gemm/fp8_gemm_kernel")
    r.add_argument("--source", action="append", type=Path, default=[],
                   help="another .cu compiled with the first TU's command (a header probe)")
    r.add_argument("--only-sources", action="store_true", help="compile only the --source files")
    r.add_argument("--parallel", type=int, default=2)
    r.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("report")
    p.add_argument("raw", type=Path)
    p.add_argument("--out", type=Path, default=ROOT / "bench/split_tus/results/split-phases.json")
    args = parser.parse_args()
    (run if args.cmd == "run" else report)(args)


if __name__ == "__main__":
    main()
