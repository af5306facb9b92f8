"""The GPUs of this host, as their driver reports them (no torch, no CUDA runtime needed)."""

from __future__ import annotations

import ctypes

from build_kernel.archs import Arch

# CUdevice_attribute: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR.
_CC_MAJOR, _CC_MINOR = 75, 76


def arch_of(major: int, minor: int) -> Arch:
    """The target a GPU of this compute capability runs best: arch-specific from 9.0 (FP4 needs it)."""
    return Arch(major, minor, "a" if major >= 9 else "")


def present() -> tuple[Arch, ...] | None:
    """One arch per distinct GPU model here; None when there is no driver to ask."""
    from build_kernel.cuda_driver import SONAME  # here: it reads ELF files (pyelftools), which a plan never needs

    try:
        cuda = ctypes.CDLL(SONAME)
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return ()
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    found: list[Arch] = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            continue
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, device)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, device)
        arch = arch_of(major.value, minor.value)
        if arch not in found:
            found.append(arch)
    return tuple(found)
