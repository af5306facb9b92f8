"""How long the build's compiles will take on this host, said before it starts: `plan`'s `build time` row.

The progress bar's model, not a second one (planner.counted and planner.spread, which EtaFromLines runs on): each
compile's recorded time, one the profile does not know at the median of those it knows, spread over the plan's
jobs and never less than the longest. That is the low end: every job busy to the last second. The high end is
what any list schedule keeps to (Graham 1966: the sum over the jobs plus (1 - 1/jobs) of the longest, whatever
order ready compiles start in), with a compile the profile does not know counted at the longest it knows, times
HOST_FACTOR where the times were measured on another host. docs/scheduling.md, "How long", gives the rule and
the builds it was checked on.

Which compiles: those the newest build of this recipe for these archs listed (ninja_order's edges file, beside
its build folder), else the shipped profile's, else the ones this machine recorded for these archs. Before the
first configure nothing else can know them (CMake decides).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from build_kernel.plan import Plan
from build_kernel.stages.builder import key_history, ninja_order, planner, profile, scheduling

# The slowdown the high end allows for times measured on another host. Measured: on the 2-core box, alone, the
# same sources took 0.96-1.08x what the 16-core H200 host's profile says (summed over the 50 they share, 10.0a and
# 9.0a;12.0a builds of 2026-12-05); with test runs sharing its 2 cores, 2.09x (9 shared, 2026-12-02): a busy host,
# not a slow one, is what the range must hold (bench/eta/plan_forecast.py checks it on real builds).
HOST_FACTOR = 2.0


@dataclass(frozen=True)
class Forecast:
    low_s: float | None  # None: no recorded time for any compile of the build
    high_s: float | None
    compiles: int
    unknown: int  # compiles the profile has no time for
    jobs: int
    cpus: int
    times: str  # where the times come from
    factor: float  # the high end's allowance for another host (1.0: this host's own times)
    compiles_from: str
    typical_s: float | None  # what an unknown compile counts at the low end, and at the high end:
    longest_s: float | None
    note: str | None = None  # the shipped profile was measured for other archs, pin or series

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "line": self.line()}

    def line(self) -> str:
        if self.low_s is None or self.high_s is None:
            return ("not known: no compile times yet (this machine records each compile on the first build; a "
                    "recipe can ship them: [build] order_profile)")
        text = (f"{_span(self.low_s, self.high_s)} compiling on this host ({self.compiles} compiles, {self.jobs} "
                f"jobs, {self.cpus} CPUs; times from {self.times}")
        text += f", x1-x{self.factor:g} for this host)" if self.factor != 1 else ")"
        if self.unknown:
            text += (f"; {self.unknown} compile(s) the profile does not know, counted at {self.typical_s:.0f}-"
                     f"{self.longest_s:.0f} s each")
        return text + (f"; {self.note}" if self.note else "")


def _span(low: float, high: float) -> str:
    if high < 120:
        return f"{low:.0f}-{high:.0f} s"
    return f"{low / 60:.0f}-{max(1, round(high / 60)):.0f} min" if low >= 60 else f"{low:.0f} s-{high / 60:.0f} min"


def estimate(recorded: dict[str, float], sources: list[str], jobs: int, factor: float = 1.0) -> tuple[
        float | None, float | None, int, float | None, float | None]:
    """(low, high, unknown, typical, longest) seconds for compiling `sources` on `jobs` jobs (module docstring)."""
    work, unknown, typical = planner.counted(recorded, sources)
    low = planner.spread(list(work.values()), jobs)
    known = [recorded[s] for s in sources if s in recorded]
    if low is None or not known:
        return None, None, len(unknown), None, None
    longest = max(known)
    worst = [recorded.get(s, longest) for s in sources]
    m = max(1, jobs)
    high = (sum(worst) / m + (1 - 1 / m) * max(worst)) * factor
    return low, max(low, high), len(unknown), typical, longest


def _listed(p: Plan) -> tuple[list[str], str] | None:
    """The compiles the newest build of this recipe for these archs listed, if one got that far."""
    edges = Path("bin") / ninja_order.EDGES
    folder = key_history.newest(p.cache_dir / "build", p.recipe.name, p.arch_list, having=str(edges))
    if folder is None:
        return None
    try:
        sources = [str(s) for s in json.loads((folder / edges).read_text())["sources"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return list(dict.fromkeys(sources)), f"the last build's list ({folder.name})"


def _recorded_for(p: Plan) -> list[str]:
    """The sources this machine compiled for exactly these archs (and the arch-less C++ ones)."""
    asked = {a.sm for a in p.archs}
    rows = profile.rows(scheduling.db_path(p), project=scheduling.plan_project(p))
    return list(dict.fromkeys(r.source for r in rows if r.source and r.exit == 0
                              and (not r.archs or set(r.archs.split(",")) == asked)))


def forecast(p: Plan) -> Forecast:
    """The plan's forecast of its compile time on this host (module docstring)."""
    tus = planner.plan_tus(scheduling.db_path(p), scheduling.default_bytes(p), shipped=scheduling.shipped_tus(p),
                           project=scheduling.plan_project(p))
    here = {t.source: t.wall_s for t in tus if t.wall_s is not None and t.how.startswith("profile")}
    # Every time the shipped profile gives (plan_tus keeps only the rows with a peak, for the governor).
    path = p.recipe.build.order_profile
    shipped = ninja_order.read_shipped(path) if path else {}
    recorded = {**shipped, **here}  # this machine's own time first, as the build's ETA takes it
    listed = _listed(p)
    if listed:
        sources, compiles_from = listed
    elif shipped:
        sources, compiles_from = list(shipped), "the shipped profile's"
    else:
        sources, compiles_from = _recorded_for(p), "this machine's profile"
    from_shipped = any(s in shipped and s not in here for s in sources)
    factor = HOST_FACTOR if from_shipped else 1.0
    times = _times(p, from_shipped, any(s in here for s in sources))
    low, high, unknown, typical, longest = estimate(recorded, sources, p.jobs.jobs, factor)
    note = scheduling.profile_note(p) if from_shipped else None
    return Forecast(low, high, len(sources), unknown, p.jobs.jobs, p.resources.cpus, times, factor, compiles_from,
                    typical, longest, _short(note))


def _times(p: Plan, shipped: bool, here: bool) -> str:
    if not shipped:
        return "this machine's profile"
    path = p.recipe.build.order_profile
    host = planner.measured_for(path).get("host") if path else None
    where = f"{Path(path).name if path else 'the shipped profile'}, measured on {host or 'another host'}"
    return where + (" and this machine's profile" if here else "")


def _short(note: str | None) -> str | None:
    """profile_note's words, less its last clause (which is about the running build's ETA)."""
    if not note:
        return None
    text = note.split(": the ETA", 1)[0]
    return text.replace("the shipped order profile ", "profile ", 1)
