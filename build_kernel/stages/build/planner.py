"""Per-TU predictions for the governor, `plan` and the progress bar, from the recorded profile.

A TU's memory is the profile's high percentile of its tree peaks (profile.estimate) when it
has been compiled before, else the peak the recipe's shipped profile measured (`peak_gb` of
`[build] order_profile`: a first build on a small machine packs by real sizes, not by the
default), else the recipe's `job_memory_gb` (× archs in flight); each prediction says which.
The ETA of a build is the recorded time of what is left, spread over the jobs, but never less
than the longest TU still to finish.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_kernel.stages.build import profile

MiB = 1024 * 1024


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
             shipped: Mapping[str, tuple[float, float]] | None = None) -> list[TU]:
    """A prediction per TU: the given (source, flags digest) pairs, or every TU the profile or the
    shipped profile (`shipped`: source -> (seconds, peak GB)) knows."""
    recorded = profile.rows(db)
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
    ninja writes to a pipe), it marks the TU each names as done and answers eta_s of the rest."""

    def __init__(self, tus: Sequence[TU], jobs: int) -> None:
        # Longest first: `gemm/fp8.cu` must not be marked done by `fp8.cu`.
        self.tus, self.jobs = list(tus), jobs
        self._names = sorted((t.source for t in tus), key=len, reverse=True)
        self.done: set[str] = set()

    def __call__(self, line: str) -> float | None:
        hit = next((s for s in self._names if s in line), None)
        if hit:
            self.done.add(hit)
        return eta_s(self.tus, self.done, self.jobs)
