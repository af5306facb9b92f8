"""Issue 71 item 2, per TU: each dieted TU's object from v13's tree against the same TU's object of v8's build,
function by function (`cuobjdump -sass`, compared as `build-kernel prune-proof` compares libraries: the same
parser, normalisation and FP4 counts, build_kernel/stages/verify/prune_proof.py).

0012 changes the includes of four TUs, and adds two no-op lines (an `#ifndef` around torch/all.h that every other
TU passes) to utils.h and cutlass_gemm_caller.cuh; the four TUs are the ones whose device code could change. This
proves them without a whole v13 build; the whole-wheel proof is `prune-proof --across-tus` of a v13 build.

    python bench/header_diet/object_proof.py --pair NAME V13_OBJECT V8_OBJECT ... --out bench/header_diet/results/object-proof.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from build_kernel.stages.verify.cubins import sass_lines
from build_kernel.stages.verify.prune_proof import compare, parse

FP4 = ("OMMA\\.SF\\.\\S*E2M1", "UTCOMMA\\S*\\.4X", "E2M1")  # nightly-cu130's [verify] fp4_sass


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pair", nargs=3, action="append", required=True, metavar=("NAME", "V13", "V8"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    tool = shutil.which("cuobjdump") or "cuobjdump"
    out = {}
    for name, new, old in args.pair:
        lib = compare(name, parse(sass_lines(Path(new), tool, os.environ), FP4),
                      parse(sass_lines(Path(old), tool, os.environ), FP4))
        out[name] = {"archs": lib.archs, "functions": [lib.functions_pruned, lib.functions_unpruned],
                     "identical": lib.identical, "differing": [asdict(d) for d in lib.differing],
                     "missing": lib.missing, "only_in_v8": lib.removed_functions,
                     "fp4_v13": lib.fp4_pruned, "fp4_v8": lib.fp4_unpruned,
                     "same": not lib.differing and not lib.missing and not lib.removed_functions
                     and lib.fp4_pruned == lib.fp4_unpruned}
    result = {"issue": 71, "what": (__doc__ or "").splitlines()[0], "passed": all(v["same"] for v in out.values()),
              "tus": out}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: (v["identical"], v["functions"], v["same"]) for k, v in out.items()}))


if __name__ == "__main__":
    main()
