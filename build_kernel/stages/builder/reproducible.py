"""What makes two builds of the same inputs give the same wheel bytes (reproducible-builds.org's practice).

- SOURCE_DATE_EPOCH = the pinned commit's commit time: scikit-build-core, setuptools' bdist_wheel and our
  repack (provenance.py) write it as every archive member's time;
- the build's folders mapped to fixed names in everything the compilers write: `-ffile-prefix-map` for the
  host compiler (CFLAGS/CXXFLAGS: CMake reads them at configure, setuptools adds them to its compiler), for
  nvcc's host steps (NVCC_APPEND_FLAGS, read by nvcc itself under either backend) and each source's own path
  for cudafe++ (the nvcc launcher, nvcc_paths.py); the GNU build ID follows from the content once the paths
  are gone;
- what varies per run (times, CPU seconds, memory, paths, host) kept out of the wheel (provenance.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

import git

from build_kernel.stages.builder import nvcc_paths

LAUNCHER = str(Path(nvcc_paths.__file__).resolve())
CACHE_NAME = "/build-kernel-cache"  # what the cache folder is called in the wheel's bytes
HOST_FLAGS = ("CFLAGS", "CXXFLAGS")
NVCC_FLAGS = "NVCC_APPEND_FLAGS"


def epoch(root: Path, commit: str) -> int:
    """The commit's commit time (seconds since 1970): the time every member of the wheel carries."""
    return int(git.Repo(root).commit(commit).committed_date)


def prefix_maps(work: Path, cache_dir: Path) -> list[tuple[str, str]]:
    """Folder -> fixed name, most general first (gcc lets the last matching map win): the cache folder (the build
    environment's torch headers, a toolkit from wheels, fetched dependencies), then the build folder inside it."""
    return [(str(cache_dir.absolute()), CACHE_NAME), (str(work.absolute()), ".")]


def flags(maps: list[tuple[str, str]], env: Mapping[str, str], *, host: bool = True) -> dict[str, str]:
    """NVCC_APPEND_FLAGS and (with `host`) CFLAGS/CXXFLAGS with the maps, the environment's or recipe's own flags
    kept after them. Not `host` under sccache: it hashes a host compile's arguments with their folders (ccache
    knows -ffile-prefix-map and does not), so the maps would cost its C++ hits across folders (the wheel's
    host objects then name the build folder: reproducible in the same folder only, said in the log)."""
    ours = [f"-ffile-prefix-map={old}={new}" for old, new in maps]
    out = {NVCC_FLAGS: " ".join(shlex.quote(f"-Xcompiler={f}") for f in ours)}
    if host:
        out.update({name: " ".join(shlex.quote(f) for f in ours) for name in HOST_FLAGS})
    return {name: f"{value} {env[name]}" if env.get(name) else value for name, value in out.items()}


def cuda_launcher(python: str, maps: list[tuple[str, str]], launcher: str = "") -> str:
    """CMAKE_CUDA_COMPILER_LAUNCHER (`;`-separated) with nvcc_paths in front of the cache launcher, if any."""
    words = [python, "-S", LAUNCHER, *(w for old, new in maps for w in ("--map", f"{old}={new}")), "--"]
    return ";".join([*words, *([launcher] if launcher else [])])
