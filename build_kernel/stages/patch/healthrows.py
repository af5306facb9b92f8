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
    fixed: tuple[str, ...] = ()  # the recipe's patches whose Applied-Upstream commit is in this commit's history

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
        row["fixed_upstream"] = list(self.fixed)
        return row

    def record(self) -> dict[str, object]:
        """What `--write` keeps: no offsets or conflict text, so the file changes only when a state does.
        With several series: each one's states and the series that apply whole."""
        head: dict[str, object] = {"commit": self.commit, "date": self.date, "version": self.version}
        if self.fixed:
            head["fixed_upstream"] = list(self.fixed)
        if not self.compared:
            return {**head, "states": self.states()}
        return {**head, "series": {c.name: {s.name: s.state for s in c.statuses} for c in self.compared},
                "covered_by": self.covered_by}


REVERSE, DECLARED = "reverse applies", "Applied-Upstream"


@dataclass(frozen=True)
class Retired:
    """Whether one patch of the recipe's series is still needed at the newest checked commit, and if not,
    the first upstream commit from which it is not: its reverse applies there (`REVERSE`), or its
    Applied-Upstream header names it (`DECLARED`)."""

    name: str
    needed: bool | None  # None: it conflicts there, and nothing says whether upstream has the fix
    since: str = ""  # the first commit it is not needed at
    date: str = ""
    how: str = ""  # REVERSE or DECLARED
    release: str = ""  # the first checked version without the need
    exact: bool = True  # False: not needed at the first checked commit already; since is that commit
    note: str = ""  # why it is unknown, or what else was seen (a declared fix beyond the walk)

    def to_dict(self) -> dict[str, object]:
        found: dict[str, object] = {"name": self.name, "needed": self.needed}
        if self.since:
            found.update(since=self.since, date=self.date, how=self.how, release=self.release, exact=self.exact)
        if self.note:
            found["note"] = self.note
        return found

    def says(self) -> str:
        """One line: `needed`, or `not needed from fe9b9b254 (2026-04-20, Applied-Upstream; first release 0.4.3)`."""
        also = f"; {self.note}" if self.note else ""
        if self.since and self.exact:
            return f"not needed from {self.since[:9]} ({self.date}, {self.how}; first release {self.release}){also}"
        if self.since:
            return (f"not needed at {self.release} ({self.since[:9]}, {self.date}, {self.how}) already, the first "
                    f"checked commit (an earlier --since finds where it came in){also}")
        word = "needed" if self.needed else "unknown"
        return f"{word}: {self.note}" if self.note else word


@dataclass(frozen=True)
class Health:
    url: str
    until: str
    since: str | None
    rows: tuple[Row, ...]
    series: tuple[str, ...] = ()  # the compared series' names (the recipe's first), when more than one
    patches: tuple[Retired, ...] = ()  # each patch of the recipe's series at the newest row (upstreamed.py)

    @property
    def whole(self) -> int:
        return sum(row.applies for row in self.rows)

    @property
    def uncovered(self) -> tuple[Row, ...]:
        """The rows no compared series applies to whole."""
        return tuple(row for row in self.rows if self.series and not row.covered_by)
