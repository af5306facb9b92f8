"""A `libcuda.so` for the link where the host has no driver (a GPU-less builder).

mscclpp links `CUDA::cuda_driver`, which CMake's FindCUDAToolkit resolves to a
`libcuda.so` from the driver or the toolkit's `stubs/`; a host without a driver and a
minimal toolkit (or one from PyPI wheels) has neither, and configure stops. Then the
build links a stub generated from the toolkit's own `cuda.h` (driver_stub, shared with
verify). It is named `libcuda.so.1` inside, so the built libraries load the real driver
where they run; it lives in the cache, never in the wheel (verify refuses a wheel that
carries a libcuda).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from build_kernel import atomic, driver_stub
from build_kernel.errors import ToolchainError

DEFINE = "CUDA_cuda_driver_LIBRARY"


@dataclass(frozen=True)
class Link:
    defines: dict[str, str]  # empty: the link finds a libcuda.so of its own
    why: str


def provide(cache_dir: Path, toolkit_roots: list[Path], defines: Mapping[str, str],
            env: Mapping[str, str] | None = None,
            system_dirs: tuple[str, ...] = driver_stub.SYSTEM_LIB_DIRS) -> Link:
    """What the build adds so `CUDA::cuda_driver` links (ToolchainError when it cannot be had)."""
    if defines.get(DEFINE):
        return Link({}, f"{DEFINE} given: {defines[DEFINE]}")
    found = driver_stub.linkable(toolkit_roots, system_dirs)
    if found:
        return Link({}, f"libcuda.so for linking: {found}")
    header = driver_stub.find_header(toolkit_roots)
    if header is None:
        where = ", ".join(map(str, toolkit_roots)) or "no toolkit root"
        raise ToolchainError(f"no libcuda.so to link (no driver, no toolkit stub) and no cuda.h to make one in {where}",
                             hint="install the toolkit's cuda-driver-dev package (e.g. apt-get install cuda-driver-dev-13-0) "
                                  f"or pass -D{DEFINE}=/path/to/libcuda.so in [build.defines]")
    digest = hashlib.sha256(header.read_bytes()).hexdigest()[:16]
    final = cache_dir / "driver-stub" / digest
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if not (final / "libcuda.so").exists():
            atomic.sweep(final)
            with atomic.folder(final) as tmp:
                driver_stub.link_stub(header, tmp, env=env, error=ToolchainError)
    count = len(driver_stub.header_symbols(header))
    return Link({DEFINE: str(final / "libcuda.so")},
                f"no libcuda.so on this host (no driver, no toolkit stub): linking a stub of the {count} entry points "
                f"of {header} ({final}); the wheel loads the real driver where it runs")
