"""Pure-torch references of the minikernel ops (CPU or GPU, no compiled code).

``scaled_fp4_quant_ref`` reproduces csrc/nvfp4_quant.cu bit for bit (the
arithmetic is written out there): fp32 operations rounded to nearest even,
e4m3 scales by round-to-nearest-even with saturation at 448, e2m1 codes by
round-to-nearest-even with saturation at 6, sign bit taken from the scaled value
(so -0.0 gives code 8). NaN inputs are not specified.
"""

from __future__ import annotations

from typing import Tuple

import torch

BLOCK_SIZE = 16  # minidep::nvfp4::kBlockSize
E2M1_MAX = 6.0  # minidep::nvfp4::kE2M1Max
E4M3_MAX = 448.0  # minidep::nvfp4::kE4M3Max

# e2m1 magnitudes by code (bit 3 is the sign).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring magnitudes; at a tie the even code wins.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """float32 tensor -> uint8 e2m1 codes (0..15), RN-even, saturating."""
    v = v.float()
    mag = v.abs()
    idx = torch.zeros_like(mag, dtype=torch.int32)
    for k, t in enumerate(_MIDPOINTS):
        up = mag > t
        if (k + 1) % 2 == 0:  # the upper neighbour is even: ties go up
            up = up | (mag == t)
        idx += up.to(torch.int32)
    sign = torch.signbit(v).to(torch.int32) << 3
    return (idx | sign).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes -> float32 values."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    c = codes.to(torch.int64)
    mag = table[c & 7]
    return torch.where((c & 8) != 0, -mag, mag)


def scaled_fp4_quant_ref(x: torch.Tensor, global_scale: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reference of minikernel.scaled_fp4_quant: returns (packed uint8 [m, n/2], scales float8_e4m3fn [m, n/16])."""
    assert x.dim() == 2 and x.shape[1] % BLOCK_SIZE == 0, "x must be [m, n] with n % 16 == 0"
    m, n = x.shape
    gs = global_scale.reshape(()).float()
    xb = x.float().reshape(m, n // BLOCK_SIZE, BLOCK_SIZE)
    amax = xb.abs().amax(dim=-1)
    sf = gs * (amax / E2M1_MAX)
    sf8 = sf.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    sf_back = sf8.float()
    qscale = torch.where(sf_back != 0, gs / sf_back, torch.zeros_like(sf_back))
    codes = e2m1_encode(xb * qscale.unsqueeze(-1)).reshape(m, n)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, sf8


def dequantize_fp4(packed: torch.Tensor, scales: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """x ~= e2m1(packed) * float(scales) / global_scale, as float32 [m, n]."""
    m = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(m, -1)
    vals = e2m1_decode(codes).reshape(m, -1, BLOCK_SIZE)
    out = vals * scales.float().unsqueeze(-1) / global_scale.reshape(()).float()
    return out.reshape(m, -1)


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:], computed in float32, returned in x's dtype."""
    d = x.shape[-1] // 2
    a = x[..., :d].float()
    b = x[..., d:].float()
    return (a / (1.0 + torch.exp(-a)) * b).to(x.dtype)
