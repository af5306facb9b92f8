"""The compilers that link the build's libraries, as CMake resolves them, and a working choice.

CMake links C++ shared libraries with the C++ compiler (`CMAKE_CXX_COMPILER`, else `CXX`, else
`c++` on PATH) and CUDA shared libraries with the CUDA host compiler (`CMAKE_CUDA_HOST_COMPILER`,
else `CUDAHOSTCXX`, else the compiler nvcc runs by default: `NVCC_CCBIN`, else `g++` on PATH).
Either one may link libstdc++ statically (a GCC installed with only `libstdc++.a`, as on one GPU
host: `CUDAHOSTCXX=/opt/gcc/bin/g++`); then every library carries its own libstdc++, and its C++
streams crash beside torch's libstdc++.so.6. So each one is probed before configure: it links a
probe library (`check_cxx_runtime`), and nvcc is asked whether it accepts it (`check_host_compiler`).

`[toolchain] host_compiler`: `auto` (default) keeps the environment's compilers when they link
libstdc++ shared and otherwise picks one that does, accepted by nvcc, and says which; `environment`
refuses instead, naming the variable and a working compiler; a path uses that compiler.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import process
from build_kernel.errors import ToolchainError
from build_kernel.process import which

SETTINGS = ("auto", "environment")
CXX_ROLE, CUDA_ROLE = "C++ compiler", "CUDA host compiler"


@dataclass(frozen=True)
class Linker:
    """One compiler that links libraries: what it links and which setting named it."""

    role: str
    source: str  # the variable, define or default that named it, e.g. "CUDAHOSTCXX"
    path: str | None


@dataclass
class Resolution:
    """The linkers as the environment names them, what the build must set instead, and why."""

    setting: str
    linkers: list[Linker]
    chosen: str | None = None  # the compiler put in their place (None: the environment's are kept)
    env: dict[str, str] = field(default_factory=dict)  # build-environment overrides
    defines: dict[str, str] = field(default_factory=dict)  # CMake define overrides
    why: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["linkers"] = [asdict(lk) for lk in self.linkers]
        return out


def _resolve(name: str | None, env: Mapping[str, str]) -> str | None:
    if not name:
        return None
    return name if os.sep in name else which(name, env.get("PATH"))


def linkers(env: Mapping[str, str], defines: Mapping[str, str]) -> list[Linker]:
    """The C++ compiler and the CUDA host compiler, each as CMake would pick it."""
    if defines.get("CMAKE_CXX_COMPILER"):
        cxx = Linker(CXX_ROLE, "CMAKE_CXX_COMPILER define", _resolve(defines["CMAKE_CXX_COMPILER"], env))
    elif env.get("CXX"):
        cxx = Linker(CXX_ROLE, "CXX", _resolve(env["CXX"], env))
    else:
        cxx = Linker(CXX_ROLE, "c++ on PATH", _resolve("c++", env) or _resolve("g++", env))
    if defines.get("CMAKE_CUDA_HOST_COMPILER"):
        cuda = Linker(CUDA_ROLE, "CMAKE_CUDA_HOST_COMPILER define", _resolve(defines["CMAKE_CUDA_HOST_COMPILER"], env))
    elif env.get("CUDAHOSTCXX"):
        cuda = Linker(CUDA_ROLE, "CUDAHOSTCXX", _resolve(env["CUDAHOSTCXX"], env))
    elif env.get("NVCC_CCBIN"):
        cuda = Linker(CUDA_ROLE, "NVCC_CCBIN", _resolve(env["NVCC_CCBIN"], env))
    else:
        cuda = Linker(CUDA_ROLE, "g++ on PATH (nvcc's default)", _resolve("g++", env))
    return [cxx, cuda]


# Flags CMake takes from the environment at configure (CMAKE_<LANG>_FLAGS_INIT, *_LINKER_FLAGS_INIT).
_FLAG_VARIABLES = ("LDFLAGS", "CXXFLAGS", "CFLAGS", "CUDAFLAGS")


_PROBE_SOURCE = "#include <sstream>\nint probe(int v) { std::ostringstream o; o << v; return (int)o.str().size(); }\n"


def static_flag_problem(env: Mapping[str, str]) -> str | None:
    """-static-libstdc++ (or -static) in the flags CMake takes from the environment, named."""
    for name in _FLAG_VARIABLES:
        if bad := [f for f in env.get(name, "").split() if f in ("-static-libstdc++", "-static")]:
            return (f"{name} has {bad[0]}: every library would carry its own libstdc++, whose streams crash beside "
                    f"torch's libstdc++.so.6; unset it or remove {bad[0]} (e.g. `env -u {name} build-kernel ...`)")
    return None


def check_cxx_runtime(cxx: str | None, env: Mapping[str, str]) -> str | None:
    """Whether the libraries would link libstdc++ shared, as torch does.

    A library linked with libstdc++.a exports its own copy, which mixes with torch's
    libstdc++.so.6 at run time: its C++ streams crash (verify's `carries its own libstdc++`).
    -static-libstdc++ (or -static) in the flags CMake takes from the environment is named
    first; otherwise a shared library is linked here with the compiler and those flags (a
    wrapper, a specs file or a compiler without libstdc++.so links it in just the same)."""
    from build_kernel.stages.verify.diagnose import embedded_libstdcxx  # ELF reading lives with verify

    if problem := static_flag_problem(env):
        return problem
    compiler = cxx or which("c++", env.get("PATH")) or which("g++", env.get("PATH"))
    if not compiler:
        return None  # no compiler: the host-compiler check says so
    with tempfile.TemporaryDirectory(prefix="bk-cxx-") as tmp:
        src, lib = Path(tmp) / "probe.cpp", Path(tmp) / "libprobe.so"
        src.write_text(_PROBE_SOURCE)
        flags = [*env.get("CXXFLAGS", "").split(), "-shared", "-fPIC", str(src), "-o", str(lib),
                 *env.get("LDFLAGS", "").split()]
        if process.probe([compiler, *flags], env=dict(env)) is None or not lib.exists():
            return None  # it cannot link at all: configure says why, with the compiler's own words
        if not embedded_libstdcxx(lib):
            return None
    found = (process.probe([compiler, "-print-file-name=libstdc++.so"], env=dict(env), merge=False) or "").strip()
    why = (f"it finds no libstdc++.so (`-print-file-name=libstdc++.so` prints {found!r}): install the compiler's "
           "libstdc++ development files (e.g. libstdc++-13-dev)" if not Path(found).is_absolute() else
           "its specs or a wrapper add -static-libstdc++: use a compiler that links libstdc++ shared (set CXX)")
    return (f"{compiler} links libstdc++ into shared libraries (a probe library exports std::locale), so every "
            f"library would carry its own, whose streams crash beside torch's libstdc++.so.6; {why}")


def check_host_compiler(nvcc: str, cxx: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """Ask nvcc itself whether it accepts the host compiler (its host_config.h decides).

    `env`: the environment nvcc runs in (None: this process's)."""
    cmd = [nvcc, "-x", "cu", "-E", "-", "-o", os.devnull]
    if cxx:
        cmd[1:1] = ["-ccbin", cxx]
    try:
        proc = process.run(cmd, error=ToolchainError, what=f"nvcc could not run the host compiler {cxx or 'default'}",
                           env=env, stdin="", timeout=60, check=False)
    except ToolchainError as exc:  # nvcc missing or hanging: that is the answer
        return exc.render()
    if proc.returncode == 0:
        return None
    tmpdir = env.get("TMPDIR") if env is not None else None  # every caller passes the plan's environment
    if tmpdir and "Could not open output file" in proc.stderr and not os.path.isdir(tmpdir):
        # nvcc writes its intermediate files there and says only that it could not open one
        what = "is not a folder" if os.path.exists(tmpdir) else "does not exist"
        return f"TMPDIR={tmpdir} {what}, and nvcc writes its temporary files there (create it, or unset TMPDIR)"
    reason = next((l for l in proc.stderr.splitlines() if "error" in l), proc.stderr.strip()[:200])
    return f"nvcc rejects host compiler {cxx or 'default'}: {reason.strip()} (install a supported gcc and set CXX / CUDAHOSTCXX)"


def _candidates(env: Mapping[str, str], bad: set[str]) -> list[str]:
    """Other C++ compilers on this host, the distribution's first (it links libstdc++ shared)."""
    found = ["/usr/bin/g++", _resolve("g++", env), _resolve("c++", env),
             *sorted((str(p) for p in Path("/usr/bin").glob("g++-[0-9]*")), reverse=True)]
    out: list[str] = []
    for path in found:
        if path and Path(path).is_file() and os.path.realpath(path) not in bad and path not in out:
            out.append(path)
    return out


def _working(compiler: str, env: Mapping[str, str], nvcc: str | None) -> str | None:
    """Why `compiler` cannot link the libraries (None: it can)."""
    return check_cxx_runtime(compiler, env) or (
        check_host_compiler(nvcc, compiler, env=env) if nvcc else None)


def _sibling_cc(cxx: str) -> str | None:
    """The C compiler of the same installation (`/usr/bin/g++-12` -> `/usr/bin/gcc-12`)."""
    path = Path(cxx)
    name = path.name.replace("g++", "gcc", 1) if "g++" in path.name else None
    return str(path.with_name(name)) if name and path.with_name(name).is_file() else None


def resolve(setting: str, env: Mapping[str, str], defines: Mapping[str, str], nvcc: str | None) -> Resolution:
    """Probe each linker (a real shared-library link); keep, replace or refuse them per `setting`."""
    found = linkers(env, defines)
    res = Resolution(setting, found)
    flags = static_flag_problem(env)
    if flags:  # no other compiler helps: the flags themselves link libstdc++ in
        res.problems.append(flags)
        return res
    if setting not in SETTINGS:  # a path: that compiler for both roles, or nothing
        chosen = _resolve(setting, env)
        why = _working(chosen, env, nvcc) if chosen else f"[toolchain] host_compiler = {setting!r} is not a compiler here"
        if why:
            res.problems.append(f"{why} (set [toolchain] host_compiler to a compiler that links libstdc++ shared, "
                                "or \"auto\")")
            return res
        assert chosen is not None
        return _use(res, chosen, [f"host compiler {chosen}: [toolchain] host_compiler"])
    broken: dict[Linker, str] = {}
    # One probe per compiler: the two roles are often one binary (`c++` and `g++` -> g++-12), and a probe is a
    # real compile and link of <sstream> (~1 s).
    probed: dict[str, str | None] = {}
    for linker in found:
        if not linker.path:
            continue
        real = os.path.realpath(linker.path)
        if real not in probed:
            probed[real] = check_cxx_runtime(linker.path, env)
        if why := probed[real]:
            broken[linker] = why
    if not broken:
        return res
    bad = {os.path.realpath(lk.path) for lk in broken if lk.path}
    good = next((c for c in _candidates(env, bad) if _working(c, env, nvcc) is None), None)
    named = "; ".join(f"{lk.source}={lk.path} ({lk.role}) links libstdc++ statically" for lk in broken)
    if setting == "environment" or good is None:
        [(first, why)] = list(broken.items())[:1]
        fix = (f"set {' '.join(f'{v}={good}' for v in _variables(broken))} (or [toolchain] host_compiler = \"auto\" "
               "picks it)" if good else "install a compiler with a shared libstdc++ (e.g. apt-get install g++) and "
               "set CXX and CUDAHOSTCXX to it")
        res.problems.append(f"{first.source}={first.path} ({first.role}) {_reason(why)}; {fix}")
        return res
    return _use(res, good, [f"host compiler {good}: {named}, which would put a second libstdc++ in every library"])


def _variables(broken: Mapping[Linker, str]) -> list[str]:
    """What to set: both compiler variables, and the define where one named a broken compiler."""
    return ["CXX", "CUDAHOSTCXX", *sorted(lk.source.split()[0] for lk in broken if "define" in lk.source)]


def _reason(why: str) -> str:
    """check_cxx_runtime's sentence without the compiler it starts with."""
    return why.split(" ", 1)[1] if " " in why else why


def _use(res: Resolution, compiler: str, why: list[str]) -> Resolution:
    res.chosen, res.why = compiler, why
    res.env = {"CXX": compiler, "CUDAHOSTCXX": compiler}
    if cc := _sibling_cc(compiler):
        res.env["CC"] = cc
    res.defines = {"CMAKE_CUDA_HOST_COMPILER": compiler}
    return res
