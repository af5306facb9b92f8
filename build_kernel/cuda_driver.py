"""The CUDA driver library (libcuda.so.1) on a host without one: who links it, where a link or a load
finds it, and the stub that stands in for it.

A build host often has no GPU driver, yet sgl-kernel links `cuda`, so its import fails
there with "libcuda.so.1: cannot open shared object file". The toolkit ships a stub
(`lib64/stubs/libcuda.so`) for exactly this; minimal toolkits and the PyPI wheels do
not. Then we make one: a shared library exporting every driver symbol the wheel's
libraries import, each returning CUDA_ERROR_NO_DEVICE, which is the truth on this host
(`for_load`, verify's). Either way the stub is named `libcuda.so.1` inside, so what links
it loads the real driver where there is one.

The build needs one too, before any library exists (`for_link`). A CMake package may link the
driver two ways (the real tree of DESIGN.md does both): a subproject through `CUDA::cuda_driver`
(CMake's FindCUDAToolkit resolves it to a `libcuda.so` of the driver or the toolkit's `stubs/`) and
a library by name (`cuda cublas cublasLt`, `-lcublas` on the link line). A host without a driver,
with a minimal toolkit, has neither `libcuda.so` nor `libcublas.so`: configure stops at the first,
the link at the second. So:

- the driver: a stub exporting every entry point the toolkit's own `cuda.h` declares;
- libraries linked by name: torch's own CUDA wheels hold them (`nvidia/cu13/lib/libcublas.so.13`)
  without the unversioned name a linker looks for; a link folder offers `libX.so` for each.

The folder goes on `LIBRARY_PATH` (gcc's `-l` search) and the stub into `CUDA_cuda_driver_LIBRARY`;
both live in the cache, after the build key (how a library is found is not what it is), and
never in the wheel (verify refuses a wheel that carries a libcuda).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from filelock import FileLock

from build_kernel import atomic, process
from build_kernel.errors import BuildKernelError, ToolchainError, VerifyError

SONAME = "libcuda.so.1"
CUDA_ERROR_NO_DEVICE = 100
# Driver API entry points are cuXxx (the runtime's are cudaXxx and live in libcudart).
_DRIVER_SYMBOL = re.compile(r"^cu[A-Z]\w*$")
# In cuda.h: declarations `CUresult CUDAAPI cuInit(...)` and the versioned names behind
# `#define cuMemAlloc cuMemAlloc_v2`.
_HEADER_SYMBOL = re.compile(r"\b(cu[A-Z]\w*)\s*\(|^#\s*define\s+cu[A-Z]\w*\s+(cu[A-Z]\w*)\s*$", re.M)
# Where a linker (and CMake's FindCUDAToolkit) finds libcuda.so besides the toolkit.
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/nvidia/lib64", "/usr/local/lib")
DEFINE = "CUDA_cuda_driver_LIBRARY"
# libcublas.so.13, libnvrtc.so.13.0.88: the soname's major is enough for a link.
_VERSIONED = re.compile(r"^(lib[\w+-]+)\.so\.\d+$")


# Which libraries link the driver, and what they import from it.

def needed(so: Path) -> list[str]:
    """The sonames `so` names in DT_NEEDED (verify's diagnosis reads them here too)."""
    with so.open("rb") as fh:
        for section in ELFFile(fh).iter_sections():
            if isinstance(section, DynamicSection):
                return [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]  # type: ignore[attr-defined]
    return []


def is_driver(name: str) -> bool:
    """`libcuda.so`, `libcuda.so.1`, ...: a file or soname of the CUDA driver."""
    return name.startswith("libcuda.so")


def needs_driver(libs: list[Path]) -> list[Path]:
    """The libraries that link libcuda."""
    return [so for so in libs if any(is_driver(n) for n in needed(so))]


def driver_symbols(libs: list[Path]) -> list[str]:
    """Undefined driver API symbols these libraries import."""
    found: set[str] = set()
    for so in libs:
        with so.open("rb") as fh:
            dynsym = ELFFile(fh).get_section_by_name(".dynsym")
            if isinstance(dynsym, SymbolTableSection):
                found.update(s.name for s in dynsym.iter_symbols()
                             if s["st_shndx"] == "SHN_UNDEF" and _DRIVER_SYMBOL.match(s.name))
    return sorted(found)


# Where a load or a link finds one.

def driver_loadable() -> bool:
    try:
        ctypes.CDLL(SONAME)
    except OSError:
        return False
    return True


def toolkit_stub(roots: list[Path]) -> Path | None:
    for root in roots:
        for stub in sorted(root.glob("**/stubs/libcuda.so")):
            return stub
    return None


def find_header(roots: list[Path]) -> Path | None:
    """The toolkit's `cuda.h` (the driver API header every toolkit ships, minimal ones too)."""
    for root in roots:
        for candidate in (root / "include" / "cuda.h", *sorted(root.glob("targets/*/include/cuda.h"))):
            if candidate.is_file():
                return candidate
    return None


def find_library(name: str, roots: list[Path], system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> Path | None:
    """`<name>.so` (e.g. `libcuda`) where the build's link would find it: a toolkit's lib folders
    (stubs included), then the system's."""
    for root in roots:
        for folder in (root / "lib64", root / "lib", root / "lib64/stubs", root / "lib/stubs",
                       *sorted(root.glob("targets/*/lib/stubs"))):
            if (folder / f"{name}.so").exists():
                return folder / f"{name}.so"
    return next((Path(d) / f"{name}.so" for d in system_dirs if (Path(d) / f"{name}.so").exists()), None)


def linkable(roots: list[Path], system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> Path | None:
    """A `libcuda.so` the build's link would find: the toolkit's (stubs included) or the driver's."""
    return find_library("libcuda", roots, system_dirs)


# The stub.

def make_stub(symbols: list[str], folder: Path, cc: str = "cc", env: Mapping[str, str] | None = None,
              error: type[BuildKernelError] = VerifyError) -> Path:
    """Compile a libcuda.so.1 whose every symbol answers CUDA_ERROR_NO_DEVICE (`error` if `cc` fails)."""
    source = folder / "libcuda_stub.c"
    source.write_text("/* generated by build-kernel: no driver on this host */\n" + "".join(
        f"int {name}(void) {{ return {CUDA_ERROR_NO_DEVICE}; }}\n" for name in symbols))
    out = folder / SONAME
    process.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", "-o", out, source], error=error,
                what="compiling a stand-in libcuda", fix="install a C compiler (cc)", env=env, timeout=300)
    return out


def header_symbols(cuda_h: Path) -> list[str]:
    """Every driver entry point `cuda.h` declares, versioned names included."""
    found = {a or b for a, b in _HEADER_SYMBOL.findall(cuda_h.read_text(errors="replace"))}
    return sorted(found)


def link_stub(cuda_h: Path, folder: Path, cc: str = "cc", env: Mapping[str, str] | None = None,
              error: type[BuildKernelError] = VerifyError) -> Path:
    """`folder/libcuda.so` (-> the generated libcuda.so.1) exporting every symbol of `cuda_h`, for linking."""
    folder.mkdir(parents=True, exist_ok=True)
    make_stub(header_symbols(cuda_h), folder, cc=cc, env=env, error=error)
    link = folder / "libcuda.so"
    link.unlink(missing_ok=True)
    link.symlink_to(SONAME)
    return link


# Loading what links it (verify's import check).

def for_load(libs: list[Path], folder: Path, cuda_home: str | None,
             env: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """A folder to put on LD_LIBRARY_PATH so `libs` load, and how the driver was provided.

    `env`: where the C compiler for a generated stub runs (None: this process's environment)."""
    linked = needs_driver(libs)
    if not linked:
        return None, "no library links libcuda"
    if driver_loadable():
        return None, "the installed driver"
    folder.mkdir(parents=True, exist_ok=True)
    roots = ([Path(cuda_home)] if cuda_home else []) + [Path(p) / "nvidia" for p in sys.path if p and (Path(p) / "nvidia").is_dir()]
    stub = toolkit_stub(roots)
    if stub:
        (folder / SONAME).symlink_to(stub)
        return folder, f"the toolkit's stub {stub}"
    symbols = driver_symbols(linked)
    try:
        make_stub(symbols, folder, env=env)
    except (OSError, VerifyError) as exc:
        return None, f"no driver, no toolkit stub, and no C compiler to make one ({exc})"
    return folder, f"a generated stub of {len(symbols)} driver symbols (no driver, no toolkit stub on this host)"


# Linking against it (the build), with the libraries torch's wheels hold unlinkable by name.

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
        if m and m.group(1) not in found and not find_library(m.group(1), roots, system_dirs):
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
    header = find_header(roots)
    if header is None:
        where = ", ".join(map(str, roots)) or "no toolkit root"
        raise ToolchainError(f"no libcuda.so to link (no driver, no toolkit stub) and no cuda.h to make one in {where}",
                             hint="install the toolkit's cuda-driver-dev package (e.g. apt-get install cuda-driver-dev-13-0) "
                                  f"or pass -D{DEFINE}=/path/to/libcuda.so in [build.defines]")
    final = _cached(cache_dir / "driver-stub" / hashlib.sha256(header.read_bytes()).hexdigest()[:16],
                    lambda tmp: link_stub(header, tmp, env=env, error=ToolchainError))
    count = len(header_symbols(header))
    return final / "libcuda.so", (f"no libcuda.so on this host (no driver, no toolkit stub): linking a stub of the "
                                  f"{count} entry points of {header} ({final}); the wheel loads the real driver where it runs")


def _folder(cache_dir: Path, links: dict[str, Path]) -> Path:
    """A cached folder of `libX.so` symlinks, named by what they point at."""
    def fill(tmp: Path) -> None:
        for name, target in sorted(links.items()):
            (tmp / f"{name}.so").symlink_to(target)

    digest = hashlib.sha256("\n".join(f"{k} {v}" for k, v in sorted(links.items())).encode()).hexdigest()[:16]
    return _cached(cache_dir / "link" / digest, fill)


def for_link(cache_dir: Path, toolkit_roots: list[Path], defines: Mapping[str, str], *,
             env: Mapping[str, str], torch_nvidia: Path | None = None,
             system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> Link:
    """What the build adds so the driver and the libraries linked by name resolve (ToolchainError when they cannot)."""
    out_defines: dict[str, str] = {}
    links: dict[str, Path] = {}
    why: list[str] = []
    if defines.get(DEFINE):
        why.append(f"{DEFINE} given: {defines[DEFINE]}")
        links["libcuda"] = Path(defines[DEFINE])
    elif found := linkable(toolkit_roots, system_dirs):
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
