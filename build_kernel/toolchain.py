"""What compilers and tools are installed, and whether they can build the recipe.

`detect` gathers facts (used by `doctor` and provenance); `preflight` turns them into
one-line errors with the fix, before any compile starts. Whether a compiler links the
libraries well (its C++ runtime, nvcc's acceptance) is probed in host_compiler.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from build_kernel import process
from build_kernel.archs import Arch
from build_kernel.errors import PatchError, ToolchainError
from build_kernel.process import which
from build_kernel.series import CXX_FROM_TORCH, Series, cxx_standard_of, read_info

# torch's facts without importing it (an import takes seconds): find_spec of a top-level
# package runs none of its code, and torch/version.py is read as text. The C++ standard its
# headers require is read from their own guard (`#if ... __cplusplus < 202002L` / `#error C++20
# or later compatible compiler is required`: 20), as sm120 v3's CMake does.
_TORCH_PROBE = """
import ast, json, os, platform, importlib.util, re
info = {"python_version": platform.python_version()}
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    here = list(spec.submodule_search_locations)[0]
    found = {}
    try:
        with open(os.path.join(here, "version.py"), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        tree = ast.Module(body=[], type_ignores=[])
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            found[target.id] = node.value.value
    version = found.get("__version__")
    if not isinstance(version, str):
        import importlib.metadata
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            version = None
    cuda = found.get("cuda")
    cxx = None
    for header in (("torch", "csrc", "api", "include", "torch", "all.h"), ("ATen", "ATen.h")):
        try:
            with open(os.path.join(here, "include", *header), encoding="utf-8", errors="replace") as fh:
                m = re.search(r"__cplusplus\\s*<\\s*20(\\d\\d)\\d\\dL", fh.read())
        except OSError:
            continue
        if m:
            cxx = max(cxx or 0, int(m.group(1)))
    info.update(version=version, cuda=cuda if isinstance(cuda, str) else None, cxx_standard=cxx,
                cmake_prefix_path=os.path.join(here, "share", "cmake"),
                nvidia_dir=os.path.join(os.path.dirname(here), "nvidia"))
print(json.dumps(info))
"""


@dataclass(frozen=True)
class Facts:
    """Versions and paths of everything a build uses (None: not found)."""

    python: str
    python_version: str
    git: str | None = None
    cmake: str | None = None
    cmake_version: str | None = None
    ninja: str | None = None
    ninja_version: str | None = None
    gcc: str | None = None
    gcc_version: str | None = None
    nvcc: str | None = None
    nvcc_version: str | None = None
    nvcc_archs: tuple[str, ...] = ()
    cuda_home: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_cmake_prefix: str | None = None
    torch_nvidia_dir: str | None = None
    torch_cxx_standard: int | None = None  # what torch's headers require (None: not read)
    problems: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _version(text: str | None, pattern: str) -> str | None:
    m = re.search(pattern, text or "")
    return m.group(1) if m else None


def find_nvcc(env: Mapping[str, str], path: str | None = None, roots: tuple[str, ...] = ("/usr/local",)) -> str | None:
    """nvcc from CUDA_HOME/CUDA_PATH, then PATH, then <root>/cuda*."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var) and Path(env[var], "bin", "nvcc").is_file():
            return str(Path(env[var], "bin", "nvcc"))
    found = which("nvcc", path=path if path is not None else env.get("PATH"))
    if found:
        return found
    for root in roots:
        for candidate in sorted(Path(root).glob("cuda*/bin/nvcc"), reverse=True):
            return str(candidate)
    return None


def cuda_home_of(nvcc: str, env: Mapping[str, str] | None = None) -> str:
    """The toolkit root; nvcc itself says where it lives (`_HERE_`), wrappers or not."""
    dry = process.probe([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], env=env) or ""
    here = _version(dry, r"_HERE_=(\S+)")
    return str(Path(here).parent) if here else str(Path(nvcc).resolve().parent.parent)


def detect(python: str, env: Mapping[str, str], cuda_roots: tuple[str, ...] = ("/usr/local",)) -> Facts:
    """Ask every tool for its version, each run in `env`; never raises."""
    search = env.get("PATH")
    py_dir = str(Path(python).parent)
    # Tools installed in the build environment (cmake, ninja from PyPI) come first.
    tool_path = f"{py_dir}{os.pathsep}{search}" if search else py_dir

    def out(*cmd: str, merge: bool = True) -> str | None:
        return process.probe(cmd, env=env, merge=merge)

    facts: dict[str, object] = {"python": python, "python_version": "?"}
    probe = out(python, "-c", _TORCH_PROBE, merge=False)
    try:
        info = json.loads(probe.strip().splitlines()[-1]) if probe and probe.strip() else {}
    except ValueError:
        info = {}
    if isinstance(info, dict) and info:
        facts["python_version"] = info["python_version"]
        if info.get("version"):
            facts["torch_version"], facts["torch_cuda"] = info["version"], info["cuda"]
            facts["torch_cmake_prefix"], facts["torch_nvidia_dir"] = info["cmake_prefix_path"], info["nvidia_dir"]
            facts["torch_cxx_standard"] = info.get("cxx_standard")
    facts["git"] = which("git", path=tool_path)
    cmake = which("cmake", path=tool_path)
    facts["cmake"], facts["cmake_version"] = cmake, cmake and _version(out(cmake, "--version"), r"version (\S+)")
    ninja = which("ninja", path=tool_path)
    facts["ninja"], facts["ninja_version"] = ninja, ninja and _version(out(ninja, "--version"), r"^(\d+\.\d+(?:\.\d+)?)")
    gcc = env.get("CXX") or which("g++", path=tool_path)
    facts["gcc"], facts["gcc_version"] = gcc, gcc and _version(out(gcc, "-dumpfullversion"), r"^(\S+)")
    nvcc = find_nvcc(env, tool_path, cuda_roots)
    if nvcc:
        facts["nvcc"] = nvcc
        facts["cuda_home"] = cuda_home_of(nvcc, env)
        facts["nvcc_version"] = _version(out(nvcc, "--version"), r"release (\d+\.\d+)")
        facts["nvcc_archs"] = tuple(re.findall(r"compute_(\d+)", out(nvcc, "--list-gpu-arch") or ""))
    return Facts(**facts)  # type: ignore[arg-type]


# Minimum CUDA release whose nvcc can target each arch-specific Blackwell/Hopper target.
MIN_CUDA = {(9, 0): "12.0", (10, 0): "12.8", (10, 3): "12.9", (11, 0): "13.0", (12, 0): "12.8", (12, 1): "12.9"}


# Only where torch's headers could not be read: the first release whose headers refuse C++17.
TORCH_CXX20_FROM = (2, 14)


def torch_cxx_standard(facts: Facts) -> int | None:
    """The C++ standard the torch found requires: from its headers, else from its version."""
    if facts.torch_cxx_standard:
        return facts.torch_cxx_standard
    if not facts.torch_version:
        return None
    try:
        release = Version(facts.torch_version).release  # a nightly 2.14.0.dev... is 2.14 here
    except ValueError:
        return None
    return 20 if release[:2] >= TORCH_CXX20_FROM else None


def _series_with_standard(series: Series, need: int, commit: str | None = None) -> tuple[str, int | str] | None:
    """The newest sibling version of `series` whose tree builds with C++`need` (or follows torch) and,
    given the recipe's `commit`, whose info.toml lists it: advice must apply to the commit being built."""
    fits: list[tuple[str, int | str]] = []
    for folder in series.directory.parent.iterdir():
        if folder == series.directory or not (folder / "series").is_file():
            continue
        try:
            info = read_info(folder)
            have = cxx_standard_of(info, folder / "info.toml")
        except (ValueError, OSError, PatchError):
            continue
        if commit is not None and commit not in list(info.get("applies_to_commits") or []):
            continue
        if have == CXX_FROM_TORCH or (isinstance(have, int) and have >= need):
            fits.append((folder.name, have))
    return max(fits, key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f[0])], default=None)


def cxx_standard_problem(facts: Facts, series: Series, commit: str | None = None) -> str | None:
    """The series compiles with an older C++ standard than torch's headers require (info.toml
    `cxx_standard`; a series that does not say, or follows torch, is not refused)."""
    need, have = torch_cxx_standard(facts), series.cxx_standard
    if need is None or not isinstance(have, int) or have >= need:
        return None
    if other := _series_with_standard(series, need, commit):
        how = "sets the standard from torch" if other[1] == CXX_FROM_TORCH else f"builds with C++{other[1]}"
        fix = f'use [patches] version = "{other[0]}" (it {how})'
    else:
        fix = f"add a patch that sets C++{need} (and cxx_standard = {need} in {series.directory / 'info.toml'})"
    return (f"torch {facts.torch_version} needs C++{need} and series {series.name} builds with C++{have}:"
            f" {fix}, or use a torch whose headers accept C++{have}")


def preflight(facts: Facts, archs: tuple[Arch, ...], *, cmake_spec: str, want_cuda: str,
              series: Series | None = None, commit: str | None = None) -> list[str]:
    """Every reason the build would fail before compiling, each with its fix."""
    problems: list[str] = []
    if not facts.nvcc:
        problems.append("nvcc not found: install the CUDA toolkit, set CUDA_HOME, or use [toolchain] cuda_source = \"wheels\"")
    else:
        for arch in archs:
            number = f"{arch.major}{arch.minor}"
            if facts.nvcc_archs and number not in facts.nvcc_archs:
                need = MIN_CUDA.get((arch.major, arch.minor), "a newer release")
                problems.append(
                    f"nvcc {facts.nvcc_version} ({facts.nvcc}) cannot target {arch.sm}: it needs CUDA >= {need}"
                    " (install a newer toolkit or use cuda_source = \"wheels\")"
                )
        if want_cuda and facts.nvcc_version and facts.nvcc_version.split(".")[0] != want_cuda.split(".")[0]:
            problems.append(f"nvcc is CUDA {facts.nvcc_version} but the recipe asks CUDA {want_cuda}: point CUDA_HOME at a {want_cuda} toolkit")
    if not facts.torch_version:
        problems.append(f"torch is not importable by {facts.python}: install the recipe's torch there or set [toolchain] torch")
    elif not facts.torch_cuda:
        problems.append(f"torch {facts.torch_version} is a CPU build: install a CUDA build of torch (e.g. +cu130)")
    elif facts.nvcc_version and facts.torch_cuda.split(".")[0] != facts.nvcc_version.split(".")[0]:
        problems.append(
            f"torch {facts.torch_version} was built for CUDA {facts.torch_cuda} but nvcc is CUDA {facts.nvcc_version}:"
            f" install a CUDA {facts.nvcc_version.split('.')[0]}.x torch, or a CUDA {facts.torch_cuda} toolkit"
        )
    if not facts.cmake_version:
        problems.append("cmake not found: pip install cmake (or put cmake >= 3.26 on PATH)")
    else:
        try:
            spec = SpecifierSet(cmake_spec)
        except InvalidSpecifier:
            problems.append(f"[toolchain] cmake = {cmake_spec!r} is not a version specifier: write e.g. \">=3.26\"")
        else:
            if Version(facts.cmake_version) not in spec:
                problems.append(f"cmake {facts.cmake_version} ({facts.cmake}) does not satisfy {cmake_spec}: pip install 'cmake{cmake_spec}'")
    if not facts.ninja_version:
        problems.append("ninja not found: pip install ninja")
    if series is not None and (cxx := cxx_standard_problem(facts, series, commit)):
        problems.append(cxx)
    return problems


def require(problems: list[str]) -> None:
    if problems:
        raise ToolchainError("; ".join(problems) if len(problems) > 1 else problems[0])


def _first(root: Path, patterns: tuple[str, ...]) -> Path | None:
    for pattern in patterns:
        for hit in sorted(root.glob(pattern)):
            return hit
    return None


def cmake_defines(facts: Facts) -> dict[str, str]:
    """The system toolkit's view for CMake and torch's CMake config, filled from torch's own
    nvidia wheels where the toolkit is minimal (no libnvrtc, no cuBLAS/cuSPARSE headers).
    A toolkit from PyPI wheels brings its own (cudawheels.Toolkit.defines)."""
    defines: dict[str, str] = {}
    if facts.cuda_home:
        home = Path(facts.cuda_home)
        defines["CMAKE_CUDA_COMPILER"] = str(home / "bin" / "nvcc")
        defines["CUDAToolkit_ROOT"] = str(home)
        defines["CUDA_TOOLKIT_ROOT_DIR"] = str(home)  # torch's bundled FindCUDA reads this one
    if facts.cuda_home and facts.torch_nvidia_dir and Path(facts.torch_nvidia_dir).is_dir():
        home, wheels = Path(facts.cuda_home), Path(facts.torch_nvidia_dir)
        if not _first(home, ("lib64/libnvrtc.so*", "targets/*/lib/libnvrtc.so*")):
            nvrtc = _first(wheels, ("*/lib/libnvrtc.so.*[0-9]", "*/lib/libnvrtc.so"))
            if nvrtc:
                defines["CUDA_nvrtc_LIBRARY"] = str(nvrtc)
        if not _first(home, ("include/cusparse.h", "targets/*/include/cusparse.h")):
            header = _first(wheels, ("*/include/cusparse.h", "*/*/include/cusparse.h"))
            if header:
                # Standard include dirs come last on the command line: the toolkit's own
                # headers still win, the wheels only fill what is missing.
                defines["CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES"] = str(header.parent)
                defines["CMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES"] = str(header.parent)
    return defines
