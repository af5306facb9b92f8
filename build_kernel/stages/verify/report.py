"""A verification report, and its record beside the wheel (`<wheel>.verify.json`).

The record names the wheel's sha256 and a digest of what was checked (archs, verify spec,
GPU check, interpreter), so a later verify of the same bytes with the same checks returns
it instead of running them again, and publish/serve refuse a wheel without a passing one.
"""

from __future__ import annotations

import base64
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
    ptx: list[str] = field(default_factory=list)
    # Asked archs only PTX covers: the driver compiles them on first load.
    jit: list[str] = field(default_factory=list)
    rule: str = "default"
    # False: the rule does not apply to the asked archs (nothing loads it there); listed only.
    applies: bool = True
    fp4_scanned: str = ""
    # Byte-identical copies (lib/x.so, x.so.0, x.so.0.6.0: wheels cannot hold symlinks).
    aliases: list[str] = field(default_factory=list)


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
    # Which checks ran: static (archs, PTX, FP4 SASS, links) always; import, ops and GPU unless --static.
    checks: dict[str, bool] = field(default_factory=dict)
    # The loader's whole message per failed import (the failure line has the one-line cause).
    import_details: dict[str, str] = field(default_factory=dict)
    # What the loader could not bind per library (links.Links.to_dict): undefined symbols, sonames, versions.
    links: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # CUDA libraries the wheel links, soname -> CUDA major (libnvrtc.so.12 -> 12).
    cuda_linked: dict[str, str] = field(default_factory=dict)
    # Size and mtime of the bytes verified: an unchanged file is not hashed again to reuse the record.
    stat: dict[str, int] = field(default_factory=dict)
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


def sha256_digest(path: Path) -> bytes:
    """A file's sha256, read in 1 MiB chunks (wheels reach 535 MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


def record_hash(path: Path) -> str:
    """A file's sha256 as a wheel's RECORD writes it: urlsafe base64, no padding."""
    return base64.urlsafe_b64encode(sha256_digest(path)).rstrip(b"=").decode()


def sha256_of(path: Path) -> str:
    return sha256_digest(path).hex()


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


def file_stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def reusable(wheel: Path, digest: str) -> Report | None:
    """The passing record of these bytes under these checks; None when they must run.

    As git's index does, an unchanged size, mtime and inode stand for unchanged bytes (hashing
    a 535 MB wheel takes a second); otherwise the sha256 decides.
    """
    data = read_record(wheel)
    if not data or data.get("checks_digest") != digest or not data.get("passed"):
        return None
    if data.get("stat") != file_stat(wheel) and data.get("sha256") != sha256_of(wheel):
        return None
    report = Report.from_dict(data)
    report.from_record = True
    return report


def require_verified(wheel: Path, *, force: bool = False, recipe: str | None = None) -> dict[str, object]:
    """Refuse a wheel without a passing record for exactly these bytes. `recipe`: how to name the
    recipe on a command line (`verify` needs one), so that the hint works as written."""
    data = read_record(wheel)
    problem = None
    if data is None:
        problem = f"{wheel.name} has not been verified"
    elif data.get("sha256") != sha256_of(wheel):
        problem = f"{wheel.name} changed since it was verified"
    elif not data.get("passed"):
        problem = f"{wheel.name} failed verification: {'; '.join(data.get('failures', []))}"
    elif not data.get("checks", {}).get("import", True):
        problem = f"{wheel.name} was verified statically only (no import check)"
    else:
        return dict(data)
    if force:
        log.warn(f"{problem}: going on because of --force")
        return {}
    command = f"build-kernel verify {wheel} --recipe {recipe or 'NAME'}"
    which = "" if recipe else ", NAME the recipe it was built with"
    raise VerifyError(problem, hint=f"run `{command}` without --static{which} (or pass --force to override)"
                      if "statically" in problem else f"run `{command}`{which} (or pass --force to override)")
