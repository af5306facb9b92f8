"""Block-wise FP8 (e4m3) weights as DeepSeek-V3 and Qwen3 FP8 checkpoints store them, and SGLang's `fp8` loader reads.

A linear layer's weight W (out N x in K) becomes `weight` (float8_e4m3fn, N x K) and `weight_scale_inv` (float32,
ceil(N/128) x ceil(K/128)): one scale per 128x128 block, the block's largest |w| over 448 (e4m3's largest
finite value), so W ~= weight * scale_inv block by block (the name is DeepSeek's: the inverse of the scale
that quantized). Partial blocks at the edges are scaled by their own largest value.

Rounding bound, per element: e4m3 keeps 3 mantissa bits, so a normal value is off by at most 2^-4 of
itself; below e4m3's smallest normal (2^-6 in quantized units) the spacing is 2^-9, so at most 2^-10 x the
block's scale. Hence |w - dequant(w)| <= |w| / 16 + scale_inv / 1024 (tests/test_moe_checkpoint.py holds
it to that).
"""

from __future__ import annotations

from typing import Any

BLOCK = (128, 128)
E4M3_MAX = 448.0
# The config a block-FP8 checkpoint carries (DeepSeek-V3's, Qwen3-FP8's), read by SGLang's Fp8Config.
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": list(BLOCK)}


def _blocks(w: Any, block: tuple[int, int]) -> tuple[Any, int, int]:
    """`w` zero-padded to whole blocks, viewed as (rows of blocks, bn, cols of blocks, bk)."""
    import torch

    n, k = w.shape
    bn, bk = block
    rows, cols = -(-n // bn), -(-k // bk)
    padded = torch.zeros(rows * bn, cols * bk, dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float()
    return padded.view(rows, bn, cols, bk), rows, cols


def quantize(w: Any, block: tuple[int, int] = BLOCK) -> tuple[Any, Any]:
    """(weight as float8_e4m3fn, weight_scale_inv as float32 [ceil(N/bn), ceil(K/bk)])."""
    import torch

    n, k = w.shape
    tiles, rows, cols = _blocks(w, block)
    amax = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # an all-zero block still gets a finite scale
    scale_inv = amax / E4M3_MAX
    q = (tiles / scale_inv[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    q = q.view(rows * block[0], cols * block[1])[:n, :k].contiguous()
    return q, scale_inv.contiguous()


def dequantize(q: Any, scale_inv: Any, block: tuple[int, int] = BLOCK) -> Any:
    """The float32 weight a block-FP8 pair stands for."""
    n, k = q.shape
    tiles, rows, cols = _blocks(q.float(), block)
    return (tiles * scale_inv[:, None, :, None]).view(rows * block[0], cols * block[1])[:n, :k]
