"""How the build's compiles are recorded and started: the recorder launcher and the governor.

`[build] profile = true` puts the recorder in front of every CUDA/C++ compile, composed
with the compile-cache launcher when there is one:

    CMAKE_<LANG>_COMPILER_LAUNCHER = <python>;-S;<...>/recorder.py;--db;<db>;--strip;<src>;--;<cache launcher...>

(the recorder by its path, not `-m`: see recorder.py for the start-up cost that avoids)

`[build] scheduler = "governor"` runs the build under the jobserver FIFO (jobserver.py) with
per-TU predictions from that profile (planner.py); ninja older than 1.13 cannot be a
jobserver client, so the build then runs with the static job count and says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from build_kernel import log
from build_kernel.errors import RecipeError
from build_kernel.plan import Plan
from build_kernel.resources import GB, probe
from build_kernel.stages.build import jobserver, planner, profile, recorder

LANGUAGES = ("CUDA", "CXX", "C")  # as the compile cache sets them
RECORDER = str(Path(recorder.__file__).resolve())
SCHEDULERS = ("static", "governor")


def db_path(plan: Plan) -> Path:
    return plan.cache_dir / profile.FILE


def default_bytes(plan: Plan) -> int:
    """The built-in prediction of a TU never compiled here: the recipe's per-job GB x archs in flight."""
    b = plan.recipe.build
    return int(b.job_memory_gb * max(1, min(b.nvcc_threads, len(plan.archs))) * GB)


def launcher_defines(plan: Plan, python: str, src: Path, defines: Mapping[str, str]) -> dict[str, str]:
    """`defines` with the recorder in front of each language's launcher (the cache's, if any)."""
    if not plan.recipe.build.profile:
        return dict(defines)
    recorder = [python, "-S", RECORDER, "--db", str(db_path(plan)), "--strip", str(src), "--"]
    out = dict(defines)
    for lang in LANGUAGES:
        key = f"CMAKE_{lang}_COMPILER_LAUNCHER"
        out[key] = ";".join([*recorder, *([defines[key]] if defines.get(key) else [])])
    return out


@dataclass(frozen=True)
class Scheduling:
    governor: jobserver.Governor | None
    tus: list[planner.TU]
    why: str


def choose(plan: Plan, ninja_version: str | None, work: Path) -> Scheduling:
    """The governor when the recipe asks for it and ninja can follow it; the static job count otherwise."""
    name = plan.recipe.build.scheduler
    if name not in SCHEDULERS:
        raise RecipeError([f"{plan.recipe.path}: build.scheduler: {name!r} is not one of {', '.join(SCHEDULERS)} "
                           "(e.g. scheduler = \"governor\")"])
    tus = planner.plan_tus(db_path(plan), default_bytes(plan))
    if name == "static":
        return Scheduling(None, tus, plan.jobs.derivation)
    if not jobserver.supports_jobserver(ninja_version):
        why = (f"scheduler = \"governor\" needs ninja >= 1.13 (a jobserver client), this is {ninja_version or 'none'}: "
               f"static job count instead ({plan.jobs.derivation}); pip install 'ninja>=1.13' in the build environment")
        log.warn(why)
        return Scheduling(None, tus, why)
    reserve = int(plan.recipe.build.reserve_gb * GB)
    budget = plan.resources.memory_bytes - reserve
    gov = jobserver.Governor(work / "jobserver", budget=budget, predictions={t.source: t.peak_bytes for t in tus},
                             default=default_bytes(plan), complete=False, max_jobs=plan.resources.cpus,
                             available=lambda: probe().memory_bytes, reserve=reserve)
    known = sum(1 for t in tus if t.how != "default")
    why = (f"governor: jobserver FIFO, a compile starts while free memory ({plan.resources.memory_why}) - "
           f"{plan.recipe.build.reserve_gb:g} GB covers the predicted peaks; {known} TU(s) predicted from the profile, "
           f"others {default_bytes(plan) / GB:g} GB (default); ninja's own edge order (CMake's build.ninja is not reordered)")
    return Scheduling(gov, tus, why)


@contextmanager
def running(s: Scheduling) -> Iterator[dict[str, str]]:
    """The environment changes the build runs with: the FIFO in MAKEFLAGS and no -j, under the governor."""
    if s.governor is None:
        yield {}
        return
    with s.governor as gov:
        yield {"MAKEFLAGS": gov.makeflags, "CMAKE_BUILD_PARALLEL_LEVEL": ""}


def eta(tus: list[planner.TU], jobs: int) -> planner.EtaFromLines:
    return planner.EtaFromLines(tus, jobs)
