"""A hermetic CUDA toolkit from PyPI wheels (nvidia-cuda-nvcc & co.) matching torch's CUDA.

Here: which wheels (pins), installing them into the cache (`ensure_toolkit`, `find_cached`),
pip's failures as one line, and `choose` (system toolkit or wheels). What makes the
installed folder a toolkit root CMake and torch accept is cudalayout's.

Pins: every package is pinned to the CUDA major.minor (`nvidia-cuda-nvcc==13.0.*`), also
the ones nvcc already depends on, because nvcc's own `Requires-Dist` (nvidia-nvvm,
nvidia-cuda-runtime, nvidia-cuda-crt) is unpinned: `pip install nvidia-cuda-nvcc==13.0.*`
alone pairs nvcc 13.0 with the newest cicc. CCCL is versioned `13.<m>.*` up to CUDA 13.2
and `13.3.<cccl>` from 13.3 on (13.3.3.3.1 holds CCCL 3.3.3, 13.3.5.0.6 CCCL 3.5.0), so
CUDA 13.m takes CCCL 3.m.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock
from packaging.version import InvalidVersion, Version

from build_kernel import atomic, process
from build_kernel.archs import Arch
from build_kernel.errors import ToolchainError
from build_kernel.stages.builder.cudalayout import (
    LAYOUT,
    MARKER,
    assemble,
    cmake_defines,
    nvcc_version,
    smoke_compile,
    torch_site,
)
from build_kernel.toolchain import MIN_CUDA, Facts, find_nvcc

# From this CUDA major on, the wheels share one nvidia/cu<major> folder (CUDA 12 wheels
# are named nvidia-*-cu12 and install one folder per component: not supported here).
FIRST_MAJOR = 13
# What a build needs: the compiler driver and its tools, cicc + libdevice, the crt headers,
# CCCL, the runtime (headers, libcudart), NVRTC (torch's CMake links every extension to it).
PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl",
            "nvidia-cuda-runtime", "nvidia-cuda-nvrtc")
_CUDA_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)*\s*$")


@dataclass(frozen=True)
class Toolkit:
    """A CUDA toolkit root assembled from PyPI wheels, ready for CMake and torch's config."""

    cuda: str  # major.minor asked for, e.g. "13.0"
    root: Path  # CUDA_HOME: <cache>/toolkits/cuda-13.0-x86_64/nvidia/cu13
    nvcc: Path
    version: str  # nvcc's full version, e.g. "13.0.88"
    packages: tuple[tuple[str, str], ...]  # (distribution, exact version), sorted
    defines: Mapping[str, str] = field(hash=False)  # CMake defines for this toolkit
    cached: bool = field(default=False, compare=False)

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with this toolkit as CUDA_HOME and its bin/ first on PATH."""
        env = dict(base)
        env["CUDA_HOME"] = env["CUDA_PATH"] = str(self.root)
        env["PATH"] = os.pathsep.join(p for p in (str(self.root / "bin"), env.get("PATH", "")) if p)
        return env

    def to_dict(self) -> dict[str, object]:
        return {"source": "wheels", "cuda": self.cuda, "root": str(self.root), "nvcc": str(self.nvcc),
                "version": self.version, "packages": dict(self.packages), "defines": dict(self.defines),
                "cached": self.cached}


def major_minor(cuda: str) -> tuple[int, int]:
    """`13.0` / `13.0.88` -> (13, 0); a one-line ToolchainError for anything else."""
    m = _CUDA_RE.match(cuda or "")
    if not m:
        raise ToolchainError(f"CUDA version {cuda!r} is not major.minor", hint='write it as e.g. "13.0"')
    return int(m.group(1)), int(m.group(2))


def requirements(cuda: str) -> tuple[str, ...]:
    """The pip requirements of the toolkit for CUDA major.minor, every package pinned."""
    major, minor = major_minor(cuda)
    reqs = []
    for name in PACKAGES:
        if name == "nvidia-cuda-cccl" and major == 13 and minor >= 3:
            reqs.append(f"{name}>=13.3.{minor}.0,<13.3.{minor + 1}")
        else:
            reqs.append(f"{name}=={major}.{minor}.*")
    return tuple(reqs)


def toolkit_dir(cache_dir: Path, cuda: str) -> Path:
    major, minor = major_minor(cuda)
    return Path(cache_dir) / "toolkits" / f"cuda-{major}.{minor}-{platform.machine()}"


def system_nvcc_release(env: Mapping[str, str]) -> str | None:
    """`13.0`: the CUDA release of the system's nvcc (CUDA_HOME, PATH, /usr/local/cuda*), None without one."""
    nvcc = find_nvcc(env)
    m = re.search(r"release (\d+\.\d+)", (process.probe([nvcc, "--version"], env=env) or "") if nvcc else "")
    return m.group(1) if m else None


def require_wheels_for(cuda: str, cuda_source: str = "wheels", env: Mapping[str, str] | None = None) -> None:
    """Refuse at once a CUDA release PyPI has no compiler wheels for (before any environment is made): with
    `cuda_source = "auto"` only when the system's nvcc is not that release either."""
    major, minor = major_minor(cuda)
    mm = f"{major}.{minor}"
    if cuda_source == "auto" and major < FIRST_MAJOR:
        found = system_nvcc_release(env or {})
        if found and major_minor(found) == (major, minor):
            return
    if major < FIRST_MAJOR:
        # Seen 2026-12-03: nvidia-cuda-nvcc-cu12 12.8.93 holds bin/ptxas, nvvm/lib64/libnvvm.so, libdevice and
        # the crt headers only: no nvcc driver, cicc, cudafe++, fatbinary or nvlink, so nothing compiles a .cu.
        raise ToolchainError(
            f"no PyPI toolkit for CUDA {mm}: the CUDA {major} wheels (nvidia-cuda-nvcc-cu{major}) hold ptxas and "
            f"libnvvm but no nvcc, cicc or cudafe++; the nvidia-cuda-nvcc wheels are a whole compiler from CUDA "
            f"{FIRST_MAJOR}.0 on",
            hint=f'install the CUDA {mm} toolkit (e.g. /usr/local/cuda-{mm}) and set [toolchain] cuda_source = '
                 f'"system" in an overlay recipe (extends = ...), with its nvcc first on PATH or CUDA_HOME')


def ensure_toolkit(cache_dir: Path, cuda: str, *, python: str, env: Mapping[str, str],
                   offline: bool = False) -> Toolkit:
    """The cached toolkit for CUDA `cuda` (major.minor), installed from PyPI when missing.

    Installed with `python -m pip install --target` into a `.partial-` sibling under a
    file lock, assembled, smoke-compiled, then renamed into place: a folder without its
    marker is never trusted. `python` is also asked where torch lives, for the overlay of
    cuBLAS/cuSPARSE headers from torch's own nvidia wheels. pip and the smoke compile run
    in `env` (the plan's environment).
    """
    major, minor = major_minor(cuda)
    mm = f"{major}.{minor}"
    require_wheels_for(mm)
    final = toolkit_dir(cache_dir, mm)
    found = _load(final, python)
    if found:
        return found
    if offline:
        raise ToolchainError(f"offline and no CUDA {mm} toolkit is cached in {final}",
                             hint="run once with network to fetch nvidia-cuda-nvcc & co. from PyPI,"
                                  " or use cuda_source = \"system\"")
    final.parent.mkdir(parents=True, exist_ok=True)
    log = final.parent / f"{final.name}.log"
    with FileLock(str(final) + ".lock"):
        found = _load(final, python)
        if found:
            return found
        atomic.sweep(final)  # left by a killed run: we hold the lock
        with atomic.folder(final, replace=True) as tmp:  # replaces another layout, or one without marker
            start = time.monotonic()
            reqs = requirements(mm)
            _pip_install(python, tmp, reqs, mm, log, env)
            root = assemble(tmp, major)
            version = nvcc_version(root / "bin" / "nvcc")
            if not version.startswith(f"{mm}."):
                raise ToolchainError(f"the nvcc installed for CUDA {mm} says it is {version}", hint=f"see {log}")
            smoke_compile(root / "bin" / "nvcc", tmp, log, env)
            marker = {
                "layout": LAYOUT, "cuda": mm, "machine": platform.machine(), "version": version,
                "root": str(root.relative_to(tmp)), "requirements": list(reqs), "packages": installed_versions(tmp),
                "created": dt.datetime.now(dt.timezone.utc).isoformat(), "seconds": round(time.monotonic() - start, 1),
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True))
    made = _load(final, python, cached=False)
    assert made is not None
    return made


def find_cached(cache_dir: Path, cuda: str, *, python: str) -> Toolkit | None:
    """The cached toolkit for CUDA `cuda`, or None; never installs (for `doctor` and `plan`)."""
    return _load(toolkit_dir(cache_dir, cuda), python)


def _load(final: Path, python: str, *, cached: bool = True) -> Toolkit | None:
    """The toolkit in `final` if it is complete and of this layout and machine."""
    try:
        marker = json.loads((final / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("layout") != LAYOUT or marker.get("machine") != platform.machine():
        return None
    root = final / marker["root"]
    nvcc = root / "bin" / "nvcc"
    if not nvcc.is_file():
        return None
    packages = tuple(sorted(marker["packages"].items()))
    return Toolkit(cuda=marker["cuda"], root=root, nvcc=nvcc, version=marker["version"], packages=packages,
                   defines=cmake_defines(root, torch_site(python), final.parent), cached=cached)


def _pip_install(python: str, target: Path, reqs: Sequence[str], mm: str, log: Path, env: Mapping[str, str]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    # pip unpacks into TMPDIR, then moves into --target: keep both on one file system.
    scratch = target / ".pip-tmp"
    scratch.mkdir()
    cmd = [python, "-m", "pip", "install", "--target", str(target), "--only-binary=:all:", "--no-compile",
           "--no-cache-dir", "--disable-pip-version-check", "--no-warn-script-location", "--progress-bar", "off",
           *reqs]
    # Settings that contradict --target would make pip refuse or install elsewhere.
    clash = ("PIP_TARGET", "PIP_PREFIX", "PIP_USER", "PIP_REQUIRE_VIRTUALENV")
    child = {k: v for k, v in env.items() if k not in clash}
    child.update(TMPDIR=str(scratch), PIP_NO_INPUT="1")
    proc = process.run(cmd, error=ToolchainError, what=f"cannot run pip with {python}", fix="give a python that has pip",
                       env=child, log=log, check=False)
    shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode:
        raise pip_error(proc.stdout + proc.stderr, mm, log)


def pip_error(output: str, mm: str, log: Path | None = None) -> ToolchainError:
    """pip's failure as one line: which requirement had no match, and what the index has."""
    where = f"; full log: {log}" if log else ""
    m = re.search(r"Could not find a version that satisfies the requirement (\S+) \(from versions: ([^)]*)\)", output)
    if m:
        req, listed = m.group(1), m.group(2).strip()
        name = re.split(r"[=<>!~]", req, maxsplit=1)[0]
        if listed == "none":
            return ToolchainError(f"no CUDA {mm} toolkit: pip found no {name} at all (no network or no index?){where}",
                                  hint="check network / PIP_INDEX_URL, or build offline with a cached toolkit")
        return ToolchainError(f"no CUDA {mm} toolkit on the package index: pip finds no {req}; "
                              f"{name} has CUDA {', '.join(_cuda_releases(listed)) or 'none'}{where}",
                              hint="use a torch built for one of those CUDA releases, or cuda_source = \"system\"")
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR")]
    last = errors[-1] if errors else (output.strip().splitlines() or ["(no output)"])[-1].strip()
    return ToolchainError(f"installing the CUDA {mm} toolkit from PyPI failed: {last}{where}",
                          hint="check network / PIP_INDEX_URL, or use cuda_source = \"system\"")


def _cuda_releases(listed: str) -> list[str]:
    """major.minor of the final releases in pip's `from versions:` list, in order."""
    seen: dict[tuple[int, int], None] = {}
    for item in listed.split(","):
        try:
            v = Version(item.strip())
        except InvalidVersion:
            continue
        if not v.is_prerelease and v.major >= 1:
            seen[(v.major, v.minor)] = None
    return [f"{a}.{b}" for a, b in sorted(seen)]


def installed_versions(target: Path) -> dict[str, str]:
    """{distribution: version} from the *.dist-info folders pip wrote into --target."""
    found = {}
    for info in target.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        found[name.replace("_", "-").lower()] = version
    return dict(sorted(found.items()))



def choose(cuda_source: str, system_facts: Facts, torch_cuda: str, archs: Sequence[Arch]) -> tuple[str, str]:
    """("system" | "wheels", why): where nvcc comes from for this build.

    `auto` takes the system toolkit when its nvcc is torch's CUDA major.minor and knows
    every requested arch, the PyPI wheels for torch's CUDA otherwise. `system` that does
    not fit, and `wheels` / `auto` that cannot fit either, are one-line ToolchainErrors.
    """
    if cuda_source not in ("auto", "system", "wheels"):
        raise ToolchainError(f"cuda_source {cuda_source!r} is not one of auto, system, wheels",
                             hint="set [toolchain] cuda_source to auto, system or wheels")
    if not torch_cuda:
        raise ToolchainError("torch has no CUDA (a CPU build?): cannot match a CUDA toolkit to it",
                             hint="install a CUDA build of torch (e.g. +cu130)")
    major, minor = major_minor(torch_cuda)
    want = f"{major}.{minor}"
    f = system_facts
    unknown = [a.sm for a in archs if f.nvcc_archs and f"{a.major}{a.minor}" not in f.nvcc_archs]
    if not f.nvcc:
        misfit = "no system nvcc found"
    elif not f.nvcc_version or major_minor(f.nvcc_version) != (major, minor):
        misfit = f"system nvcc is CUDA {f.nvcc_version or '?'} ({f.nvcc}), torch is built for CUDA {want}"
    elif unknown:
        misfit = f"system nvcc {f.nvcc_version} ({f.nvcc}) cannot target {', '.join(unknown)}"
    else:
        misfit = ""
    if cuda_source == "system":
        if misfit:
            raise ToolchainError(f"cuda_source = \"system\" but {misfit}",
                                 hint=f"install CUDA {want} and set CUDA_HOME,"
                                      " or use cuda_source = \"auto\" / \"wheels\"")
        return "system", f"system nvcc {f.nvcc_version} ({f.nvcc}) as the recipe asks"
    if cuda_source == "auto" and not misfit:
        return "system", (f"system nvcc {f.nvcc_version} ({f.nvcc}) matches torch's CUDA {want}"
                          f" and knows {', '.join(a.sm for a in archs) or 'every arch'}")
    too_old = [a.sm for a in archs if (a.major, a.minor) in MIN_CUDA
               and (major, minor) < major_minor(MIN_CUDA[(a.major, a.minor)])]
    if too_old:
        raise ToolchainError(f"CUDA {want} (torch's) cannot target {', '.join(too_old)}"
                             + (f" and {misfit}" if cuda_source == "auto" else ""),
                             hint="use a torch built for a newer CUDA, or build for other archs")
    if major < FIRST_MAJOR:
        # Seen 2026-12-07: every nvidia-cuda-nvcc-cu12 on PyPI (12.0.76 ... 12.9.86) ships bin/ptxas, libnvvm and
        # libdevice only: no nvcc driver, cicc or cudafe++ (tests/test_cudawheels.py checks 12.8.93 from PyPI).
        no_layout = (f"PyPI has no CUDA {want} compiler (nvidia-cuda-nvcc-cu{major} holds ptxas and libnvvm but no "
                     f"nvcc, cicc or cudafe++; the nvidia-cuda-nvcc wheels are a whole compiler from CUDA "
                     f"{FIRST_MAJOR}.0 on)")
        raise ToolchainError(f"{misfit}, and {no_layout}" if cuda_source == "auto"
                             else f"cuda_source = \"wheels\": {no_layout}",
                             hint=f"install CUDA {want} (e.g. /usr/local/cuda-{want}) with cuda_source = \"system\" "
                                  f"in an overlay, or build against a CUDA {FIRST_MAJOR} torch from PyPI (e.g. "
                                  f"[toolchain] torch = \"2.14.1\", cuda = \"{FIRST_MAJOR}.0\")")
    if cuda_source == "wheels":
        return "wheels", f"CUDA {want} from PyPI wheels (nvidia-cuda-nvcc=={want}.*) as the recipe asks"
    return "wheels", f"{misfit}: CUDA {want} from PyPI wheels (nvidia-cuda-nvcc=={want}.*)"
