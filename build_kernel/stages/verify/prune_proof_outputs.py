"""Functions a prune proof found with other SASS, run on a GPU and compared bit for bit (issue 70 item 6).

Other SASS is not other behaviour: cicc may compile a kernel differently in a smaller translation unit
(bench/pruning/prune_context.py). A run on the GPU can show that both builds' versions of such a function give the
same bits on N inputs (bench/pruning/fp8_kernels_bitwise.py writes that record). The proof then says so, as a
verdict of its own, "different code, same outputs on N cases", apart from "identical": it is evidence on N cases,
not a proof, so it never makes the proof pass by itself (the differing functions stay failures, exit 7).

The record (JSON): {"functions": [{"arch": "sm_90a", "function": MANGLED, "cases": N, "bitwise_equal": M}, ...]}:
per function, the cases in which the GPU ran it in both wheels, and how many of them gave identical bits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_kernel.errors import VerifyError
from build_kernel.stages.verify.prune_proof import Proof

IDENTICAL = "identical"
SAME_OUTPUTS = "different code, same outputs on {n} cases"
FAILED = "failed"


@dataclass(frozen=True)
class Compared:
    arch: str
    function: str
    cases: int  # inputs on which both wheels ran this function
    bitwise_equal: int  # of them, with identical output bits


def load(path: Path) -> list[Compared]:
    """The GPU run's record; a one-line error naming the problem and the fix."""
    try:
        data: Any = json.loads(path.read_text())
        rows = data["functions"]
        return [Compared(str(r["arch"]), str(r["function"]), int(r["cases"]), int(r["bitwise_equal"])) for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VerifyError(f"{path}: no record of outputs compared on the GPU ({type(exc).__name__}: {exc})",
                          hint="give the JSON bench/pruning/fp8_kernels_bitwise.py compare writes "
                               '({"functions": [{"arch", "function", "cases", "bitwise_equal"}]})') from exc


def judge(proof: Proof, compared: list[Compared]) -> dict[str, Any]:
    """The proof's verdict with the GPU's comparison: which differing functions gave the same bits, on how many
    cases; `verdict` is IDENTICAL, SAME_OUTPUTS (every difference covered, every case equal) or FAILED."""
    by_key = {(c.arch, c.function): c for c in compared}
    covered: list[dict[str, Any]] = []
    uncovered: list[str] = []
    for lib in proof.libraries:
        for d in lib.differing:
            c = by_key.get((d.arch, d.function))
            if c is not None and c.cases > 0 and c.bitwise_equal == c.cases:
                covered.append({"library": lib.path, "arch": d.arch, "function": d.function, "cases": c.cases})
            else:
                uncovered.append(f"{d.arch} {d.function}" + (f" ({c.bitwise_equal} of {c.cases} cases equal)" if c
                                                            else " (not run on the GPU)"))
    # Anything else the proof found (a missing function, another library, FP4 counts) is no matter of outputs.
    other = [f for f in proof.failures if "function(s) have other SASS" not in f]
    if not proof.failures:
        verdict = IDENTICAL
    elif covered and not uncovered and not other:
        verdict = SAME_OUTPUTS.format(n=min(c["cases"] for c in covered))
    else:
        verdict = FAILED
    return {"verdict": verdict, "passed": proof.passed, "same_outputs": covered, "not_shown_same": uncovered}
