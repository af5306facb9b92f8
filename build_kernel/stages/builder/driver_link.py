"""What the link needs on a host with no driver and a minimal toolkit (a GPU-less builder).

A CMake package may link the driver two ways (the real tree of DESIGN.md does both): a subproject
through `CUDA::cuda_driver` (CMake's FindCUDAToolkit resolves it to a `libcuda.so` of the driver or
the toolkit's `stubs/`) and a library by name (`cuda cublas cublasLt`, `-lcublas` on the link line). A host without a
driver, with a minimal toolkit, has neither `libcuda.so` nor `libcublas.so`: configure stops
at the first, the link at the second. So:

- the driver: a stub generated from the toolkit's own `cuda.h` (driver_stub, shared with
  verify), named `libcuda.so.1` inside, so what links it loads the real driver where it runs;
- libraries linked by name: torch's own CUDA wheels hold them (`nvidia/cu13/lib/libcublas.so.13`)
  without the unversioned name a linker looks for; a link folder offers `libX.so` for each.

The folder goes on `LIBRARY_PATH` (gcc's `-l` search) and the stub into `CUDA_cuda_driver_LIBRARY`;
both live in the cache, after the build key (how a library is found is not what it is), and
never in the wheel (verify refuses a wheel that carries a libcuda).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from build_kernel import atomic, driver_stub
from build_kernel.errors import ToolchainError

DEFINE = "CUDA_cuda_driver_LIBRARY"
# libcublas.so.13, libnvrtc.so.13.0.88: the soname's major is enough for a link.
_VERSIONED = re.compile(r"^(lib[\w+-]+)\.so\.\d+$")


@dataclass(frozen=True)
class Link:
    defines: dict[str, str] = field(default_factory=dict)  # empty: the link finds a libcuda.so of its own
    env: dict[str, str] = field(default_factory=dict)  # LIBRARY_PATH with the link folder, if one was needed
    why: tuple[str, ...] = ()


def by_name(torch_nvidia: Path | None, roots: list[Path], system_dirs: tuple[str, ...]) -> dict[str, Path]:
    """`libX.so` -> torch's `libX.so.N` for each library only torch's CUDA wheels have, by soname."""
    if torch_nvidia is None or not torch_nvidia.is_dir():
        return {}
    found: dict[str, Path] = {}
    for lib in sorted(torch_nvidia.glob("*/lib/lib*.so.*")):
        m = _VERSIONED.match(lib.name)
        if m and m.group(1) not in found and not driver_stub.find_library(m.group(1), roots, system_dirs):
            found[m.group(1)] = lib.resolve()
    return found


def _cached(final: Path, fill: Callable[[Path], object]) -> Path:
    """`final`, filled once by `fill` (under its lock, atomically: a killed fill leaves nothing)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if not final.is_dir():
            atomic.sweep(final)
            with atomic.folder(final) as tmp:
                fill(tmp)
    return final


def _driver(cache_dir: Path, roots: list[Path], env: Mapping[str, str]) -> tuple[Path, str]:
    header = driver_stub.find_header(roots)
    if header is None:
        where = ", ".join(map(str, roots)) or "no toolkit root"
        raise ToolchainError(f"no libcuda.so to link (no driver, no toolkit stub) and no cuda.h to make one in {where}",
                             hint="install the toolkit's cuda-driver-dev package (e.g. apt-get install cuda-driver-dev-13-0) "
                                  f"or pass -D{DEFINE}=/path/to/libcuda.so in [build.defines]")
    final = _cached(cache_dir / "driver-stub" / hashlib.sha256(header.read_bytes()).hexdigest()[:16],
                    lambda tmp: driver_stub.link_stub(header, tmp, env=env, error=ToolchainError))
    count = len(driver_stub.header_symbols(header))
    return final / "libcuda.so", (f"no libcuda.so on this host (no driver, no toolkit stub): linking a stub of the "
                                  f"{count} entry points of {header} ({final}); the wheel loads the real driver where it runs")


def _folder(cache_dir: Path, links: dict[str, Path]) -> Path:
    """A cached folder of `libX.so` symlinks, named by what they point at."""
    def fill(tmp: Path) -> None:
        for name, target in sorted(links.items()):
            (tmp / f"{name}.so").symlink_to(target)

    digest = hashlib.sha256("\n".join(f"{k} {v}" for k, v in sorted(links.items())).encode()).hexdigest()[:16]
    return _cached(cache_dir / "link" / digest, fill)


def provide(cache_dir: Path, toolkit_roots: list[Path], defines: Mapping[str, str], *,
            env: Mapping[str, str], torch_nvidia: Path | None = None,
            system_dirs: tuple[str, ...] = driver_stub.SYSTEM_LIB_DIRS) -> Link:
    """What the build adds so the driver and the libraries linked by name resolve (ToolchainError when they cannot)."""
    out_defines: dict[str, str] = {}
    links: dict[str, Path] = {}
    why: list[str] = []
    if defines.get(DEFINE):
        why.append(f"{DEFINE} given: {defines[DEFINE]}")
        links["libcuda"] = Path(defines[DEFINE])
    elif found := driver_stub.linkable(toolkit_roots, system_dirs):
        why.append(f"libcuda.so for linking: {found}")
        if found.parent.name == "stubs":  # off the linker's own search path: `-lcuda` needs the folder
            links["libcuda"] = found
    else:
        stub, said = _driver(cache_dir, toolkit_roots, env)
        out_defines[DEFINE], links["libcuda"] = str(stub), stub
        why.append(said)
    named = by_name(torch_nvidia, toolkit_roots, system_dirs)
    if named:
        why.append(f"linked by name from torch's CUDA wheels: {', '.join(n[3:] for n in sorted(named))}")
    links.update(named)
    if "libcuda" in links and not (out_defines or named) and links["libcuda"].parent.name != "stubs":
        links.pop("libcuda")  # a given libcuda on the search path needs no folder of ours
    if not links:
        return Link(out_defines, {}, tuple(why))
    folder = _folder(cache_dir, links)
    base = env.get("LIBRARY_PATH", "")  # the build's environment (the plan's), never this process's own
    return Link(out_defines, {"LIBRARY_PATH": os.pathsep.join(p for p in (str(folder), base) if p)}, tuple(why))
