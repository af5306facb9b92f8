"""Hit/miss counts of one build, read from the tool itself (`sccache --show-stats
--stats-format=json`, `ccache --print-stats`), in one shape for the log and the provenance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Stats:
    tool: str
    storage: str
    hits: int = 0
    misses: int = 0
    uncacheable: int = 0  # compiles the tool ran without looking up (sccache: nvcc's host step)
    errors: int = 0  # storage read/write errors and timeouts: each a compile that ran uncached
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # language -> {"hits": n, "misses": n}
    dist_compiles: dict[str, int] = field(default_factory=dict)  # build server -> compiles it ran
    dist_errors: int = 0
    storage_lost: bool = False  # the shared store stopped answering mid-build (the counts start after it)

    @property
    def hit_fraction(self) -> float | None:
        looked_up = self.hits + self.misses
        return round(self.hits / looked_up, 4) if looked_up else None

    def summary(self) -> str:
        fraction = "-" if self.hit_fraction is None else f"{self.hit_fraction:.0%}"
        line = (f"compile cache {self.tool} ({self.storage}): {self.hits} hits, {self.misses} misses ({fraction} hits)"
                f", {self.uncacheable} uncacheable, {self.errors} storage errors")
        if self.storage_lost:
            line += "; the shared store went away mid-build (counts since then)"
        if self.dist_compiles or self.dist_errors:
            servers = ", ".join(f"{n} on {s}" for s, n in sorted(self.dist_compiles.items())) or "none"
            line += f"; distributed: {servers}, {self.dist_errors} failed"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_fraction": self.hit_fraction}


def _counts(table: Any) -> dict[str, int]:
    counts = table.get("counts", {}) if isinstance(table, Mapping) else {}
    return {str(k): int(v) for k, v in counts.items()}


def from_sccache(data: Mapping[str, Any], storage: str) -> Stats:
    """From `sccache --show-stats --stats-format=json` (0.16: {"stats": {...}, ...})."""
    s = data.get("stats", {})
    hits, misses = _counts(s.get("cache_hits")), _counts(s.get("cache_misses"))
    kinds = {k: {"hits": hits.get(k, 0), "misses": misses.get(k, 0)} for k in sorted({*hits, *misses})}
    errors = (int(s.get("cache_read_errors", 0)) + int(s.get("cache_write_errors", 0))
              + int(s.get("cache_timeouts", 0)) + sum(_counts(s.get("cache_errors")).values()))
    dist = s.get("dist_compiles") or {}
    return Stats("sccache", storage, sum(hits.values()), sum(misses.values()),
                 int(s.get("non_cacheable_compilations", 0)), errors, kinds,
                 {str(k): int(v) for k, v in dist.items()}, int(s.get("dist_errors", 0)))


def parse_ccache(text: str) -> dict[str, int]:
    """`ccache --print-stats`: one `name<TAB>value` per line."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            out[name.strip()] = int(value)
    return out


def from_ccache(before: Mapping[str, int], after: Mapping[str, int], storage: str) -> Stats:
    """The difference of two `--print-stats` snapshots: ccache's counters are per cache folder and
    cumulative, and zeroing them would disturb another build sharing the folder."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    hits = d.get("direct_cache_hit", 0) + d.get("preprocessed_cache_hit", 0)
    uncacheable = sum(v for k, v in d.items() if k.startswith(("could_not_", "unsupported_", "called_for_"))
                      or k in ("preprocessor_error", "compiler_produced_no_output", "output_to_stdout"))
    errors = d.get("remote_storage_error", 0) + d.get("remote_storage_timeout", 0)
    remote = {"hits": d.get("remote_storage_hit", 0), "misses": d.get("remote_storage_miss", 0)}
    return Stats("ccache", storage, hits, d.get("cache_miss", 0), uncacheable, errors, {"remote storage": remote})
