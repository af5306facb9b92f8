"""Which FA3 calls a pruned sgl-kernel runs, and the line it raises for the ones it left out (issue 42 item 3).

Run with an interpreter that has the wheel (and torch) on a 9.0 GPU: each call is one head-dim / dtype /
softcap combination through sgl_kernel.flash_attn.flash_attn_varlen_func, checked against torch's attention
where it runs. Prints one JSON object (the wheel's flash_ops_variants.json and one row per call).

    python bench/fa3_variants/probe_calls.py > probe.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
from needs import need

need("torch", "sgl_kernel", why="it calls the wheel's FA3 on a GPU",
     where="run it with the GPU host's interpreter that has the wheel installed (bench/gpu_host/README.md)")
import torch


def _call(d: int, dv: int, dtype: torch.dtype, softcap: float) -> dict[str, Any]:
    from sgl_kernel.flash_attn import flash_attn_varlen_func

    torch.manual_seed(0)
    n, heads = 64, 4
    q = torch.randn(n, heads, d, device="cuda").to(dtype)
    k = torch.randn(n, heads, d, device="cuda").to(dtype)
    v = torch.randn(n, heads, dv, device="cuda").to(dtype)
    cu = torch.tensor([0, n], dtype=torch.int32, device="cuda")
    row: dict[str, Any] = {"d": d, "dv": dv, "dtype": str(dtype).replace("torch.", ""), "softcap": softcap}
    try:
        out = flash_attn_varlen_func(q, k, v, cu, cu, n, n, causal=True, softcap=softcap)
        out = out[0] if isinstance(out, tuple) else out
    except Exception as exc:  # the outcome is the row: the line a user would see
        row.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
        return row
    torch.cuda.synchronize()
    ref = None
    if softcap == 0.0:
        qt, kt, vt = (x.float().transpose(0, 1) for x in (q, k, v))
        ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                                scale=(d ** -0.5)).transpose(0, 1)
    row.update(outcome="ran", max_abs_err=None if ref is None else float((out.float() - ref).abs().max()))
    return row


def main() -> int:
    from sgl_kernel import fa3_variants

    calls = [(64, 64, torch.bfloat16, 0.0), (128, 128, torch.bfloat16, 0.0), (256, 256, torch.bfloat16, 0.0),
             (128, 128, torch.float16, 0.0), (192, 128, torch.bfloat16, 0.0), (64, 64, torch.bfloat16, 15.0)]
    print(json.dumps({"variants": fa3_variants.built(), "gpu": torch.cuda.get_device_name(),
                      "calls": [_call(*c) for c in calls]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
