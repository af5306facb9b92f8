"""The build backends under one frontend: `python -m build --wheel --no-isolation` in the build environment.

What differs between a CMake package (scikit-build-core) and a setup.py one (setuptools with
torch.utils.cpp_extension) is only how the tool's parts are handed to the package:

    part                    scikit-build-core                       setuptools + cpp_extension
    archs                   TORCH_CUDA_ARCH_LIST + -C defines       TORCH_CUDA_ARCH_LIST + [build] arch_env
    jobs                    CMAKE_BUILD_PARALLEL_LEVEL, MAX_JOBS    MAX_JOBS + [build] jobs_env (torch passes -j)
    per-TU recorder         CMAKE_<LANG>_COMPILER_LAUNCHER          PYTORCH_NVCC (torch writes it into build.ninja)
    longest-first order     CMAKE_MAKE_PROGRAM = ninja_order        `ninja` first on PATH = ninja_order
    governor (jobserver)    MAKEFLAGS, no -j                        MAKEFLAGS; the wrapper drops torch's -j
    version label           pyproject [project] version             [build] version_file's __version__
    OOM resume              the CMake folder kept                   setuptools' build/ kept across the retry

Why PYTORCH_NVCC and not CC/CXX: torch puts $PYTORCH_NVCC verbatim into build.ninja (a command
line, so the recorder can stand in front of nvcc), while CXX is quoted as one word and is also
setuptools' linker, and CC becomes nvcc's -ccbin. So under setuptools only the nvcc compiles
(cicc: the whole memory cost) are recorded; host-only .cpp compiles are not (said in the log).
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from build_kernel.errors import BuildError
from build_kernel.plan import Plan
from build_kernel.stages.builder import ninja_order, provenance, scheduling

_VERSION_LINE = re.compile(r"""(?m)^(__version__\s*=\s*)(["'])([^"']*)(["'])""")
# setuptools' own build folder: cpp_extension's build.ninja lives in build/temp.<platform>-<python tag>/.
SETUPTOOLS_BUILD = "build"


@dataclass(frozen=True)
class Invocation:
    """How to run the frontend: its command and what its environment adds."""

    cmd: list[str]
    defines: dict[str, str]  # what the package is given as CMake defines ({} for setuptools): recorded
    env: dict[str, str] = field(default_factory=dict)
    path_first: list[str] = field(default_factory=list)  # folders put first on PATH (the ninja wrapper's)
    notes: list[str] = field(default_factory=list)


class Backend(Protocol):
    name: str

    def read_version(self, src: Path) -> str: ...

    def stamp_version(self, src: Path, version: str) -> None: ...

    def kept(self, src: Path) -> list[Path]:
        """Build folders inside the source copy that a rerun keeps (objects are not rebuilt)."""
        ...

    def invocation(self, plan: Plan, python: str, tool_python: str, ninja: str | None, work: Path, src: Path,
                   dist: Path, defines: Mapping[str, str], nvcc: str | None, jobserver: bool) -> Invocation: ...


class ScikitBuildCore:
    """CMake through scikit-build-core: every part goes in as a `-C cmake.define.*` setting."""

    name = "scikit-build-core"

    def read_version(self, src: Path) -> str:
        return provenance.read_version(src / "pyproject.toml")

    def stamp_version(self, src: Path, version: str) -> None:
        provenance.stamp_version(src / "pyproject.toml", version)

    def kept(self, src: Path) -> list[Path]:
        return []  # the CMake folder is outside the source copy already (work/cmake)

    def invocation(self, plan: Plan, python: str, tool_python: str, ninja: str | None, work: Path, src: Path,
                   dist: Path, defines: Mapping[str, str], nvcc: str | None, jobserver: bool) -> Invocation:
        # The profile recorder goes in front of the cache launcher (the tool's own python: it runs build_kernel).
        defines = scheduling.launcher_defines(plan, tool_python, src, defines)
        # ninja through ninja_order (the tool's python too): compiles start longest first.
        defines = scheduling.make_program(plan, tool_python, ninja, work, src, defines)
        cmd = [python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
               f"-Cbuild-dir={work / 'cmake'}", "-Ccmake.build-type=Release",
               *(f"-Ccmake.define.{k}={v}" for k, v in sorted(defines.items())), str(src)]
        return Invocation(cmd, defines)


class Setuptools:
    """A setup.py with torch.utils.cpp_extension (BuildExtension, ninja): every part goes in by environment."""

    name = "setuptools"

    def __init__(self, version_file: str = "") -> None:
        self.version_file = version_file

    def read_version(self, src: Path) -> str:
        if not self.version_file:
            return provenance.read_version(src / "pyproject.toml")
        path = src / self.version_file
        m = _VERSION_LINE.search(path.read_text()) if path.is_file() else None
        if not m:
            raise BuildError(f"{path}: no `__version__ = \"...\"` line to stamp",
                             hint="fix [build] version_file: the file setup.py reads its version from")
        return m.group(3)

    def stamp_version(self, src: Path, version: str) -> None:
        if not self.version_file:
            provenance.stamp_version(src / "pyproject.toml", version)
            return
        path = src / self.version_file
        path.write_text(_VERSION_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}{version}{m.group(4)}",
                                          path.read_text(), count=1))

    def kept(self, src: Path) -> list[Path]:
        return [src / SETUPTOOLS_BUILD]

    def invocation(self, plan: Plan, python: str, tool_python: str, ninja: str | None, work: Path, src: Path,
                   dist: Path, defines: Mapping[str, str], nvcc: str | None, jobserver: bool) -> Invocation:
        env: dict[str, str] = {}
        notes: list[str] = []
        path_first: list[str] = []
        recorder = scheduling.recorder_command(plan, tool_python, src, defines)
        if nvcc:
            launcher = [w for w in defines.get("CMAKE_CUDA_COMPILER_LAUNCHER", "").split(";") if w]
            if recorder or launcher:
                env["PYTORCH_NVCC"] = shlex.join([*recorder, *launcher, nvcc])
                if recorder:
                    notes.append("profile: nvcc compiles recorded through PYTORCH_NVCC (host-only .cpp compiles "
                                 "are not: CXX is setuptools' linker too)")
        if ninja:
            # torch runs `ninja -v -j MAX_JOBS` from PATH in build/temp.*: our wrapper is found first.
            shipped = Path(plan.recipe.build.order_profile) if plan.recipe.build.order_profile else None
            data = ninja_order.predictions(scheduling.db_path(plan), shipped, scheduling.strip_roots(src, defines))
            script = ninja_order.install(work / "bin", python=tool_python, ninja=ninja,
                                         build_dir=src / SETUPTOOLS_BUILD / "temp.*", data=data, drop_j=jobserver)
            path_first.append(str(script.parent))
        cmd = [python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)]
        return Invocation(cmd, {}, env, path_first, notes)


def for_plan(plan: Plan) -> Backend:
    b = plan.recipe.build
    return Setuptools(b.version_file) if b.backend == "setuptools" else ScikitBuildCore()


def keep_across_copy(kept: Sequence[Path], aside: Path, *, restore: bool) -> None:
    """Move the backend's build folders out of the source copy before it is replaced, and back after."""
    for folder in kept:
        parked = aside / folder.name
        src, dst = (parked, folder) if restore else (folder, parked)
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(src), str(dst))


def check_version(wheel: Path, stamped: str) -> None:
    """The wheel carries the stamped version (a setup.py that appends its own label would not)."""
    from packaging.version import InvalidVersion, Version

    said = wheel.name.split("-")[1]
    try:
        same = Version(said) == Version(stamped)
    except InvalidVersion:
        same = False
    if not same:
        raise BuildError(f"{wheel.name} says version {said}, the tool stamped {stamped}",
                         hint="the package adds to its version itself (e.g. a *_LOCAL_VERSION variable in [build] env): "
                              "unset that, or point [build] version_file at the line setup.py reads")
