"""The publish stage: verified wheels to an index, then the exact version installed back and imported.

`targets` resolves where wheels go (and `credentials` how to log in without a password ever
showing), `backends` puts each wheel there (twine upload, or a static PEP 503 folder), and
`install_back` proves the round trip: pip installs it back from that target alone, the
bytes must be the ones published, and its modules must import.
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from rich.table import Table

from build_kernel import log
from build_kernel.errors import PublishError
from build_kernel.log import styled
from build_kernel.stages.publish import install_back as back
from build_kernel.stages.publish.backends import (
    UNCHANGED,
    UPLOAD_TIMEOUT_S,
    Backend,
    StaticDirBackend,
    TwineBackend,
    classify_upload_failure,
)
from build_kernel.stages.publish.credentials import credential_env_names, redact
from build_kernel.stages.publish.install_back import INSTALL_TIMEOUT_S, wheel_modules
from build_kernel.stages.publish.targets import INDEXES_ENV, Target, default_indexes_file, load_indexes, resolve_target
from build_kernel.stages.verify.report import require_verified

__all__ = [
    "INDEXES_ENV",
    "INSTALL_TIMEOUT_S",
    "UPLOAD_TIMEOUT_S",
    "Backend",
    "PublishResult",
    "Published",
    "StaticDirBackend",
    "Target",
    "TwineBackend",
    "check",
    "check_target",
    "classify_upload_failure",
    "credential_env_names",
    "default_indexes_file",
    "load_indexes",
    "publish",
    "redact",
    "render",
    "resolve_target",
    "wheel_modules",
]


@dataclass
class Published:
    wheel: str
    project: str
    version: str
    sha256: str
    status: str
    """`uploaded`, `copied` (static folder), `unchanged` (already published, the same bytes) or `skipped`
    (already there, --skip-existing)."""
    verified: bool
    installed_from: str = ""
    index_sha256: str | None = None
    imports: dict[str, str] = field(default_factory=dict)
    dependencies: dict[str, str] = field(default_factory=dict)
    """What the wheel requires (its torch), `name version` -> where the fresh install took it from."""


@dataclass
class PublishResult:
    target: Target
    wheels: list[Published]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "wheels": [asdict(w) for w in self.wheels]}


def render(result: PublishResult) -> Table:
    t = result.target
    table = Table("wheel", "status", "verified", "installed back", "imports", "dependencies from",
                  title=f"{t.label} ({t.kind}: {t.redact(t.url)}; install from {t.redact(t.simple_url)})")
    for w in result.wheels:
        table.add_row(w.wheel, w.status, "yes" if w.verified else styled("NO (--force)", "red"),
                      f"{w.project}=={w.version}" if w.installed_from else "-",
                      ", ".join(f"{m} {o}" for m, o in w.imports.items()) or "-",
                      "; ".join(f"{d}: {where}" for d, where in w.dependencies.items()) or "-")
    return table


@dataclass(frozen=True)
class _Checked:
    wheel: Path
    project: str
    version: str
    sha256: str
    verified: bool


def _wheel_identity(wheel: Path) -> tuple[str, str]:
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise PublishError(f"{wheel}: not a wheel file name: {exc}", hint="publish the .whl that build produced") from None
    return str(canonicalize_name(name)), str(version)


def _archive_problem(wheel: Path, project: str, version: str) -> str | None:
    """Why `wheel` is not a wheel pip could install (None when it is one): checked even under --force,
    which overrides verification, never the file format; nothing broken may reach an index."""
    if not zipfile.is_zipfile(wheel):
        return "not a zip archive"
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError) as exc:
        return f"unreadable zip archive ({exc})"
    if bad is not None:
        return f"corrupt member {bad}"
    metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not metadata:
        return "no .dist-info/METADATA"
    stem = metadata[0].split("/")[0][: -len(".dist-info")]
    got, _, got_version = stem.rpartition("-")
    try:
        same = canonicalize_name(got) == project and Version(got_version) == Version(version)
    except InvalidVersion:
        same = False
    return None if same else f"its dist-info is {stem}, not {project} {version}"


def _built_by(wheel: Path) -> str | None:
    """The shipped recipe that built `wheel` (its provenance names it), for a hint `verify` can run as written."""
    from build_kernel.recipe import list_recipes
    from build_kernel.stages.verify import wheel_provenance

    name = (wheel_provenance(wheel) or {}).get("recipe")
    return name if isinstance(name, str) and name in list_recipes() else None


def check_target(target: Target) -> None:
    """A static folder must be (or become) a writable folder: said before anything is built or copied."""
    if target.kind != "static":
        return
    folder = target.path
    try:
        existing = next(p for p in (folder, *folder.parents) if p.exists())
    except OSError as exc:  # a name over the file system's limit (ENAMETOOLONG): exists() raises, not False
        raise target.fail(f"cannot publish into {folder}: {exc.strerror}",
                          "pass --to a shorter folder path (at most 255 bytes a name, 4096 in all)") from None
    if not existing.is_dir():
        raise target.fail(f"cannot publish into {folder}: {existing} is a file, not a folder",
                          "pass --to a folder path (or set [publish] target to one)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise target.fail(f"cannot publish into {folder}: {existing} is not writable",
                          "fix its permissions, or pass --to a folder you can write")


def check(wheels: Sequence[Path], target: Target, *, force: bool, recipe: str | None = None) -> list[_Checked]:
    """Every wheel exists, is a wheel, and is verified (or --force, loudly), and the target can take
    it: the cheap checks, before any environment is built and any upload. `recipe`: for hints."""
    if not wheels:
        raise PublishError("no wheel to publish", hint="pass WHEEL… or --recipe NAME after a build")
    checked = []
    for wheel in wheels:
        if not wheel.is_file():
            raise PublishError(f"{wheel}: no such wheel", hint="build it first, or fix the path")
        project, version = _wheel_identity(wheel)
        if problem := _archive_problem(wheel, project, version):
            raise PublishError(f"{wheel}: not a wheel: {problem}",
                               hint="publish the .whl that build produced (--force overrides verification, never this)")
        verified = bool(require_verified(wheel, force=force, recipe=recipe or _built_by(wheel)))
        if not verified:
            log.warn(f"PUBLISHING AN UNVERIFIED WHEEL: {wheel.name} goes to {target.label} without a passing "
                     f"verification record; the fleet will install it as if it were good")
        checked.append(_Checked(wheel, project, version, hashlib.sha256(wheel.read_bytes()).hexdigest(), verified))
    check_target(target)
    return checked


def _withdraw(backend: Backend, wheel: Path, status: str) -> None:
    """A wheel whose round trip failed is taken out of a static folder again (pages as before): the
    fleet must not install what was never proven to install. An upload index cannot be undone here,
    so the user is told to yank it. (A warning: the error itself stays the install-back's one line.)"""
    label = backend.target.label
    if status == "copied" and isinstance(backend, StaticDirBackend):
        backend.remove(wheel.name)
        log.warn(f"{wheel.name} did not install back: removed from {label} again")
    elif status == "uploaded":
        log.warn(f"{wheel.name} did not install back but stays on {label}: yank or delete it there")


def publish(
    wheels: Sequence[Path],
    target: Target,
    *,
    skip_existing: bool = False,
    force: bool = False,
    import_modules: Sequence[str] | None = None,
    python: str | Callable[[], str] = sys.executable,
    env: Mapping[str, str],
    log_path: Path | None = None,
    recipe: str | None = None,
    find_links: Sequence[str] = (),
) -> PublishResult:
    """Publish every wheel (all refused unless verified), then install each back and import it.

    `import_modules`: the recipe's [verify] import_modules; None takes them from each wheel.
    `python`: the interpreter that installs back and imports (the build env's, with its torch), or
    what makes it: called only once the cheap checks passed (building a torch environment takes
    minutes). twine runs in this tool's own environment (the build env has no twine).
    `recipe`: how hints name the recipe (`--recipe` of the command).
    `find_links`: wheelhouses the install-back may take the wheel's requirements (its torch) from, besides
    the target: a fleet's other source. Without them, a requirement the target lacks is taken from the
    build environment, with a warning (install_back).
    """
    checked = check(wheels, target, force=force, recipe=recipe)
    python = python if isinstance(python, str) else python()
    backend: Backend = (StaticDirBackend(target) if target.kind == "static"
                        else TwineBackend(target, python=sys.executable, env=env, log_path=log_path))
    done: list[Published] = []
    for c in checked:
        status = backend.put(c.wheel, c.version, skip_existing=skip_existing)
        if status == "skipped":
            log.info(target.redact(f"{c.project} {c.version} is already on {target.label}: skipped (--skip-existing)"))
        elif status == UNCHANGED:
            log.info(target.redact(f"{c.wheel.name} is already published on {target.label} (same bytes): "
                                   "nothing to upload"))
        else:
            log.info(target.redact(f"{c.wheel.name} -> {target.label} ({status})"))
        modules = list(import_modules) if import_modules is not None else wheel_modules(c.wheel)
        try:
            installed = back.install_back(target, c.project, c.version, modules=modules, python=python,
                                          env=env, log_path=log_path, find_links=find_links)
        except PublishError:
            _withdraw(backend, c.wheel, status)
            raise
        fetched, imports = installed.fetched, installed.imports
        for lent in installed.lent:
            log.warn(target.redact(f"{c.project} {c.version} requires {lent.split()[0]}, which {target.label} does not "
                                   f"hold: installed back with the build environment's {lent}; a fleet installing "
                                   "from this index alone cannot install it (put that torch on the index, or "
                                   "install with --find-links: docs/publishing.md)"))
        if fetched is not None and fetched != c.sha256:
            why = "it was skipped as already there, but " if status in ("skipped", UNCHANGED) else ""
            raise target.fail(f"{why}{target.label} serves other bytes for {c.project} {c.version} than "
                              f"{c.wheel.name} (sha256 {fetched[:12]}… vs {c.sha256[:12]}…): the fleet would "
                              "install that other build", "bump the build (a new local version label) and publish again")
        log.info(target.redact(f"installed {c.project}=={c.version} back from {target.simple_url}"
                               + (f"; imported {', '.join(imports)}" if imports else "")
                               + (f" (libcuda: {installed.driver})" if installed.driver and imports else "")))
        done.append(Published(c.wheel.name, c.project, c.version, c.sha256, status, c.verified, target.simple_url,
                              fetched, imports, installed.dependencies))
    return PublishResult(target, done)
