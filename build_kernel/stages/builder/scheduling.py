"""How the build's compiles are recorded and started: the recorder launcher and the governor.

`[build] profile = true` puts the recorder in front of every CUDA/C++ compile, composed
with the compile-cache launcher when there is one:

    CMAKE_<LANG>_COMPILER_LAUNCHER = <python>;-S;<...>/recorder.py;--db;<db>;--project;<key>;--strip;<src>;--strip;deps/<name>=<dir>;...;--;<cache launcher...>

(sources named relative to the tree, a dependency's as `deps/<its FetchContent name>/...`, so that a
profile measured on another machine, cache folder or dependency pin names them alike)

(the recorder by its path, not `-m`: see recorder.py for the start-up cost that avoids)

`[build] scheduler = "governor"` runs the build under the jobserver FIFO (jobserver.py) with
per-TU predictions from that profile (planner.py); ninja older than 1.13 cannot be a
jobserver client, so the build then runs with the static job count and says so. The default,
`auto`, is the governor where ninja can follow it and static otherwise (said in the log).

Whatever the scheduler, CMAKE_MAKE_PROGRAM is ninja_order's script: build.ninja's compiles
start longest first by the recorded (else the recipe's shipped) compile times.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from build_kernel import log
from build_kernel.errors import RecipeError
from build_kernel.plan import Plan
from build_kernel.recipe.model import SCHEDULERS
from build_kernel.resources import GB, probe
from build_kernel.stages.builder import jobserver, ninja_order, planner, profile, recorder

LANGUAGES = ("CUDA", "CXX", "C")  # as the compile cache sets them
RECORDER = str(Path(recorder.__file__).resolve())
ENV = "BUILD_KERNEL_SCHEDULER"  # --compile-scheduler sets it


def db_path(plan: Plan) -> Path:
    return plan.cache_dir / profile.FILE


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/]*@)?([^/]*)(/.*)?$")  # scheme://[user@]host[/path]
_SCP = re.compile(r"^(?:[^@/:]+@)?([^/:]{2,}):(?!//)(.+)$")  # git's user@host:path form (not C:\ nor a scheme)


def project_key(repo: str, subdir: str = "") -> str:
    """Whose compiles a profile row holds: the recipe's source repository and subdir, spelled alike however the
    URL is written (`https://github.com/o/r.git`, `git@github.com:o/r` -> `github.com/o/r`), so one project
    reads its rows wherever it is checked out and built, and another project in the same cache does not.
    A local repository is known by its folder's name (`local:NAME`): moved, it is still itself."""
    text = repo.strip().rstrip("/").removesuffix(".git").rstrip("/")
    url, scp = _URL.match(text), _SCP.match(text)
    if text.startswith("example:"):
        key = text  # a bundled miniature, by its name
    elif text.startswith("file:") or text.startswith(("/", "./", "../", "~")) or (url is None and scp is None
                                                                                and "/" in text):
        key = "local:" + Path(text.removeprefix("file://")).name
    elif url is not None:
        key = url.group(1).lower() + (url.group(2) or "")
    elif scp is not None:
        key = f"{scp.group(1).lower()}/{scp.group(2).lstrip('/')}"
    else:
        key = "local:" + text  # a bare folder name
    sub = subdir.strip("/")
    return f"{key}/{sub}" if sub else key


def edges_file(work: Path) -> Path:
    """Where the ninja wrapper installed in `work/bin` lists the build's compiles (the governor and the ETA read it)."""
    return work / "bin" / ninja_order.EDGES


def plan_project(plan: Plan) -> str:
    return project_key(plan.recipe.source.repo, plan.recipe.source.subdir)


def default_bytes(plan: Plan) -> int:
    """The built-in prediction of a TU never compiled here: the recipe's per-job GB x archs in flight."""
    b = plan.recipe.build
    return int(b.job_memory_gb * max(1, min(b.nvcc_threads, len(plan.archs))) * GB)


DEP_DIR = "FETCHCONTENT_SOURCE_DIR_"


def strip_roots(src: Path, defines: Mapping[str, str]) -> list[str]:
    """The recorder's --strip roots: the source tree, then each pre-fetched dependency as `deps/<name>=<dir>`."""
    deps = sorted((k[len(DEP_DIR):].lower(), v) for k, v in defines.items() if k.startswith(DEP_DIR) and v)
    return [str(src), *(f"deps/{name}={folder}" for name, folder in deps)]


def recorder_command(plan: Plan, python: str, src: Path, defines: Mapping[str, str]) -> list[str]:
    """The recorder as a launcher (`python -S recorder.py --db ... --`), or [] when the recipe records nothing."""
    if not plan.recipe.build.profile:
        return []
    strip = [w for root in strip_roots(src, defines) for w in ("--strip", root)]
    return [python, "-S", RECORDER, "--db", str(db_path(plan)), "--project", plan_project(plan), *strip, "--"]


def launcher_defines(plan: Plan, python: str, src: Path, defines: Mapping[str, str]) -> dict[str, str]:
    """`defines` with the recorder in front of each language's launcher (the cache's, if any)."""
    recorder = recorder_command(plan, python, src, defines)
    if not recorder:
        return dict(defines)
    out = dict(defines)
    for lang in LANGUAGES:
        key = f"CMAKE_{lang}_COMPILER_LAUNCHER"
        out[key] = ";".join([*recorder, *([defines[key]] if defines.get(key) else [])])
    return out


def shipped_tus(plan: Plan) -> dict[str, tuple[float, float]]:
    """source -> (seconds, peak GB) of the recipe's shipped profile, for the TUs it gives a peak."""
    path = plan.recipe.build.order_profile
    if not path:
        return {}
    rows = ninja_order.read_shipped_rows(path)
    return {source: (seconds, peak) for source, (seconds, peak) in rows.items() if peak is not None}


def make_program(plan: Plan, python: str, ninja: str | None, work: Path, src: Path,
                 defines: Mapping[str, str]) -> dict[str, str]:
    """`defines` with CMAKE_MAKE_PROGRAM = ninja_order's script in front of the recipe's make program or `ninja`."""
    real = defines.get("CMAKE_MAKE_PROGRAM") or ninja
    if not real:
        return dict(defines)  # no ninja found: scikit-build-core says so
    shipped = Path(plan.recipe.build.order_profile) if plan.recipe.build.order_profile else None
    data = ninja_order.predictions(db_path(plan), shipped, strip_roots(src, defines), project=plan_project(plan))
    script = ninja_order.install(work / "bin", python=python, ninja=real, build_dir=work / "cmake", data=data)
    return {**defines, "CMAKE_MAKE_PROGRAM": str(script)}


@dataclass(frozen=True)
class Scheduling:
    governor: jobserver.Governor | None
    tus: list[planner.TU]
    why: str


def governor(folder: Path, *, budget: int, predictions: dict[str, int], default: int, max_jobs: int,
             available: Callable[[], int], reserve: int, edges: Path | None = None,
             strip: Sequence[str] = ()) -> jobserver.Governor:
    """The governor as the build runs it (the bench uses this too): TUs the profile does not know may
    come (complete=False) until the ninja wrapper lists the configured build's compiles in `edges`."""
    return jobserver.Governor(folder, budget=budget, predictions=predictions, default=default, complete=False,
                              max_jobs=max_jobs, available=available, reserve=reserve, edges=edges, strip=strip)


def setting(plan: Plan) -> tuple[str, str]:
    """The scheduler asked for, and by whom: --compile-scheduler / BUILD_KERNEL_SCHEDULER, else the recipe (default auto)."""
    if plan.env.get(ENV):
        return plan.env[ENV], f"environment {ENV} (--compile-scheduler)"
    table = plan.recipe.raw.get("build")
    said = isinstance(table, dict) and "scheduler" in table
    return plan.recipe.build.scheduler, "the recipe" if said else "the default"


def choose(plan: Plan, ninja_version: str | None, work: Path, strip: Sequence[str] = ()) -> Scheduling:
    """The governor when asked for (or `auto`) and ninja can follow it; the static job count otherwise."""
    name, where = setting(plan)
    if name not in SCHEDULERS:
        # The recipe's value was checked at load: this is the environment's.
        raise RecipeError([f"{where}: scheduler {name!r} is not one of {', '.join(SCHEDULERS)} (e.g. {ENV}=governor)"])
    tus = planner.plan_tus(db_path(plan), default_bytes(plan), shipped=shipped_tus(plan), project=plan_project(plan))
    if name == "static":
        return Scheduling(None, tus, plan.jobs.derivation)
    if not jobserver.supports_jobserver(ninja_version):
        if name == "auto":
            why = (f"scheduler auto: static job count, ninja {ninja_version or 'none'} is older than 1.13 (no "
                   f"jobserver client) ({plan.jobs.derivation})")
            log.info(why)
        else:
            why = (f"scheduler = \"governor\" needs ninja >= 1.13 (a jobserver client), this is {ninja_version or 'none'}: "
                   f"static job count instead ({plan.jobs.derivation}); pip install 'ninja>=1.13' in the build environment")
            log.warn(why)
        return Scheduling(None, tus, why)
    reserve = int(plan.recipe.build.reserve_gb * GB)
    budget = plan.resources.memory_bytes - reserve
    # A job count given by hand (recipe number, MAX_JOBS, --jobs) stays a ceiling under the governor.
    ceiling = plan.resources.cpus if plan.jobs.source == "auto" else min(plan.resources.cpus, plan.jobs.jobs)
    gov = governor(work / "jobserver", budget=budget, predictions={t.source: t.peak_bytes for t in tus},
                   default=default_bytes(plan), max_jobs=ceiling, available=lambda: probe().memory_bytes,
                   reserve=reserve, edges=edges_file(work), strip=strip)
    known = sum(1 for t in tus if t.how.startswith("profile"))
    from_shipped = sum(1 for t in tus if t.how == "shipped profile")
    why = (f"governor: jobserver FIFO, a compile starts while free memory ({plan.resources.memory_why}) - "
           f"{plan.recipe.build.reserve_gb:g} GB covers the predicted peaks, at most {ceiling} at once; {known} TU(s) "
           f"predicted from the profile, {from_shipped} from the shipped profile, others "
           f"{default_bytes(plan) / GB:g} GB (default)"
           + (f" (scheduler auto: ninja {ninja_version} is a jobserver client)" if name == "auto" else ""))
    return Scheduling(gov, tus, why)


@contextmanager
def running(s: Scheduling) -> Iterator[dict[str, str]]:
    """The environment changes the build runs with: the FIFO in MAKEFLAGS and no -j, under the governor."""
    if s.governor is None:
        yield {}
        return
    try:
        with s.governor as gov:
            yield {"MAKEFLAGS": gov.makeflags, "CMAKE_BUILD_PARALLEL_LEVEL": ""}
    finally:
        log.info(f"{s.governor.stats.summary()} (trace: {s.governor.trace_path})")


def profile_note(plan: Plan) -> str | None:
    """Whether the recipe's shipped order profile was measured for other archs, another pin or another
    series than this build (its `# measured-for:` line): its times are then off by a factor."""
    path = plan.recipe.build.order_profile
    if not path or not Path(path).is_file():
        return None
    measured = planner.measured_for(path)
    r = plan.recipe
    differs = [(what, theirs, ours) for what, theirs, ours in (
        ("archs", measured.get("archs", ""), plan.arch_list),
        ("commit", measured.get("commit", "")[:12], r.source.commit[:12]),
        ("series", measured.get("series", ""), f"{r.patches.series}/{r.patches.version}")) if theirs and theirs != ours]
    if not differs:
        return None
    said = ", ".join(f"{theirs}" if what == "archs" else f"{what} {theirs}" for what, theirs, _ in differs)
    this = ", ".join(f"{ours}" if what == "archs" else f"{what} {ours}" for what, _, ours in differs)
    return (f"the shipped order profile {Path(path).name} was measured for {said}, this build is for {this}: "
            "the ETA re-estimates from the work done")


def eta(plan: Plan, tus: list[planner.TU], jobs: int, work: Path) -> planner.EtaFromLines:
    """The progress bar's ETA over the compiles of the build in `work` (ninja_order lists them there); when its
    times come from a shipped profile measured for another build, the log says so once and the ETA carries a
    short note."""
    note = profile_note(plan) if any(t.how == "shipped profile" for t in tus) else None
    short = ""
    if note:
        log.info(note)
        archs = planner.measured_for(plan.recipe.build.order_profile).get("archs", "")
        short = f"profile for {archs}" if archs and archs != plan.arch_list else "profile for another pin"
    return planner.EtaFromLines(tus, jobs, note=short, edges=edges_file(work))
