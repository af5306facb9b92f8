"""Per-package kernel checks a recipe names as `[verify] gpu_check` (`module:function`): run on a real GPU
by `verify`, in the clean import process. They live here, not in the verify stage, which names no package.

Each check returns a dict with `ok`, the measured error and its tolerance. The
references are computed here, in float64, from the op's documented definition, not
taken from the package under test.
"""

from __future__ import annotations

from typing import Any

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# An element is off by at most half an e2m1 step (1.0 between 4 and 6, of a block max
# of 6) plus e4m3 scale rounding (2^-4 relative): 1/6 + 1/16 < 0.25 of the block amax.
FP4_BLOCK_TOLERANCE = 0.25


def _dequant_nvfp4(packed: Any, scales: Any, global_scale: float, torch: Any) -> Any:
    """Two e2m1 codes per byte (low nibble first), one e4m3 scale per 16 values."""
    table = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float64)
    p = packed.cpu().to(torch.int64)
    codes = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1)
    values = table[codes]
    block_scale = scales.cpu().view(torch.float8_e4m3fn).to(torch.float64)
    return values * block_scale.repeat_interleave(16, dim=1) / global_scale


def minikernel_nvfp4() -> dict[str, Any]:
    """scaled_fp4_quant on random inputs vs a float64 reference, per 16-value block."""
    import minikernel  # noqa: F401  (loads the op library)
    import torch

    worst, rows = 0.0, []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        gen = torch.Generator(device="cpu").manual_seed(1234)
        x = (torch.randn(128, 512, generator=gen, dtype=torch.float64) * 4).to(dtype)
        x64 = x.to(torch.float64)
        global_scale = float(448.0 * 6.0 / x64.abs().max())
        packed, scales = torch.ops.minikernel.scaled_fp4_quant(
            x.cuda(), torch.tensor([global_scale], dtype=torch.float32, device="cuda"))
        torch.cuda.synchronize()
        deq = _dequant_nvfp4(packed, scales, global_scale, torch)
        blocks = x64.reshape(x64.shape[0], -1, 16)
        err = (deq.reshape_as(blocks) - blocks).abs().amax(dim=-1)
        amax = blocks.abs().amax(dim=-1).clamp_min(1e-30)
        rel = float((err / amax).max())
        worst = max(worst, rel)
        rows.append({"dtype": str(dtype).replace("torch.", ""), "max_block_rel_err": round(rel, 5)})
    return {"check": "nvfp4 quantize vs float64 reference", "device": torch.cuda.get_device_name(),
            "max_block_rel_err": round(worst, 5), "tolerance": FP4_BLOCK_TOLERANCE,
            "ok": worst <= FP4_BLOCK_TOLERANCE, "by_dtype": rows}


def sgl_kernel_rmsnorm_silu() -> dict[str, Any]:
    """sgl_kernel's rmsnorm and silu_and_mul in bf16 vs float64 references (any arch the wheel holds)."""
    import sgl_kernel
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(64, 4096, generator=gen, dtype=torch.float64)
    w = torch.rand(4096, generator=gen, dtype=torch.float64) + 0.5
    eps = 1e-6
    ref_norm = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w
    got_norm = sgl_kernel.rmsnorm(x.to(torch.bfloat16).cuda(), w.to(torch.bfloat16).cuda(), eps)
    gate, up = x[:, :2048], x[:, 2048:]
    ref_silu = gate / (1 + torch.exp(-gate)) * up
    got_silu = sgl_kernel.silu_and_mul(x.to(torch.bfloat16).cuda())
    torch.cuda.synchronize()
    # bf16 keeps 8 bits of mantissa: inputs and outputs rounded, 2^-7 relative each, with room.
    tolerance = 0.05
    errs = {name: float(((got.cpu().to(torch.float64) - ref).abs() / ref.abs().clamp_min(1.0)).max())
            for name, got, ref in (("rmsnorm", got_norm, ref_norm), ("silu_and_mul", got_silu, ref_silu))}
    return {"check": "rmsnorm, silu_and_mul (bf16) vs float64 references", "device": torch.cuda.get_device_name(),
            "max_rel_err": {k: round(v, 5) for k, v in errs.items()}, "tolerance": tolerance,
            "ok": all(v <= tolerance for v in errs.values())}
