"""The publish stage: verified wheels to an index, then the exact version installed back and imported.

`targets` resolves where wheels go (and `credentials` how to log in without a password ever
showing), `backends` puts each wheel there (twine upload, or a static PEP 503 folder), and
`install_back` proves the round trip: pip installs it back from that target alone, the
bytes must be the ones published, and its modules must import.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from rich.table import Table

from build_kernel import log
from build_kernel.errors import PublishError
from build_kernel.log import styled
from build_kernel.stages.publish import install_back as back
from build_kernel.stages.publish.backends import (
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
    "INDEXES_ENV", "INSTALL_TIMEOUT_S", "UPLOAD_TIMEOUT_S", "Backend", "PublishResult", "Published", "StaticDirBackend",
    "Target", "TwineBackend", "classify_upload_failure", "credential_env_names", "default_indexes_file",
    "load_indexes", "publish", "redact", "render", "resolve_target", "wheel_modules",
]


@dataclass
class Published:
    wheel: str
    project: str
    version: str
    sha256: str
    status: str
    """`uploaded`, `copied` (static folder) or `skipped` (already there, --skip-existing)."""
    verified: bool
    installed_from: str = ""
    index_sha256: str | None = None
    imports: dict[str, str] = field(default_factory=dict)


@dataclass
class PublishResult:
    target: Target
    wheels: list[Published]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "wheels": [asdict(w) for w in self.wheels]}


def render(result: PublishResult) -> Table:
    t = result.target
    table = Table("wheel", "status", "verified", "installed back", "imports",
                  title=f"{t.label} ({t.kind}: {t.redact(t.url)}; install from {t.redact(t.simple_url)})")
    for w in result.wheels:
        table.add_row(w.wheel, w.status, "yes" if w.verified else styled("NO (--force)", "red"),
                      f"{w.project}=={w.version}" if w.installed_from else "-",
                      ", ".join(f"{m} {o}" for m, o in w.imports.items()) or "-")
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


def _check(wheels: Sequence[Path], target: Target, *, force: bool) -> list[_Checked]:
    """Every wheel exists, is named like one, and is verified (or --force, loudly): before any upload."""
    if not wheels:
        raise PublishError("no wheel to publish", hint="pass WHEEL… or --recipe NAME after a build")
    checked = []
    for wheel in wheels:
        if not wheel.is_file():
            raise PublishError(f"{wheel}: no such wheel", hint="build it first, or fix the path")
        project, version = _wheel_identity(wheel)
        verified = bool(require_verified(wheel, force=force))
        if not verified:
            log.warn(f"PUBLISHING AN UNVERIFIED WHEEL: {wheel.name} goes to {target.label} without a passing "
                     f"verification record; the fleet will install it as if it were good")
        checked.append(_Checked(wheel, project, version, hashlib.sha256(wheel.read_bytes()).hexdigest(), verified))
    return checked


def publish(
    wheels: Sequence[Path],
    target: Target,
    *,
    skip_existing: bool = False,
    force: bool = False,
    import_modules: Sequence[str] | None = None,
    python: str = sys.executable,
    env: Mapping[str, str],
    log_path: Path | None = None,
) -> PublishResult:
    """Publish every wheel (all refused unless verified), then install each back and import it.

    `import_modules`: the recipe's [verify] import_modules; None takes them from each wheel.
    `python`: the interpreter that installs back and imports (the build env's, with its torch); twine
    runs in this tool's own environment (the build env has no twine).
    """
    checked = _check(wheels, target, force=force)
    backend: Backend = (StaticDirBackend(target) if target.kind == "static"
                        else TwineBackend(target, python=sys.executable, env=env, log_path=log_path))
    done: list[Published] = []
    for c in checked:
        status = backend.put(c.wheel, c.version, skip_existing=skip_existing)
        if status == "skipped":
            log.info(target.redact(f"{c.project} {c.version} is already on {target.label}: skipped (--skip-existing)"))
        else:
            log.info(target.redact(f"{c.wheel.name} -> {target.label} ({status})"))
        modules = list(import_modules) if import_modules is not None else wheel_modules(c.wheel)
        fetched, imports = back.install_back(target, c.project, c.version, modules=modules, python=python, env=env,
                                             log_path=log_path)
        if fetched is not None and fetched != c.sha256:
            why = "it was skipped as already there, but " if status == "skipped" else ""
            raise target.fail(f"{why}{target.label} serves other bytes for {c.project} {c.version} than "
                              f"{c.wheel.name} (sha256 {fetched[:12]}… vs {c.sha256[:12]}…): the fleet would "
                              "install that other build", "bump the build (a new local version label) and publish again")
        log.info(target.redact(f"installed {c.project}=={c.version} back from {target.simple_url}"
                               + (f"; imported {', '.join(imports)}" if imports else "")))
        done.append(Published(c.wheel.name, c.project, c.version, c.sha256, status, c.verified, target.simple_url,
                              fetched, imports))
    return PublishResult(target, done)
