"""A verification report, and its record beside the wheel (`<wheel>.verify.json`).

The record names the wheel's sha256 and a digest of what was checked (archs, verify spec,
GPU check, interpreter), so a later verify of the same bytes with the same checks returns
it instead of running them again, and publish/serve refuse a wheel without a passing one.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from build_kernel import atomic, log
from build_kernel.archs import Arch, ArchSpellingError, parse_arch
from build_kernel.errors import VerifyError

RECORD_SUFFIX = ".verify.json"
PROVENANCE_FILE = "build_kernel_provenance.json"


def by_arch(sms: Iterable[str]) -> list[str]:
    """`sm_*` names once each, in arch order (sm_90a before sm_120a)."""
    def key(sm: str) -> tuple[int, Arch | None, str]:
        try:
            return 0, parse_arch(sm.removeprefix("sm_")), sm
        except ArchSpellingError:  # a record written by hand or by another tool: last, as written
            return 1, None, sm

    return sorted(set(sms), key=key)


def sm_to_torch(sm: str) -> str:
    """`sm_120a` -> `12.0a`: how --arch writes it."""
    return parse_arch(sm.removeprefix("sm_")).torch


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


def own_archs(wheel: Path) -> list[str] | None:
    """The archs the wheel was built for (`sm_120a`), from the provenance build-kernel put in it; None
    for a wheel without one (someone else's, or not a zip)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next((n for n in zf.namelist() if n.endswith(f".dist-info/{PROVENANCE_FILE}")), None)
            data = json.loads(zf.read(name)) if name else None
        return by_arch(parse_arch(a).sm for a in data["archs"]) if isinstance(data, dict) and data.get("archs") else None
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError, ArchSpellingError, TypeError, KeyError):
        return None


def record_path(wheel: Path, asked: Sequence[str] | None = None) -> Path:
    """`WHEEL.verify.json`, the wheel's verdict: a verify for its own archs (or of a wheel that does not say
    them). A verify for other archs (`verify --arch 10.0a` of a 12.0a wheel) is kept apart, in
    `WHEEL.verify.sm_100a.json`, so that its verdict never becomes the wheel's."""
    own = own_archs(wheel) if asked is not None else None
    if own is None or by_arch(asked or ()) == own:
        return wheel.with_name(wheel.name + RECORD_SUFFIX)
    return wheel.with_name(f"{wheel.name}.verify.{'+'.join(by_arch(asked or ()))}.json")


def write_record(wheel: Path, report: Report) -> Path:
    data = report.to_dict()
    data.pop("from_record")
    path = record_path(wheel, report.asked)
    atomic.write_text(path, json.dumps(data, indent=2))
    return path


def _read(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def read_record(wheel: Path) -> dict[str, Any] | None:
    """The wheel's verdict (`WHEEL.verify.json`); None when it has none."""
    return _read(wheel.with_name(wheel.name + RECORD_SUFFIX))


def file_stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def reusable(wheel: Path, digest: str) -> Report | None:
    """The passing record of these bytes under these checks; None when they must run.

    As git's index does, an unchanged size, mtime and inode stand for unchanged bytes (hashing
    a 535 MB wheel takes a second); otherwise the sha256 decides.
    """
    # The digest names the archs: of the verdict and the records kept apart, at most one can match.
    found = (_read(p) for p in (wheel.with_name(wheel.name + RECORD_SUFFIX),
                                *sorted(wheel.parent.glob(f"{glob.escape(wheel.name)}.verify.*.json"))))
    data = next((d for d in found if d and d.get("checks_digest") == digest), None)
    if not data or not data.get("passed"):
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
    own = own_archs(wheel)
    asked = by_arch(data.get("asked") or ()) if data else []
    problem = None
    if data is None:
        problem = f"{wheel.name} has not been verified"
        apart = sorted(wheel.parent.glob(f"{glob.escape(wheel.name)}.verify.*.json"))
        if own and apart:
            problem += (f" for its own archs ({', '.join(own)}): only for other archs "
                        f"({', '.join(p.name for p in apart)}), which is not its verdict")
    elif own and asked and asked != own:
        problem = (f"{wheel.name} was verified for {', '.join(asked)}, but it is built for {', '.join(own)}: "
                   "that verdict is not the wheel's")
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
    archs = f" --arch {','.join(sm_to_torch(a) for a in own)}" if own else ""
    command = f"build-kernel verify {wheel} --recipe {recipe or 'NAME'}{archs}"
    which = "" if recipe else ", NAME the recipe it was built with"
    raise VerifyError(problem, hint=f"run `{command}` without --static{which} (or pass --force to override)"
                      if "statically" in problem else f"run `{command}`{which} (or pass --force to override)")
