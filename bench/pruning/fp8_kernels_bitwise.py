"""The 9.0a FP8 GEMM kernels whose SASS differs between the pruned and unpruned wheels, run on the GPU and compared
bit for bit (issue 70 item 6).

prune-proof found 2 functions of fp8_gemm_kernel.cu with other SASS at 9.0a (cutlass_3x_gemm_sm90_fp8 with a bias
epilogue, bf16 and fp16 out, 128x128x128 tiles, 2x1x1 cluster: prune_context.py shows cicc compiles them otherwise in
the smaller TU). Whether they compute the same is a GPU question: `run` calls sgl_kernel's fp8_scaled_mm (the op
those kernels serve) over upstream's test_fp8_gemm.py grid (M, N, K, bias, out dtype: 500 cases) in one wheel's
environment, on inputs drawn from a per-case seed, and keeps per case the sha256 of the inputs and of the output's
bytes and the CUDA kernels the call launched (torch.profiler); `compare` sets two such runs side by side and writes
the record `build-kernel prune-proof --same-outputs` reads: per differing function, the cases in which both wheels
launched it and how many gave identical bits.

    python fp8_kernels_bitwise.py run --label pruned --out pruned.json          # with the pruned wheel importable
    python fp8_kernels_bitwise.py compare pruned.json unpruned.json --proof PROOF.json --out same-outputs.json
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# upstream's test_fp8_gemm.py at 6ffc74ef: its parametrize grid, in its order
GRID = {"M": [1, 128, 512, 1024, 4096], "N": [16, 128, 512, 1024, 4096], "K": [512, 1024, 4096, 8192, 16384],
        "with_bias": [True, False], "out_dtype": ["bfloat16", "float16"]}


def cases() -> list[dict[str, Any]]:
    keys = list(GRID)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*GRID.values())]


def _sha(t: Any) -> str:
    """The sha256 of a tensor's bytes (bit for bit: -0.0 and NaN payloads count)."""
    import torch

    return hashlib.sha256(t.contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def run(label: str) -> dict[str, Any]:
    import sgl_kernel
    import torch
    from torch.profiler import ProfilerActivity, profile

    fp8 = torch.finfo(torch.float8_e4m3fn)
    rows = []
    for i, case in enumerate(cases()):
        m, n, k, dtype = case["M"], case["N"], case["K"], getattr(torch, case["out_dtype"])
        gen = torch.Generator(device="cuda").manual_seed(i)  # the same inputs in both wheels' processes
        a = ((torch.rand(m, k, generator=gen, device="cuda") - 0.5) * 2 * fp8.max).clamp(fp8.min, fp8.max)
        b = ((torch.rand(n, k, generator=gen, device="cuda") - 0.5) * 2 * fp8.max).clamp(fp8.min, fp8.max)
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
        scale_a = torch.randn((m,), generator=gen, device="cuda") * 0.001
        scale_b = torch.randn((n,), generator=gen, device="cuda") * 0.001
        bias = torch.randn((n,), generator=gen, device="cuda").to(dtype) if case["with_bias"] else None
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = sgl_kernel.fp8_scaled_mm(a, b, scale_a, scale_b, dtype, bias)
            torch.cuda.synchronize()
        kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        inputs = hashlib.sha256("".join(_sha(t) for t in (a, b, scale_a, scale_b) + ((bias,) if bias is not None
                                                                                      else ())).encode()).hexdigest()
        rows.append({**case, "inputs_sha256": inputs, "output_sha256": _sha(out), "kernels": kernels})
    return {"label": label, "sgl_kernel": sgl_kernel.__file__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(), "cases": rows}


def demangle(names: list[str]) -> list[str]:
    """The proof's mangled names as the profiler shows kernels (c++filt), without the parameter list."""
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return [line.split("(")[0].strip() if "(" in line else line.strip() for line in out.splitlines()]


def compare(ours: dict[str, Any], theirs: dict[str, Any], differing: list[tuple[str, str]]) -> dict[str, Any]:
    """Per differing (arch, mangled name): the cases where both runs launched it, and how many gave the same bits."""
    if [c["inputs_sha256"] for c in ours["cases"]] != [c["inputs_sha256"] for c in theirs["cases"]]:
        raise SystemExit("fp8_kernels_bitwise: the two runs drew other inputs: run both on one host and torch")
    readable = demangle([name for _, name in differing])
    functions = []
    for (arch, name), shown in zip(differing, readable, strict=True):
        both = [(a, b) for a, b in zip(ours["cases"], theirs["cases"], strict=True)
                if any(k.startswith(shown) for k in a["kernels"]) and any(k.startswith(shown) for k in b["kernels"])]
        functions.append({"arch": arch, "function": name, "demangled": shown, "cases": len(both),
                          "bitwise_equal": sum(1 for a, b in both if a["output_sha256"] == b["output_sha256"])})
    return {"what": __doc__.splitlines()[0], "runs": [ours["label"], theirs["label"]], "gpu": ours.get("gpu"),
            "cases_run": len(ours["cases"]),
            "cases_bitwise_equal_all_kernels": sum(1 for a, b in zip(ours["cases"], theirs["cases"], strict=True)
                                                   if a["output_sha256"] == b["output_sha256"]),
            "functions": functions}


def differing_functions(proof: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["arch"], d["function"]) for lib in proof["libraries"] for d in lib["differing"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--label", required=True)
    r.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("ours", type=Path)
    c.add_argument("theirs", type=Path)
    c.add_argument("--proof", type=Path, required=True, help="prune-proof --json of the pair")
    c.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.cmd == "run":
        args.out.write_text(json.dumps(run(args.label), indent=1) + "\n")
    else:
        result = compare(json.loads(args.ours.read_text()), json.loads(args.theirs.read_text()),
                         differing_functions(json.loads(args.proof.read_text())))
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        for f in result["functions"]:
            print(f"{f['demangled'][:120]}: {f['bitwise_equal']} of {f['cases']} cases bit-identical")
    print(args.out)


if __name__ == "__main__":
    sys.exit(main())
