"""Patch health's result: a row per upstream version change, and which series apply whole there.

Its own module so that health (which makes these) and healthreport (which renders them) both
import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from build_kernel.stages.patch import apply as patches


def _whole(statuses: tuple[patches.PatchStatus, ...]) -> bool:
    """The whole series would apply (what `fetch` needs): offsets are fine, nothing upstream or conflicting."""
    return all(s.state in (patches.APPLIES, patches.OFFSET) for s in statuses)


@dataclass(frozen=True)
class SeriesAt:
    """One series' patches at one commit."""

    name: str
    statuses: tuple[patches.PatchStatus, ...]

    @property
    def applies(self) -> bool:
        return _whole(self.statuses)

    def why_not(self) -> str:
        """The first patch that stops it, e.g. `0005-prune-arch-dispatch.patch conflicts` ("" when it applies)."""
        return next((f"{s.name} {s.state}" for s in self.statuses if s.state not in (patches.APPLIES, patches.OFFSET)),
                    "")


@dataclass(frozen=True)
class Row:
    commit: str
    date: str
    version: str
    statuses: tuple[patches.PatchStatus, ...]
    compared: tuple[SeriesAt, ...] = ()  # every series checked here (the recipe's first) when more than one

    @property
    def applies(self) -> bool:
        """The recipe's whole series would apply."""
        return _whole(self.statuses)

    @property
    def covered_by(self) -> list[str]:
        """The compared series that apply whole here."""
        return [c.name for c in self.compared if c.applies]

    def states(self) -> dict[str, str]:
        return {s.name: s.state for s in self.statuses}

    def to_dict(self) -> dict[str, object]:
        row: dict[str, object] = {"commit": self.commit, "date": self.date, "version": self.version,
                                  "states": self.states(), "applies": self.applies,
                                  "patches": [s.to_dict() for s in self.statuses]}
        if self.compared:
            row["series"] = {c.name: {"applies": c.applies, "states": {s.name: s.state for s in c.statuses},
                                      "patches": [s.to_dict() for s in c.statuses]} for c in self.compared}
            row["covered_by"] = self.covered_by
        return row

    def record(self) -> dict[str, object]:
        """What `--write` keeps: no offsets or conflict text, so the file changes only when a state does.
        With several series: each one's states and the series that apply whole."""
        head: dict[str, object] = {"commit": self.commit, "date": self.date, "version": self.version}
        if not self.compared:
            return {**head, "states": self.states()}
        return {**head, "series": {c.name: {s.name: s.state for s in c.statuses} for c in self.compared},
                "covered_by": self.covered_by}


@dataclass(frozen=True)
class Health:
    url: str
    until: str
    since: str | None
    rows: tuple[Row, ...]
    series: tuple[str, ...] = ()  # the compared series' names (the recipe's first), when more than one

    @property
    def whole(self) -> int:
        return sum(row.applies for row in self.rows)

    @property
    def uncovered(self) -> tuple[Row, ...]:
        """The rows no compared series applies to whole."""
        return tuple(row for row in self.rows if self.series and not row.covered_by)
