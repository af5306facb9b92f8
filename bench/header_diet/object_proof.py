"""Issue 71 item 2, per TU: each dieted TU's object from v13's tree against the same TU's object of v8's build,
function by function (`cuobjdump -sass`, compared as `build-kernel prune-proof` compares libraries: the same
parser, normalisation and FP4 counts, build_kernel/stages/verify/prune_proof.py).

0012 changes the includes of four TUs, and adds two no-op lines (an `#ifndef` around torch/all.h that every other
TU passes) to utils.h and cutlass_gemm_caller.cuh; the four TUs are the ones whose device code could change. This
proves them without a whole v13 build; the whole-wheel proof is `prune-proof --across-tus` of a v13 build.

    python bench/header_diet/object_proof.py --pair NAME V13_OBJECT V8_OBJECT ... --out bench/header_diet/results/object-proof.json

`--count PATTERN` counts more opcodes as the FP4 ones are (9.0a has no FP4: `QGMMA`, its FP8 tensor core MMA).
`--functions DIR` writes each object's function list (`NAME.v13.tsv`, `NAME.v8.tsv`: arch, instructions, the
digest of the normalised SASS, name), the record kept in raw/ when the objects are too large to keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

from build_kernel.stages.verify.cubins import sass_lines
from build_kernel.stages.verify.prune_proof import Disassembly, compare, parse

FP4 = ("OMMA\\.SF\\.\\S*E2M1", "UTCOMMA\\S*\\.4X", "E2M1")  # nightly-cu130's [verify] fp4_sass


def instructions(dis: Disassembly) -> int:
    return sum(body.count for bodies in dis.functions.values() for body in bodies)


def opcodes(dis: Disassembly, patterns: list[str]) -> dict[str, int]:
    """Matches of each `--count` pattern in the normalised SASS of every function, per arch."""
    out: dict[str, int] = {}
    for (arch, _), bodies in dis.functions.items():
        for pattern in patterns:
            out[f"{arch}:{pattern}"] = out.get(f"{arch}:{pattern}", 0) + sum(
                len(re.findall(pattern, "\n".join(body.lines()))) for body in bodies)
    return dict(sorted(out.items()))


def function_list(dis: Disassembly) -> str:
    return "".join(f"{arch}\t{body.count}\t{body.digest.hex()}\t{name}\n"
                   for (arch, name), bodies in sorted(dis.functions.items()) for body in bodies)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pair", nargs=3, action="append", required=True, metavar=("NAME", "V13", "V8"))
    ap.add_argument("--functions", type=Path, help="write each object's function list here")
    ap.add_argument("--count", action="append", default=[], metavar="PATTERN",
                    help="also count this SASS pattern per arch (e.g. QGMMA at 9.0a, which has no FP4)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    tool = shutil.which("cuobjdump") or "cuobjdump"
    out = {}
    for name, new, old in args.pair:
        ours, theirs = (parse(sass_lines(Path(obj), tool, os.environ), FP4) for obj in (new, old))
        if args.functions:
            args.functions.mkdir(parents=True, exist_ok=True)
            for label, dis in (("v13", ours), ("v8", theirs)):
                (args.functions / f"{name}.{label}.tsv").write_text(function_list(dis))
        lib = compare(name, ours, theirs)
        out[name] = {"archs": lib.archs, "functions": [lib.functions_pruned, lib.functions_unpruned],
                     "instructions": [instructions(ours), instructions(theirs)],
                     "identical": lib.identical, "differing": [asdict(d) for d in lib.differing],
                     "missing": lib.missing, "only_in_v8": lib.removed_functions,
                     "fp4_v13": lib.fp4_pruned, "fp4_v8": lib.fp4_unpruned,
                     **({"counts_v13": opcodes(ours, args.count), "counts_v8": opcodes(theirs, args.count)}
                        if args.count else {}),
                     "same": not lib.differing and not lib.missing and not lib.removed_functions
                     and lib.fp4_pruned == lib.fp4_unpruned and opcodes(ours, args.count) == opcodes(theirs, args.count)}
    version = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    result = {"issue": 71, "what": (__doc__ or "").splitlines()[0], "passed": all(v["same"] for v in out.values()),
              "cuobjdump": version.splitlines()[-1], "tus": out}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: (v["identical"], v["functions"], v["same"]) for k, v in out.items()}))


if __name__ == "__main__":
    main()
