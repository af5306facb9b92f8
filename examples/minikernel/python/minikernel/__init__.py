"""minikernel: a miniature of sgl-kernel, for testing build-kernel offline.

Like sgl-kernel's load_utils, the common ops library is built into two folders,
``sm90/`` (Hopper, fast math) and ``sm100/`` (every other GPU: Blackwell incl.
SM120, and older ones), and the one matching the GPU's compute capability is
loaded: major 9 loads ``sm90``, any other ``sm100`` (upstream loads sm90 only on
9.0). When that folder is missing the other one is loaded, and on a host without
a GPU (or without a driver) whichever exists is loaded, ``sm100`` first, so
``import minikernel`` works on a GPU-less build host. The libraries are plain
shared objects that register their ops with ``TORCH_LIBRARY(minikernel, ...)``;
they are loaded with ``torch.ops.load_library``.
"""

from __future__ import annotations

import glob
import os
from typing import Optional, Tuple

import torch

__version__ = "0.1.0"

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_VARIANTS = ("sm100", "sm90")


def _compute_capability() -> Optional[Tuple[int, int]]:
    """(major, minor) of the current GPU, or None without a usable GPU."""
    try:
        if not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability(torch.cuda.current_device()))
    except Exception:  # no driver, broken driver, ...
        return None


def _find_library(variant: str) -> Optional[str]:
    for pattern in ("common_ops.*so", "common_ops*.so", "libcommon_ops*.so"):
        hits = sorted(glob.glob(os.path.join(_PKG_DIR, variant, pattern)))
        if hits:
            return hits[0]
    return None


def _variant_order(capability: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    if capability is not None and capability[0] == 9:
        return ("sm90", "sm100")
    return ("sm100", "sm90")  # other GPUs, and no GPU: prefer sm100, accept sm90


def _load_common_ops() -> str:
    capability = _compute_capability()
    order = _variant_order(capability)
    for variant in order:
        path = _find_library(variant)
        if path is not None:
            torch.ops.load_library(path)
            return path
    present = [v for v in _VARIANTS if _find_library(v) is not None]
    raise ImportError(
        f"minikernel: no common_ops library (compute capability {capability}, "
        f"looked in {', '.join(order)} under {_PKG_DIR}; built variants: {present or 'none'})."
    )


common_ops_path = _load_common_ops()
variant = os.path.basename(os.path.dirname(common_ops_path))


def nvfp4_enabled() -> bool:
    """True when the loaded library was compiled with ENABLE_NVFP4 (works without a GPU)."""
    return bool(torch.ops.minikernel.nvfp4_enabled())


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x of shape [..., 2d]."""
    return torch.ops.minikernel.silu_and_mul(x)


def scaled_fp4_quant(x: torch.Tensor, global_scale: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """NVFP4-quantise a 2-D CUDA tensor [m, n] (n % 16 == 0).

    Returns ``(packed, scales)``: ``packed`` is uint8 [m, n/2] (two e2m1 codes a
    byte, element 2i in the low nibble), ``scales`` is float8_e4m3fn [m, n/16]
    (one per block of 16, row-major, not swizzled). ``global_scale`` is a float32
    CUDA tensor of one element. The exact arithmetic is documented in
    csrc/nvfp4_quant.cu; x ~= e2m1(packed) * float(scales) / global_scale.
    Raises RuntimeError in a build without ENABLE_NVFP4.
    """
    return torch.ops.minikernel.scaled_fp4_quant(x, global_scale)


__all__ = [
    "common_ops_path",
    "nvfp4_enabled",
    "scaled_fp4_quant",
    "silu_and_mul",
    "variant",
]
