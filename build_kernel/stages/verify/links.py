"""Each library of a wheel linked as the dynamic loader links it at import, every symbol bound now.

`ldd -r` runs the loader in trace mode: it finds the libraries a file needs and binds every symbol, and reports
what it could not, without running any of the file's code (so the two common_ops variants, which register the
same torch ops, are checked side by side, and the static checks get it too).

A symbol no loaded library defines is a call into code the build left out. A Python extension may link with
undefined symbols, so the build passes; its import then fails with `undefined symbol`, and a package that catches
that (sgl_kernel's flash_mla.py does) hides it until its first call. Seen on the H100, 2026-12-06: a 9.0a
sglang-kernel 0.4.3 whose series dropped FlashMLA's SM100 sources while FlashMLA's host dispatch still calls them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_kernel import process
from build_kernel.errors import VerifyError

# The interpreter defines the Python API; an extension module never links libpython.
_PYTHON_API = re.compile(r"_?Py[A-Z_a-z]")
_UNDEFINED = re.compile(r"^undefined symbol: ([^\s,]+)", re.M)
_NOT_FOUND = re.compile(r"^\s*(\S+) => not found", re.M)
_VERSION = re.compile(r"(?:^|/)([^/\s:]+): version `([^']+)' not found", re.M)
# torch's lib folder and those of the CUDA wheels it loads first (nvidia/*/lib: an extension needing libcublas.so.13
# gets the copy `import torch` loaded), found without importing torch (a static verify may meet another torch).
_TORCH_LIBS = """
import glob, importlib.util, os
torch = importlib.util.find_spec("torch")
if torch and torch.origin:
    print(os.path.join(os.path.dirname(torch.origin), "lib"))
    nvidia = os.path.join(os.path.dirname(os.path.dirname(torch.origin)), "nvidia")
    print("\\n".join(sorted(glob.glob(os.path.join(nvidia, "*", "lib")) + glob.glob(os.path.join(nvidia, "*", "*", "lib")))))
"""


@dataclass(frozen=True)
class Links:
    """What the loader could not bind for one library."""

    undefined: tuple[str, ...] = ()  # mangled names neither Python's nor any loaded library's
    not_found: tuple[str, ...] = ()  # sonames it needs that this host lacks
    versions: tuple[str, ...] = ()   # symbol versions this host's libraries lack: "GLIBC_2.38 (libc.so.6)"

    @property
    def clean(self) -> bool:
        return not (self.undefined or self.not_found or self.versions)

    def to_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in (("undefined", self.undefined), ("not_found", self.not_found),
                                        ("versions", self.versions)) if v}


def parse(output: str) -> Links:
    """`ldd -r`'s report (stdout and stderr together)."""
    undefined = sorted({s for s in _UNDEFINED.findall(output) if not _PYTHON_API.match(s)})
    not_found = sorted(set(_NOT_FOUND.findall(output)))
    versions = sorted({f"{version} ({lib})" for lib, version in _VERSION.findall(output)})
    return Links(tuple(undefined), tuple(not_found), tuple(versions))


def torch_libs(python: str, env: Mapping[str, str]) -> list[Path]:
    """The folders of torch's libraries and its CUDA wheels' in `python`'s environment (an extension finds libc10,
    libtorch and libcublas by soname: `import torch` loaded them)."""
    out = process.probe([python, "-c", _TORCH_LIBS], env=env, merge=False) or ""
    return [Path(line) for line in out.splitlines() if line.strip() and Path(line).is_dir()]


def check(so: Path, ld_library_path: Sequence[Path], env: Mapping[str, str]) -> Links:
    """Bind every symbol of `so` as its import would, with `ld_library_path` first on the loader's path."""
    run_env = dict(env)
    run_env["LD_LIBRARY_PATH"] = os.pathsep.join([*(str(p) for p in ld_library_path),
                                                  *filter(None, [env.get("LD_LIBRARY_PATH", "")])])
    proc = process.run(["ldd", "-r", so], error=VerifyError, what=f"ldd -r {so.name}",
                       fix="install glibc's ldd: libc-bin on Debian/Ubuntu, glibc-common on RHEL", env=run_env,
                       timeout=120, check=False)
    return parse(proc.stdout + proc.stderr)
