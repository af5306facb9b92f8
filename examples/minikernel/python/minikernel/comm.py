"""The miniature's communication library (as sgl-kernel's mscclpp): it links the CUDA driver."""

from __future__ import annotations

import ctypes
import glob
import os


def driver_version() -> int:
    """The CUDA driver's version as comm_ops sees it, or -1 without a usable driver."""
    [path] = glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "*comm_ops*.so"))
    return int(ctypes.CDLL(path).minikernel_comm_driver_version())
