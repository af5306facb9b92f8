"""Where a cuBLAS GEMM under CUDA-graph capture fails: the host's torch alone, or after the wheel's kernels (issue 54).

sglang's piecewise CUDA graph died on the H200 in `cublasGemmEx` (CUBLAS_STATUS_EXECUTION_FAILED) while capturing
the 8,192-token shape of the tiny MoE. cuBLAS reports EXECUTION_FAILED when a kernel launch fails, its own or one
left pending by an earlier launch on the stream, so this probe separates the two. Each case runs in its own
process (a failed launch can poison the context) and prints one JSON line:

- `torch`: `F.linear` in bf16 with the tiny MoE's GEMM shapes (router gate 256 -> 8, QKV 256 -> 512, O and expert
  projections), eager then captured with `torch.cuda.graph` and replayed, M = 8192, 4096, 512, 1; no sgl_kernel;
- `torch+import`: the same after `import sgl_kernel`;
- `layer`: one graph with the wheel's ops around the router GEMM as sglang's Mixtral layer calls them
  (fused_add_rmsnorm, rmsnorm, the gate GEMM, topk_softmax, moe_align_block_size, silu_and_mul), M = 8192.

    python bench/serving/cublas_capture_probe.py > probe.jsonl       # every case, each in a child process
    python bench/serving/cublas_capture_probe.py --case torch        # one case, in this process
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from typing import Any

CASES = ("torch", "torch+import", "layer")
TOKENS = (8192, 4096, 512, 1)
# (in, out) of the tiny MoE's bf16 GEMMs (hidden 256, 4 q + 2 kv heads of 64, 8 experts, intermediate 256).
SHAPES = ((256, 8), (256, 512), (256, 256), (256, 1000))


def _gemm(m: int, k: int, n: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    eager = F.linear(x, w)
    torch.cuda.synchronize()
    row: dict[str, Any] = {"m": m, "k": k, "n": n}
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            F.linear(x, w)  # warm-up on the side stream, as torch.cuda.graph's docs ask
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            out = F.linear(x, w)
        g.replay()
        torch.cuda.synchronize()
        row["outcome"] = "ok"
        row["max_abs_diff"] = float((out.float() - eager.float()).abs().max())
    except Exception as exc:  # the failure is the finding
        row["outcome"] = "error"
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    return row


def _layer(m: int) -> dict[str, Any]:
    import sgl_kernel
    import torch
    import torch.nn.functional as F

    hidden, experts, top_k, inter = 256, 8, 2, 256
    x = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16)
    res = torch.randn_like(x)
    nw = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
    gate = torch.randn(experts, hidden, device="cuda", dtype=torch.bfloat16)
    up = torch.randn(m, 2 * inter, device="cuda", dtype=torch.bfloat16)
    topk_w = torch.empty(m, top_k, device="cuda", dtype=torch.float32)
    topk_ids = torch.empty(m, top_k, device="cuda", dtype=torch.int32)
    block = 64
    max_padded = m * top_k + experts * (block - 1)
    sorted_ids = torch.empty(max_padded, device="cuda", dtype=torch.int32)
    expert_ids = torch.empty((max_padded + block - 1) // block, device="cuda", dtype=torch.int32)
    post_pad = torch.empty(1, device="cuda", dtype=torch.int32)
    cumsum = torch.empty(experts + 2, device="cuda", dtype=torch.int32)
    steps: list[str] = []

    def body() -> torch.Tensor:
        steps.clear()
        sgl_kernel.fused_add_rmsnorm(x, res, nw)
        steps.append("fused_add_rmsnorm")
        h = sgl_kernel.rmsnorm(x, nw)
        steps.append("rmsnorm")
        logits = F.linear(h, gate)
        steps.append("gate GEMM (cuBLAS)")
        sgl_kernel.topk_softmax(topk_w, topk_ids, logits.float(), True)
        steps.append("topk_softmax")
        sgl_kernel.moe_align_block_size(topk_ids, experts, block, sorted_ids, expert_ids, post_pad, cumsum)
        steps.append("moe_align_block_size")
        out = sgl_kernel.silu_and_mul(up)
        steps.append("silu_and_mul")
        o = F.linear(out, gate.new_empty(hidden, inter).normal_())
        steps.append("down GEMM (cuBLAS)")
        return o

    row: dict[str, Any] = {"m": m}
    try:
        body()
        torch.cuda.synchronize()
        row["eager"] = "ok"
    except Exception as exc:
        row["eager"] = f"error after {steps[-1] if steps else 'nothing'}: {type(exc).__name__}: {str(exc)[:300]}"
        return row
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            body()
        g.replay()
        torch.cuda.synchronize()
        row["captured"] = "ok"
    except Exception as exc:
        row["captured"] = (f"error after {steps[-1] if steps else 'nothing'}: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:300]}")
    return row


def run_case(case: str) -> list[dict[str, Any]]:
    import torch

    rows: list[dict[str, Any]] = []
    if case == "layer":
        for m in TOKENS:
            rows.append({"case": case, **_layer(m)})
        return rows
    if case == "torch+import":
        import sgl_kernel  # noqa: F401  (its libraries loaded, its ops registered)
    for m in TOKENS:
        for k, n in SHAPES:
            rows.append({"case": case, **_gemm(m, k, n)})
    rows.append({"case": case, "torch": torch.__version__, "cuda": torch.version.cuda,
                 "cublas": torch.backends.cuda.preferred_blas_library().name})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, help="one case in this process (default: each in a child)")
    args = ap.parse_args()
    if args.case:
        try:
            for row in run_case(args.case):
                print(json.dumps(row), flush=True)
        except Exception:
            print(json.dumps({"case": args.case, "crashed": traceback.format_exc()[-600:]}), flush=True)
            return 1
        return 0
    for case in CASES:
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, __file__, "--case", case], capture_output=True, text=True, timeout=300,
                              check=False)
        sys.stdout.write(done.stdout)
        print(json.dumps({"case": case, "rc": done.returncode, "seconds": round(time.monotonic() - t0, 1),
                          "stderr_tail": done.stderr[-400:]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
