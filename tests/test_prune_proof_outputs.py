"""prune-proof's verdict with a GPU run's bit-for-bit record (issue 70 item 6): "different code, same outputs on N
cases" apart from "identical", and never a pass by itself. The proofs are the proof module's own dataclasses, as
`prove` returns them (the slow tests in test_prune_proof.py make real ones from real compiles); the record is the
JSON the GPU script writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from build_kernel.errors import VerifyError
from build_kernel.stages.verify import prune_proof_outputs as outputs
from build_kernel.stages.verify.prune_proof import Difference, LibraryProof, Proof

BF16 = "_ZN7cutlass13device_kernelI24gemm_sm90_fp8_bf16EEvNT_6ParamsE"
HALF = "_ZN7cutlass13device_kernelI24gemm_sm90_fp8_halfEEvNT_6ParamsE"


def _proof(*differing: str) -> Proof:
    lib = LibraryProof("sgl_kernel/sm90/common_ops.abi3.so", ["sm_90a"], 1062, 1195, 1060,
                       differing=[Difference("sm_90a", f, "instruction 7: pruned `A`, unpruned `B`") for f in differing])
    failures = [f"{lib.path}: {len(differing)} function(s) have other SASS than in the unpruned library (first: x)"] \
        if differing else []
    return Proof("pruned.whl", "unpruned.whl", [lib], failures)


def _row(function: str, cases: int, equal: int) -> outputs.Compared:
    return outputs.Compared("sm_90a", function, cases, equal)


def test_identical_code_is_identical_whatever_the_record() -> None:
    assert outputs.judge(_proof(), [])["verdict"] == "identical"


def test_every_difference_with_equal_bits_is_its_own_verdict_and_still_no_pass() -> None:
    judged = outputs.judge(_proof(BF16, HALF), [_row(BF16, 100, 100), _row(HALF, 96, 96)])
    assert judged["verdict"] == "different code, same outputs on 96 cases"
    assert judged["passed"] is False and judged["not_shown_same"] == []
    assert [s["cases"] for s in judged["same_outputs"]] == [100, 96]


@pytest.mark.parametrize(("rows", "why"), [
    ([(BF16, 100, 100)], f"sm_90a {HALF} (not run on the GPU)"),
    ([(BF16, 100, 100), (HALF, 96, 95)], f"sm_90a {HALF} (95 of 96 cases equal)"),
    ([(BF16, 100, 100), (HALF, 0, 0)], f"sm_90a {HALF} (0 of 0 cases equal)"),
])
def test_a_difference_not_run_or_not_equal_fails(rows: list[tuple[str, int, int]], why: str) -> None:
    judged = outputs.judge(_proof(BF16, HALF), [_row(*r) for r in rows])
    assert (judged["verdict"], judged["not_shown_same"]) == ("failed", [why])


def test_another_failure_is_no_matter_of_outputs() -> None:
    proof = _proof(BF16)
    proof.failures.append("sgl_kernel/sm90/common_ops.abi3.so: 1 function(s) of the pruned library are not in the "
                          "unpruned one (first: sm_90a f)")
    assert outputs.judge(proof, [_row(BF16, 10, 10)])["verdict"] == "failed"


def test_a_record_that_is_not_one_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"cases": 3}))
    with pytest.raises(VerifyError, match="no record of outputs compared on the GPU") as caught:
        outputs.load(bad)
    assert "fp8_kernels_bitwise.py" in str(caught.value) and caught.value.exit_code == 7
    good = tmp_path / "g.json"
    good.write_text(json.dumps({"functions": [{"arch": "sm_90a", "function": BF16, "cases": 4, "bitwise_equal": 4}]}))
    assert outputs.load(good) == [_row(BF16, 4, 4)]


def test_the_gpu_scripts_comparison_counts_only_cases_where_both_wheels_ran_the_function(tmp_path: Path) -> None:
    """bench/pruning/fp8_kernels_bitwise.py compare on two runs as its `run` writes them (the GPU part stood in by
    the runs' JSON: no GPU here); the names are demangled by the real c++filt, as the profiler shows kernels."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    mangled = "_ZN7cutlass13device_kernelIiEEvT_"
    kernel = "void cutlass::device_kernel<int>(int)"

    def run(label: str, outputs: list[str], kernels: list[list[str]]) -> Path:
        rows = [{"M": 1, "inputs_sha256": f"in{i}", "output_sha256": o, "kernels": k}
                for i, (o, k) in enumerate(zip(outputs, kernels, strict=True))]
        path = tmp_path / f"{label}.json"
        path.write_text(json.dumps({"label": label, "gpu": "H100", "cases": rows}))
        return path

    ours = run("pruned", ["a", "b", "c"], [[kernel], [kernel], ["other"]])
    theirs = run("unpruned", ["a", "x", "c"], [[kernel], [kernel], ["other"]])
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps({"libraries": [{"differing": [{"arch": "sm_90a", "function": mangled}]}]}))
    out = tmp_path / "same.json"
    subprocess.run([sys.executable, str(REPO_ROOT / "bench/pruning/fp8_kernels_bitwise.py"), "compare", str(ours),
                    str(theirs), "--proof", str(proof), "--out", str(out)], check=True, capture_output=True)
    record = json.loads(out.read_text())
    assert record["functions"] == [{"arch": "sm_90a", "function": mangled, "demangled": "void cutlass::device_kernel<int>",
                                    "cases": 2, "bitwise_equal": 1}]
    assert outputs.judge(_proof(mangled), outputs.load(out))["verdict"] == "failed"  # 1 of 2: no same-outputs verdict
