"""FA3 stand-in, shaped like sgl_kernel/flash_attn.py.

As upstream, importing this module loads the sm_90a-only ``flash_ops`` library
and raises ImportError when it is missing (e.g. in a build for SM120 only), so
anything that imports it fails at import time.
"""

import glob
import os

import torch

import minikernel  # noqa: F401  (loads common_ops first, as upstream)

_hits = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "flash_ops*.so")))
try:
    torch.ops.load_library(_hits[0])
except Exception:
    raise ImportError("Can not import minikernel flash_ops. Please check your installation.")


def is_fa3_supported(device=None) -> bool:
    # flash_ops is only built for sm90a
    return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] == 9


def flash_attn_fwd(q: torch.Tensor, softmax_scale: float = 1.0) -> torch.Tensor:
    """The FA3 'kernel' of the miniature: q * softmax_scale (float32, sm_90a only)."""
    if not is_fa3_supported():
        raise NotImplementedError("flash_attn at minikernel is only supported on sm90")
    return torch.ops.minikernel.fa3_fwd(q, softmax_scale)
