"""System prerequisites of a build (`[system.NAME]` in the recipe), checked before anything runs.

The host C compiler is asked, not a list of folders guessed: a header is there when
`cc -E` can include it (CPATH, a sysroot and multiarch folders included), a library when
`cc -print-file-name=libX.so` (or `.a`) resolves to a path, which is how the link and
CMake's find_library will look. A missing one is a one-line problem naming what needs it
and the package that provides it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from build_kernel import process
from build_kernel.recipe.model import SystemDep


@dataclass(frozen=True)
class Status:
    dep: SystemDep
    missing: tuple[str, ...]  # headers and lib<name> not found; empty: present

    @property
    def ok(self) -> bool:
        return not self.missing

    def problem(self) -> str:
        d = self.dep
        installs = [f"apt-get install {d.apt}" if d.apt else "", f"dnf install {d.dnf}" if d.dnf else ""]
        fix = " or ".join(i for i in installs if i) or f"install the development files of {d.name}"
        return (f"system prerequisite {d.name} missing ({', '.join(self.missing)} not found by the C compiler)"
                f"{f', needed by {d.needed_by}' if d.needed_by else ''}: {fix}")

    def to_dict(self) -> dict[str, object]:
        return {"name": self.dep.name, "needed_by": self.dep.needed_by, "ok": self.ok, "missing": list(self.missing),
                "apt": self.dep.apt, "dnf": self.dep.dnf}


def _has_header(cc: str, header: str, env: Mapping[str, str]) -> bool:
    return process.probe([cc, "-xc", "-E", "-o", "/dev/null", "-"], env=env, stdin=f"#include <{header}>\n") is not None


def _has_library(cc: str, name: str, env: Mapping[str, str]) -> bool:
    for file in (f"lib{name}.so", f"lib{name}.a"):
        # Not found, the compiler prints the bare name back.
        found = Path((process.probe([cc, f"-print-file-name={file}"], env=env, merge=False) or "").strip())
        if found.is_absolute() and found.exists():
            return True
    return False


def check(deps: tuple[SystemDep, ...], env: Mapping[str, str], cc: str | None = None) -> list[Status]:
    """The status of each prerequisite, asking `cc` (default: $CC, else cc)."""
    if not deps:
        return []
    compiler = cc or env.get("CC") or "cc"
    if not process.which(compiler, path=env.get("PATH")):
        return [Status(d, (f"a C compiler ({compiler}) to look for it",)) for d in deps]
    return [Status(d, tuple([h for h in d.headers if not _has_header(compiler, h, env)]
                            + [f"lib{n}" for n in d.libraries if not _has_library(compiler, n, env)]))
            for d in deps]


def problems(deps: tuple[SystemDep, ...], env: Mapping[str, str], cc: str | None = None) -> list[str]:
    return [s.problem() for s in check(deps, env, cc) if not s.ok]
