"""One JSON record per night, `<state>/nights/<YYYYMMDD>-<commit12>.json`: the contract between the night
(night.py writes it) and whatever reads the history (the history page, the replay study, the morning report).

Fields may be added; none is renamed. `check` says what is wrong with a record (a JSON-schema-like check by
hand: the readers import it and refuse a record it finds problems in); `write` puts one in place atomically.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, TypedDict

from build_kernel import atomic

SCHEMA = 1
OUTCOMES = ("built", "unchanged", "conflict", "failed", "interrupted")
Outcome = Literal["built", "unchanged", "conflict", "failed", "interrupted"]
NAME = re.compile(r"^(\d{8})-([0-9a-f]{12})\.json$")


class Upstream(TypedDict):
    ref: str
    commit: str
    previous_good: str | None
    commits_since: int


class Conflict(TypedDict):
    patch: str
    hunk: str
    first_bad_commit: str | None


class SeriesPart(TypedDict):
    name: str | None
    version: str | None
    retired: list[str]
    conflict: Conflict | None


class Build(TypedDict):
    archs: list[str]
    wall_s: float
    compiler_cpu_s: float | None
    peak_rss_mb: float | None


class FileTests(TypedDict):
    passed: int
    failed: int
    skipped: int


class Tests(TypedDict):
    ran: bool
    why_not: str | None
    per_file: dict[str, FileTests]


class Wheel(TypedDict):
    name: str
    version: str
    sha256: str
    published_to: str | None


# `from` is a keyword: the functional form keeps the key as the contract spells it.
LockChange = TypedDict("LockChange", {"pin": str, "from": str | None, "to": str})


class Record(TypedDict):
    schema: int
    recipe: str
    night: str  # YYYY-MM-DD
    started: str  # ISO 8601
    finished: str | None
    outcome: Outcome
    reason: str
    upstream: Upstream
    series: SeriesPart
    lock_changes: list[LockChange]
    build: Build | None
    tests: Tests
    wheel: Wheel | None
    logs: dict[str, str]


# key -> (accepted types, nested shape or None); `None` in the types: the key may be null.
_Shape = dict[str, tuple[tuple[type | None, ...], Any]]
_FILE_TESTS: _Shape = {"passed": ((int,), None), "failed": ((int,), None), "skipped": ((int,), None)}
_SHAPE: _Shape = {
    "schema": ((int,), None), "recipe": ((str,), None), "night": ((str,), None), "started": ((str,), None),
    "finished": ((str, None), None), "outcome": ((str,), None), "reason": ((str,), None),
    "upstream": ((dict,), {"ref": ((str,), None), "commit": ((str,), None), "previous_good": ((str, None), None),
                           "commits_since": ((int,), None)}),
    "series": ((dict,), {"name": ((str, None), None), "version": ((str, None), None), "retired": ((list,), str),
                         "conflict": ((dict, None), {"patch": ((str,), None), "hunk": ((str,), None),
                                                     "first_bad_commit": ((str, None), None)})}),
    "lock_changes": ((list,), {"pin": ((str,), None), "from": ((str, None), None), "to": ((str,), None)}),
    "build": ((dict, None), {"archs": ((list,), str), "wall_s": ((float, int), None),
                             "compiler_cpu_s": ((float, int, None), None), "peak_rss_mb": ((float, int, None), None)}),
    "tests": ((dict,), {"ran": ((bool,), None), "why_not": ((str, None), None), "per_file": ((dict,), _FILE_TESTS)}),
    "wheel": ((dict, None), {"name": ((str,), None), "version": ((str,), None), "sha256": ((str,), None),
                             "published_to": ((str, None), None)}),
    "logs": ((dict,), str),
}


def _type_ok(value: Any, types: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in types
    if isinstance(value, bool) and bool not in types:
        return False  # True is an int to Python, not to the contract
    return isinstance(value, tuple(t for t in types if t is not None))


def _check(value: Any, shape: _Shape, where: str, problems: list[str]) -> None:
    for key, (types, inner) in shape.items():
        at = f"{where}{key}"
        if key not in value:
            problems.append(f"{at}: missing")
            continue
        item = value[key]
        if not _type_ok(item, types):
            problems.append(f"{at}: {type(item).__name__} where {' or '.join(t.__name__ if t else 'null' for t in types)} "
                            "is expected")
            continue
        _inner(item, inner, at, problems)


def _inner(item: Any, inner: Any, at: str, problems: list[str]) -> None:
    if inner is None or item is None:
        return
    if isinstance(item, list):
        for i, element in enumerate(item):
            _element(element, inner, f"{at}[{i}]", problems)
    elif isinstance(item, dict) and isinstance(inner, dict) and "passed" in inner:  # per_file: file -> counts
        for name, counts in item.items():
            _element(counts, inner, f"{at}.{name}", problems)
    elif isinstance(item, dict) and isinstance(inner, dict):
        _check(item, inner, f"{at}.", problems)
    elif isinstance(item, dict):  # logs: stage -> path
        for name, element in item.items():
            _element(element, inner, f"{at}.{name}", problems)


def _element(element: Any, inner: Any, at: str, problems: list[str]) -> None:
    if isinstance(inner, dict):
        if not isinstance(element, dict):
            problems.append(f"{at}: {type(element).__name__} where an object is expected")
        else:
            _check(element, inner, f"{at}.", problems)
    elif not isinstance(element, inner):
        problems.append(f"{at}: {type(element).__name__} where {inner.__name__} is expected")


def check(record: Any) -> list[str]:
    """Every way `record` departs from the contract (empty: it keeps it); extra keys are allowed."""
    if not isinstance(record, dict):
        return [f"a record is a JSON object, not {type(record).__name__}"]
    problems: list[str] = []
    _check(record, _SHAPE, "", problems)
    if problems:
        return problems
    if record["schema"] != SCHEMA:
        problems.append(f"schema: {record['schema']} (this tool reads {SCHEMA})")
    if record["outcome"] not in OUTCOMES:
        problems.append(f"outcome: {record['outcome']!r} is not one of {', '.join(OUTCOMES)}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["night"]):
        problems.append(f"night: {record['night']!r} is not YYYY-MM-DD")
    if not re.fullmatch(r"[0-9a-f]{40}", record["upstream"]["commit"]):
        problems.append(f"upstream.commit: {record['upstream']['commit']!r} is not a 40-hex commit")
    return problems


def file_name(night: str, commit: str) -> str:
    """`20261207-0123456789ab.json` for night `2026-12-07` at that commit."""
    return f"{night.replace('-', '')}-{commit[:12]}.json"


def path_for(state_dir: Path, night: str, commit: str) -> Path:
    return state_dir / "nights" / file_name(night, commit)


def write(state_dir: Path, record: Record) -> Path:
    """The record in place, whole or not at all (a reader never sees half of it)."""
    problems = check(record)
    if problems:  # a bug of the writer, never the user's: said plainly
        raise ValueError(f"a night record that breaks the contract: {'; '.join(problems)}")
    path = path_for(state_dir, record["night"], record["upstream"]["commit"])
    atomic.write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def read_all(state_dir: Path) -> list[Record]:
    """Every record of the state folder, oldest night first (files that are not records are passed over)."""
    found: list[tuple[str, str, Record]] = []
    for path in (state_dir / "nights").glob("*.json"):
        if NAME.match(path.name):
            data = json.loads(path.read_text())
            if not check(data):
                found.append((data["night"], data["started"], data))
    return [r for _, _, r in sorted(found, key=lambda t: (t[0], t[1]))]
