"""Per-TU predictions for the governor, `plan` and the progress bar, from the recorded profile.

A TU's memory is the profile's high percentile of its tree peaks (profile.estimate) when it
has been compiled before, else the peak the recipe's shipped profile measured (`peak_gb` of
`[build] order_profile`: a first build on a small machine packs by real sizes, not by the
default), else the recipe's `job_memory_gb` (× archs in flight); each prediction says which.
The ETA of a build is the recorded time of what is left, spread over the jobs, but never less
than the longest TU still to finish.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_kernel.stages.builder import profile

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
    series=...` line (bench/order_profile.py writes it); {} for a profile without one."""
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


class EtaFromLines:
    """The ETA the progress bar shows: fed ninja's `[N/M] ...` lines (printed as edges finish when
    ninja writes to a pipe), it marks the TU each names as done and answers eta_s of the rest, scaled by
    how the work done so far compared with its recorded time (a profile of another machine, other archs
    or another pin is off by a factor: the build's own pace corrects it). Between lines it counts down
    (`remaining`, `describe`, read by the bar on every refresh): it never stands still while the build runs,
    and says so when the build runs past it."""

    # Rescale once this much recorded work is done and this much time has passed (seconds): before
    # that, one cached or one slow compile would swing the estimate by any factor.
    MIN_WORK_S, MIN_ELAPSED_S = 10.0, 10.0
    SCALE_BOUNDS = (0.25, 10.0)

    def __init__(self, tus: Sequence[TU], jobs: int, *, clock: Callable[[], float] = time.monotonic,
                 note: str = "") -> None:
        # Longest first: `gemm/fp8.cu` must not be marked done by `fp8.cu`.
        self.tus, self.jobs, self.clock, self.note = list(tus), jobs, clock, note
        self._names = sorted((t.source for t in tus), key=len, reverse=True)
        self.done: set[str] = set()
        self.start = clock()
        self.total = eta_s(self.tus, (), jobs) or 0.0
        self.scale = 1.0
        self._at, self._estimate = self.start, eta_s(self.tus, (), jobs)

    def __call__(self, line: str) -> float | None:
        hit = next((s for s in self._names if s in line), None)
        if hit:
            self.done.add(hit)
        now, left = self.clock(), eta_s(self.tus, self.done, self.jobs)
        worked, elapsed = self.total - (left or 0.0), now - self.start
        if worked >= self.MIN_WORK_S and elapsed >= self.MIN_ELAPSED_S:
            low, high = self.SCALE_BOUNDS
            self.scale = min(high, max(low, elapsed / worked))
        self._at, self._estimate = now, None if left is None else left * self.scale
        return self._estimate

    def remaining(self) -> float | None:
        """Seconds left now: the last estimate counted down since it was made (0 once past it)."""
        if self._estimate is None:
            return None
        return max(0.0, self._estimate - (self.clock() - self._at))

    def describe(self) -> str:
        """`eta 50 s (x2.0 from the work done) (note)`, or how far past the estimate the build is."""
        left = self.remaining()
        if left is None:
            text = "eta -"
        elif left > 0 or self._estimate is None:
            text = f"eta {left:.0f} s"
        else:
            text = f"eta ? ({self.clock() - self._at - self._estimate:.0f} s over the estimate)"
        if abs(self.scale - 1.0) >= 0.1:
            text += f" (x{self.scale:.1f} from the work done)"
        return f"{text} ({self.note})" if self.note else text
