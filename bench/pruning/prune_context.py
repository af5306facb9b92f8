"""Why a prune-proof found functions with other SASS: the pruning, or the TU they share with pruned kernels?

`prune-proof` of the 0.4.3 9.0a pair (series v12 against v12-unpruned) found 2 of 1,062 sm90 functions with other
SASS: two SM90 fp8 GEMM kernels of `fp8_gemm_kernel.cu`, whose source the pruning does not touch. This recompiles the
pruned build's own command for one object with every GPU family enabled (`-DSGL_KERNEL_ARCH_PRUNED=1` and the
`-DSGL_ARCH_*` defines dropped: the arch-prune header then turns every branch on, as upstream's sources have them)
and compares each differing function's normalised SASS (prune_proof's own normalisation) in three objects: the
pruned build's, the unpruned build's and this one. all-families = unpruned != pruned says the code around the kernel
(the other families' kernels cicc compiles into the same module) changed its compilation, not the patch's header or
a changed line of its source.

    python bench/pruning/prune_context.py --pruned-build PRUNED/cmake --unpruned-build UNPRUNED/cmake \
        --object CMakeFiles/common_ops_sm90_build.dir/csrc/gemm/fp8_gemm_kernel.cu.o \
        --proof bench/arch_builds/raw/h100-2026-12-06e/h43u-sm90a-prune-proof.json --out DIR

Writes DIR/context.json (per function: the three digests, the verdict) and DIR/compile.log (/usr/bin/time -v).
Needs the pruned build's folder with its sources (the build-kernel cache) and nvcc: minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from build_kernel.stages.verify import cubins, prune_proof

# The pruning's defines (patches/*/0005-prune-arch-dispatch.patch and the miniature's 0006): `<PREFIX>ARCH_PRUNED=1`
# and one `<PREFIX>_ARCH_SM<family>=1` per family kept (sgl-kernel's SGL_KERNEL_/SGL_, the miniature's MINIKERNEL_).
# Without them the arch-prune header turns every family on; `<PREFIX>ARCHS="sm_90a"` (the message's text) stays.
PRUNING = re.compile(r"^-D\w*ARCH_PRUNED=1$|^-D\w*_ARCH_SM\w+=1$")

THE_TU = "the TU's other kernels: all families = unpruned != pruned"
NOT_THE_TU = "not explained by the TU: all families != unpruned"
SAME = "pruned = unpruned here"
PRUNED_AWAY = "not in the pruned object: pruned away"


def all_families_command(build: Path, obj: str, out: Path) -> list[str]:
    """The pruned build's compile of `obj` (ninja's own command, the recorder's launcher dropped), every family on."""
    ninja = shutil.which("ninja", path=str(Path(sys.executable).parent)) or "ninja"  # the venv's, where it has one
    line = subprocess.run([ninja, "-t", "commands", obj], cwd=build, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    argv = shlex.split(line)
    argv = argv[argv.index("--") + 1:] if "--" in argv else argv
    argv = [a for a in argv if not PRUNING.match(a)]
    argv[argv.index("-o") + 1] = str(out)
    return argv


def verdict(d: dict[str, str | None]) -> str:
    """What the three digests of one function (pruned, unpruned, all_families) say."""
    if d["pruned"] is None and d["unpruned"] is not None:
        return PRUNED_AWAY
    if d["all_families"] == d["unpruned"] != d["pruned"]:
        return THE_TU
    if d["all_families"] != d["unpruned"]:
        return NOT_THE_TU
    return SAME


def compare(objs: dict[str, Path], names: list[str], tool: str) -> list[dict[str, Any]]:
    """Per function: its normalised-SASS digest in each object (None where absent) and the verdict."""
    seen = {k: digests(p, names, tool) for k, p in objs.items()}
    rows: list[dict[str, Any]] = []
    for n in names:
        d = {k: seen[k][n] for k in objs}
        rows.append({"function": n, "digests": d, "verdict": verdict(d)})
    return rows


def digests(obj: Path, names: list[str], tool: str) -> dict[str, str | None]:
    # Named as the proof names them (it ran --across-tus: the TU's own name normalised away).
    found = prune_proof.parse(cubins.sass_lines(obj, tool, os.environ), (), across_tus=True)
    by_name = {name: bodies[0].digest.hex() for (_, name), bodies in found.functions.items()}
    return {n: by_name.get(n) for n in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pruned-build", type=Path, required=True, help="the pruned build's CMake folder")
    ap.add_argument("--unpruned-build", type=Path, required=True, help="the unpruned build's CMake folder")
    ap.add_argument("--object", required=True, help="the object, relative to both CMake folders")
    ap.add_argument("--proof", type=Path, required=True, help="the prune-proof JSON naming the differing functions")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    proof = json.loads(args.proof.read_text())
    names = sorted({d["function"] for lib in proof["libraries"] for d in lib["differing"]})
    if not names:
        ap.error(f"{args.proof} names no differing function: nothing to explain")
    args.out.mkdir(parents=True, exist_ok=True)
    rebuilt = args.out / "all-families.o"
    argv = all_families_command(args.pruned_build, args.object, rebuilt)
    with open(args.out / "compile.log", "w") as log:
        rc = subprocess.run(["/usr/bin/time", "-v", *argv], check=False, cwd=args.pruned_build, stdout=log,
                            stderr=log).returncode
    if rc:
        sys.exit(f"the all-families compile failed (rc {rc}): see {args.out / 'compile.log'}")
    tool = cubins.cuobjdump(os.environ)
    objs = {"pruned": args.pruned_build / args.object, "unpruned": args.unpruned_build / args.object,
            "all_families": rebuilt}
    rows = compare(objs, names, tool)
    out = {"what": __doc__.splitlines()[0], "object": args.object, "proof": str(args.proof),
           "command": shlex.join(argv), "functions": rows}
    (args.out / "context.json").write_text(json.dumps(out, indent=1) + "\n")
    print(args.out / "context.json")


if __name__ == "__main__":
    main()
