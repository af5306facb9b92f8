"""Can each wheel pin still be installed? One line per pin, as `plan` and `doctor` print it.

Online, the pin's index is read (wheelindex): a version it no longer lists is said, with the nearest
versions it does list, and whether the lock holds the file, which is then all a reinstall needs. Offline
nothing is asked of the network: the lock, else pip's own wheelhouse (its `--find-links`, asked with
`--no-index`), holds the file or a build cannot install it. A release pinned without torch_index comes
from pip's own index (PyPI or its [mirrors] mirror), which never prunes one: it is asked whether it still
lists it, and a wheelhouse stands in when it is out of reach. A build environment already made needs
neither. `problems()` is the verdict "can this toolchain be installed", one line with its fix per pin
that cannot: `plan` and `doctor` print it first and exit 3, the pipeline's preflight reuses it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from build_kernel.errors import ToolchainError
from build_kernel.mirrors import PYPI
from build_kernel.plan import Plan, recipe_arg
from build_kernel.process import probe
from build_kernel.stages.builder import wheelindex, wheelpins


@dataclass(frozen=True)
class PinStatus:
    key: str
    name: str
    pin: str
    index: str  # as the recipe names it ("": pip's own index)
    version: str | None  # what a build installs (None: `nightly`, not resolved)
    locked: wheelpins.Locked | None
    listed: bool | None  # None: not asked (--offline) or the index could not be read
    nearest: tuple[str, ...]
    wheelhouse: str | None  # the file pip's find-links hold (asked offline, or when the index is out of reach)
    line: str
    problem: bool  # a build cannot install it
    fix: str = ""  # with a problem: what to do
    reads: str = ""  # the index really read (its [mirrors] mirror, or pip's index for a release)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "locked": asdict(self.locked) if self.locked else None, "nearest": list(self.nearest)}


def _wheelhouse(plan: Plan, name: str, version: str) -> str | None:
    """The file pip would install with no index at all (its configured find-links), from its own report."""
    out = probe([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "--ignore-installed",
                 "--quiet", "--disable-pip-version-check", "--report", "-", f"{name}=={version}"], env=plan.env,
                merge=False)
    try:
        return str(json.loads(out or "")["install"][0]["download_info"]["url"])
    except (ValueError, KeyError, IndexError):
        return None


def _built(plan: Plan) -> Path | None:
    """The build environment of this toolchain, when it is already made: then nothing needs installing."""
    from build_kernel.stages.builder import buildenv

    root = Path(buildenv.python_for(plan, dry_run=True)).parent.parent
    return root if (root / ".complete").is_file() else None


def check(plan: Plan, pin: wheelpins.WheelPin, *, offline: bool) -> PinStatus:
    """A pin from the recipe's torch_index: listed there, or held by the lock, or not installable."""
    version = wheelpins.version(plan, pin)
    locked = wheelpins.locked(plan, pin)
    head = f"{pin.name} {pin.pin}" + (f" = {version}" if version and version != pin.pin else "")
    held = (f"the lock holds its file for {locked.target} ({locked.url}, sha256 {locked.sha256[:12]}...)"
            if locked else "")
    built = _built(plan)
    fix = wheelpins.unfound_fix(plan, pin)

    def status(line: str, problem: bool, listed: bool | None = None, nearest: tuple[str, ...] = (),
               wheelhouse: str | None = None, why_fix: str = fix) -> PinStatus:
        if problem and built:  # the index or the lock would be needed only to make it again
            line, problem = f"{line}; the build environment {built} has it already", False
        return PinStatus(pin.key, pin.name, pin.pin, pin.index, version, locked, listed, nearest, wheelhouse,
                         f"{head}: {line}", problem, why_fix if problem else "", pin.reads)

    if offline:
        if locked:
            return status(f"{held}; {pin.reads} not asked (--offline)", False)
        if version is None:
            return status(f"not locked, and --offline cannot ask {pin.reads} for the newest", True,
                          why_fix=f"run `build-kernel lock --recipe {recipe_arg(plan.recipe)}` once with the network, "
                                  f"or {fix}")
        if found := _wheelhouse(plan, pin.name, version):
            return status(f"not locked; pip's wheelhouse holds it ({found})", False, wheelhouse=found)
        return status(f"neither the lock nor a wheelhouse holds it; a build needs {pin.reads}", True)
    try:
        listed = wheelindex.listed(pin.fetch_index, pin.name, plan.env)
    except ToolchainError as exc:
        return status(f"{exc.message}; " + (held if locked else "not locked: a build cannot install it"), not locked)
    if version is None:
        newest = wheelindex.newest_nightly(listed)
        if newest is None:
            return status(f"{pin.reads} lists no development release for {wheelpins.target()}", True, False,
                          why_fix="check [toolchain] torch_index (a nightly index)")
        return status(f"not locked yet: the next build (or `build-kernel lock`) resolves it to {newest} (the newest "
                      f"listed on {pin.reads}) and locks it", False, True)
    if wheelindex.is_listed(listed, version):
        return status(f"listed on {pin.reads}; " + (held if locked else "not locked yet: the next build (or "
                                                    "`build-kernel lock`) locks its URL and sha256"), False, True)
    nearest = tuple(wheelindex.nearest(listed, version))
    near = f"; nearest: {', '.join(nearest)}" if nearest else f"; {pin.reads} lists no {pin.name} for this platform"
    tail = f"{held}: reinstalls use it" if locked else "not locked: a build cannot install it"
    return status(f"no longer listed on {pin.reads}{near}; {tail}", not locked, False, nearest)


def check_release(plan: Plan, pin: wheelpins.WheelPin, *, offline: bool) -> PinStatus:
    """A release from pip's own index (no torch_index): never locked, as PyPI never prunes one; is it there?"""
    head, fix = f"{pin.name} {pin.pin}", (f"check the network and the proxy, map {PYPI} to a mirror in "
                                          f"{plan.mirrors.config_words()}, or give pip a wheelhouse holding "
                                          f"it (PIP_FIND_LINKS)")
    built = _built(plan)

    def status(line: str, problem: bool, listed: bool | None = None, nearest: tuple[str, ...] = (),
               wheelhouse: str | None = None, why_fix: str = fix) -> PinStatus:
        if problem and built:
            line, problem = f"{line}; the build environment {built} has it already", False
        return PinStatus(pin.key, pin.name, pin.pin, "", pin.pin, None, listed, nearest, wheelhouse, f"{head}: {line}",
                         problem, why_fix if problem else "", pin.fetch_index)

    where = f"pip's index {pin.fetch_index}"
    if offline:
        if found := _wheelhouse(plan, pin.name, pin.pin):
            return status(f"a release from {where}, not asked (--offline); pip's wheelhouse holds it ({found})", False,
                          wheelhouse=found)
        return status(f"a release from {where}; --offline, and no wheelhouse holds it", True)
    try:
        listed = wheelindex.listed(pin.fetch_index, pin.name, plan.env)
    except ToolchainError as exc:
        if found := _wheelhouse(plan, pin.name, pin.pin):
            return status(f"{exc.message}; pip's wheelhouse holds it ({found})", False, wheelhouse=found)
        return status(f"{exc.message}; no wheelhouse holds it: a build cannot install it", True)
    if wheelindex.is_listed(listed, pin.pin):
        return status(f"a release listed on {where} (releases are never pruned there: no lock needed)", False, True)
    nearest = tuple(wheelindex.nearest(listed, pin.pin))
    near = f"; nearest: {', '.join(nearest)}" if nearest else f"; it lists no {pin.name} for {wheelpins.target()}"
    return status(f"not listed on {where}{near}: a build cannot install it", True, False, nearest,
                  why_fix="pin a version it lists in [toolchain] torch, or name the index that has it in torch_index")


def check_all(plan: Plan, *, offline: bool) -> list[PinStatus]:
    found = [check(plan, pin, offline=offline) for pin in wheelpins.of(plan)]
    if (pin := wheelpins.release(plan)) is not None:
        found.append(check_release(plan, pin, offline=offline))
    return found


def problems(plan: Plan, *, offline: bool, statuses: list[PinStatus] | None = None) -> list[str]:
    """Can the recipe's toolchain be installed? One line per pin a build cannot install, each with its fix;
    none: it can (`plan` and `doctor` exit 3 otherwise, and the preflight lists them with its other checks)."""
    return [f"the toolchain cannot be installed: {s.line}; fix: {s.fix}"
            for s in (check_all(plan, offline=offline) if statuses is None else statuses) if s.problem]
