"""A verification report, and its record beside the wheel (`<wheel>.verify.json`).

The record names the wheel's sha256 and a digest of what was checked (archs, verify spec,
GPU check, interpreter), so a later verify of the same bytes with the same checks returns
it instead of running them again, and publish/serve refuse a wheel without a passing one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from build_kernel import atomic, log
from build_kernel.errors import VerifyError

RECORD_SUFFIX = ".verify.json"


@dataclass
class LibraryReport:
    path: str
    archs: list[str]
    missing: list[str]
    extra: list[str]
    fp4_matches: dict[str, int] | None = None


@dataclass
class Report:
    wheel: str
    sha256: str
    asked: list[str]
    libraries: list[LibraryReport] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)
    ops_found: list[str] = field(default_factory=list)
    ops_missing: list[str] = field(default_factory=list)
    gpu: dict[str, object] | None = None
    driver: str = ""
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checks_digest: str = ""
    # True when this report is the record of an earlier run on the same bytes and checks.
    from_record: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "passed": self.passed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["libraries"] = [LibraryReport(**lib) for lib in data.get("libraries", [])]
        return cls(**values)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checks_digest(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def record_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + RECORD_SUFFIX)


def write_record(wheel: Path, report: Report) -> None:
    data = report.to_dict()
    data.pop("from_record")
    atomic.write_text(record_path(wheel), json.dumps(data, indent=2))


def read_record(wheel: Path) -> dict[str, Any] | None:
    path = record_path(wheel)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def reusable(wheel: Path, sha256: str, digest: str) -> Report | None:
    """The passing record of these bytes under these checks; None when they must run."""
    data = read_record(wheel)
    if not data or data.get("sha256") != sha256 or data.get("checks_digest") != digest or not data.get("passed"):
        return None
    report = Report.from_dict(data)
    report.from_record = True
    return report


def require_verified(wheel: Path, *, force: bool = False) -> dict[str, object]:
    """Refuse a wheel without a passing record for exactly these bytes."""
    data = read_record(wheel)
    problem = None
    if data is None:
        problem = f"{wheel.name} has not been verified"
    elif data.get("sha256") != sha256_of(wheel):
        problem = f"{wheel.name} changed since it was verified"
    elif not data.get("passed"):
        problem = f"{wheel.name} failed verification: {'; '.join(data.get('failures', []))}"
    else:
        return dict(data)
    if force:
        log.warn(f"{problem}: going on because of --force")
        return {}
    raise VerifyError(problem, hint=f"run `build-kernel verify {wheel}` (or pass --force to override)")
