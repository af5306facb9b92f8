"""Per-TU predictions for the governor, `plan` and the progress bar, from the recorded profile.

A TU's memory is the profile's high percentile of its tree peaks (profile.estimate) when it
has been compiled before, else the peak the recipe's shipped profile measured (`peak_gb` of
`[build] order_profile`: a first build on a small machine packs by real sizes, not by the
default), else the recipe's `job_memory_gb` (× archs in flight); each prediction says which.
The ETA of a build starts as the recorded time of what is left, spread over the jobs, but never
less than the longest TU still to finish, and moves to the build's own pace as its work gets done.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_kernel.stages.builder import profile
from build_kernel.stages.builder.ninja_order import EdgesList

MiB = 1024 * 1024
MEASURED_FOR = "# measured-for:"


@dataclass(frozen=True)
class TU:
    source: str
    peak_bytes: int
    wall_s: float | None
    how: str  # "profile", "profile (other flags)", "shipped profile", "default"
    runs: int

    def describe(self) -> str:
        seen = f", {self.runs} run(s)" if self.runs else ""
        wall = f", {self.wall_s:.0f} s" if self.wall_s is not None else ""
        return f"{self.source}: {self.peak_bytes / 1024**3:.1f} GB{wall} ({self.how}{seen})"


def known_sources(recorded: Sequence[profile.Compile]) -> list[tuple[str, str]]:
    """(source, flags digest of its latest compile) of every TU in the profile, in first-seen order."""
    latest: dict[str, str] = {}
    for r in recorded:
        if r.source:
            latest[r.source] = r.flags_digest
    return list(latest.items())


def plan_tus(db: Path, default_bytes: int, sources: Iterable[tuple[str, str | None]] | None = None,
             shipped: Mapping[str, tuple[float, float]] | None = None, *, project: str | None = None) -> list[TU]:
    """A prediction per TU: the given (source, flags digest) pairs, or every TU the profile or the
    shipped profile (`shipped`: source -> (seconds, peak GB)) knows."""
    recorded = profile.rows(db, project=project)  # another project's same-named TU is not this one
    shipped = shipped or {}
    wanted: list[tuple[str, str | None]] = list(sources) if sources is not None else list(known_sources(recorded))
    if sources is None:
        seen = {source for source, _ in wanted}
        wanted += [(source, None) for source in shipped if source not in seen]
    out = []
    for source, digest in wanted:
        est = profile.estimate(recorded, source, digest, default_mb=default_bytes / MiB)
        if est.source == "default" and source in shipped:
            seconds, peak_gb = shipped[source]
            out.append(TU(source, int(peak_gb * 1024**3), seconds, "shipped profile", 0))
        else:
            out.append(TU(source, int(est.peak_mb * MiB), est.wall_s, est.source, est.runs))
    return out


def measured_for(csv_path: str | Path) -> dict[str, str]:
    """What a shipped order profile was measured for, from its `# measured-for: archs=...; commit=...;
    series=...` line (bench/real_build/order_profile.py writes it); {} for a profile without one."""
    with open(csv_path) as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            if line.startswith(MEASURED_FOR):
                pairs = (item.strip().partition("=") for item in line[len(MEASURED_FOR):].split(";"))
                return {k.strip(): v.strip() for k, _, v in pairs if k.strip()}
    return {}


def heaviest_first(tus: Sequence[TU]) -> list[TU]:
    """The order to start them in: the largest peaks first (they pack worst), then the longest."""
    return sorted(tus, key=lambda t: (-t.peak_bytes, -(t.wall_s or 0.0)))


def eta_s(tus: Sequence[TU], done: Iterable[str], jobs: int) -> float | None:
    """Seconds left by the recorded times of the TUs not done; None when none has a recorded time."""
    finished = set(done)
    left = [t.wall_s for t in tus if t.source not in finished and t.wall_s is not None]
    if not left:
        return None
    return max(sum(left) / max(1, jobs), *left)


def counted(recorded: Mapping[str, float], sources: Sequence[str]) -> tuple[dict[str, float], set[str], float | None]:
    """The ETA's work per compile: its recorded seconds, or for one the profile does not know the median of those
    it knows (the typical compile); with the unknown sources and that median (None when it knows none)."""
    known = sorted(recorded[s] for s in sources if s in recorded)
    typical = known[len(known) // 2] if known else None
    unknown = {s for s in sources if s not in recorded}
    return {s: w for s in sources if (w := recorded.get(s, typical)) is not None}, unknown, typical


def spread(left: Sequence[float], jobs: int, elapsed: float = 0.0) -> float | None:
    """Seconds for `left` on `jobs` jobs: their sum over the jobs, never less than the longest (counted from
    `elapsed` into the build: compiles start longest first, so the longest has been running that long)."""
    return max(sum(left) / max(1, jobs), max(left) - elapsed) if left else None


def _in_line(source: str) -> str:
    """How ninja's line names a TU: a dependency's source (`deps/repo-mscclpp/src/ib.cc`, as the recorder names
    it) is compiled from a folder with a hash in its name, or in a build folder of its own
    (`mscclpp-build/.../src/ib.cc.o`): its path inside the dependency."""
    return re.sub(r"^deps/[^/]+/", "", source)


class EtaFromLines:
    """The ETA the progress bar shows, fed ninja's `[N/M] ...` lines (printed as edges finish when ninja
    writes to a pipe): each line marks the TU it names as done.

    The work is this build's own compiles, once ninja_order has listed them (`edges`, the governor's list:
    a profile of other archs or another pin knows TUs this build never compiles, which would never finish,
    and lacks some it does, which would never count); until then no estimate, or where no list comes (`edges`
    None, or a compile of the profile finishes first) the profile's TUs. A dependency's TU is
    found by its path inside the dependency. A TU with no recorded time counts as the median of those with
    one, and, once the build has run a while, as what a finished TU took on average (the jobs' time over the
    TUs done) where that is more; the ETA says how many compiles the profile knows when it knows less than
    four in five. The estimate blends two guesses by the share of the
    predicted work done: the recorded times spread over the jobs (eta_s), and the build's own pace, the
    elapsed time per predicted second done since ninja's first line, times what is left. Early the profile
    speaks, late the build's pace: a profile measured elsewhere is corrected without one slow compile
    swinging it. Between lines it counts down (`remaining`, `describe`, read by the bar on every refresh):
    it never stands still while the build runs, and says so when the build runs past it."""

    # The build's pace counts once this much predicted work is done and this much time has passed (seconds):
    # before that, one cached or one slow compile would swing the estimate by any factor.
    MIN_WORK_S, MIN_ELAPSED_S = 10.0, 10.0

    def __init__(self, tus: Sequence[TU], jobs: int, *, clock: Callable[[], float] = time.monotonic,
                 note: str = "", edges: Path | None = None) -> None:
        self.jobs, self.clock, self.note, self.edges, self._edges = jobs, clock, note, edges, EdgesList(edges)
        self._recorded = {t.source: t.wall_s for t in tus if t.wall_s is not None}
        self._use([t.source for t in tus if t.wall_s is not None])
        self.done: set[str] = set()
        self.start: float | None = None  # ninja's first line: configure's minutes are no compile work
        self.pace = 1.0
        # Where ninja_order will list this build's compiles, no estimate until it has: the profile holds every TU
        # this machine ever compiled (other archs, pins, series), and its sum overstated a 15-minute build's
        # ETA as 85 minutes at its first line (2-core box, 2026-12-06).
        self._listed = edges is None
        self._at, self._estimate = clock(), self._prior() if self._listed else None

    def _use(self, sources: Sequence[str]) -> None:
        self.work, self.unknown, self.typical = counted(self._recorded, sources)
        # Longest first: `gemm/fp8.cu` must not be marked done by `fp8.cu`.
        self._names = sorted(self.work, key=lambda s: len(_in_line(s)), reverse=True)

    def _read_edges(self) -> None:
        """This build's compiles, from ninja_order's list (read again when CMake regenerates it)."""
        if (sources := self._edges.changed()) is not None:
            self._use(list(dict.fromkeys(sources)))
            self.done &= set(self.work)
            self._listed = True

    def _left(self) -> list[float]:
        return [w for s, w in self.work.items() if s not in self.done]

    def _prior(self, elapsed: float = 0.0) -> float | None:
        """eta_s of what is left, its longest TU counted from the build's start: compiles start longest first
        (ninja_order), so the longest still running has been for that long."""
        return spread(self._left(), self.jobs, elapsed)

    def __call__(self, line: str) -> float | None:
        now = self.clock()
        if self.start is None:
            self.start = now
        listed = self._listed
        self._read_edges()
        if self._listed and not listed:  # the list just came: the recorded times of its compiles
            self._at, self._estimate = now, self._prior(now - self.start)
        hit = next((s for s in self._names if s not in self.done and _in_line(s) in line), None)
        if hit is None:
            return self._estimate  # nothing more known: the countdown goes on (or, before the list, none yet)
        # A compile of the profile finished and still no list (a build ninja_order does not wrap): its TUs it is.
        self._listed = True
        self.done.add(hit)
        elapsed = now - self.start
        if self.unknown and self.typical is not None and elapsed >= self.MIN_ELAPSED_S:
            # A TU the profile does not know costs what a finished TU took on average so far (the jobs' time
            # over the TUs done), not less than the profile's median: a profile of other archs knows least
            # about the TUs only these archs compile.
            guess = max(self.typical, elapsed * self.jobs / len(self.done))
            self.work.update(dict.fromkeys(self.unknown, guess))
        left, prior = sum(self._left()), self._prior(elapsed)
        worked = sum(self.work[s] for s in self.done)
        estimate = 0.0 if prior is None and self.work else prior  # every compile done: links and packing left
        if prior is not None and worked >= self.MIN_WORK_S and elapsed >= self.MIN_ELAPSED_S:
            share = worked / (worked + left)
            self.pace = elapsed * self.jobs / worked
            estimate = (1 - share) * prior + share * elapsed * left / worked
        self._at, self._estimate = now, estimate
        return estimate

    def remaining(self) -> float | None:
        """Seconds left now: the last estimate counted down since it was made (0 once past it)."""
        if self._estimate is None:
            return None
        return max(0.0, self._estimate - (self.clock() - self._at))

    def describe(self) -> str:
        """`eta 50 s (x2.0 from the work done) (note)`, or how far past the estimate the build is."""
        left = self.remaining()
        if left is None or self._estimate is None:
            text = "eta -"
        elif left > 0 or not self._left():  # every compile done: no compile to be late
            text = f"eta {left:.0f} s"
        else:
            text = f"eta ? ({self.clock() - self._at - self._estimate:.0f} s over the estimate)"
        if abs(self.pace - 1.0) >= 0.1:
            text += f" (x{self.pace:.1f} from the work done)"
        if self.unknown and len(self.unknown) * 5 > len(self.work):  # over a fifth of the compiles: a rough guess
            text += f" (profile knows {len(self.work) - len(self.unknown)} of {len(self.work)} compiles)"
        return f"{text} ({self.note})" if self.note else text
