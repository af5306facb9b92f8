"""Can each wheel pin still be installed? One line per pin, as `plan` and `doctor` print it.

Online, the pin's index is read (wheelindex): a version it no longer lists is said, with the nearest
versions it does list, and whether the lock holds the file, which is then all a reinstall needs. Offline
nothing is asked of the network: the lock, else pip's own wheelhouse (its `--find-links`, asked with
`--no-index`), holds the file or a build cannot install it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from build_kernel.errors import ToolchainError
from build_kernel.plan import Plan
from build_kernel.process import probe
from build_kernel.stages.builder import wheelindex, wheelpins


@dataclass(frozen=True)
class PinStatus:
    key: str
    name: str
    pin: str
    index: str
    version: str | None  # what a build installs (None: `nightly`, not resolved)
    locked: wheelpins.Locked | None
    listed: bool | None  # None: not asked (--offline) or the index could not be read
    nearest: tuple[str, ...]
    wheelhouse: str | None  # --offline: the file pip's find-links hold
    line: str
    problem: bool  # a build cannot install it

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


def check(plan: Plan, pin: wheelpins.WheelPin, *, offline: bool) -> PinStatus:
    version = wheelpins.version(plan, pin)
    locked = wheelpins.locked(plan, pin)
    head = f"{pin.name} {pin.pin}" + (f" = {version}" if version and version != pin.pin else "")
    held = (f"the lock holds its file for {locked.target} ({locked.url}, sha256 {locked.sha256[:12]}...)"
            if locked else "")

    def status(line: str, problem: bool, listed: bool | None = None, nearest: tuple[str, ...] = (),
               wheelhouse: str | None = None) -> PinStatus:
        return PinStatus(pin.key, pin.name, pin.pin, pin.index, version, locked, listed, nearest, wheelhouse,
                         f"{head}: {line}", problem)

    if offline:
        if locked:
            return status(f"{held}; {pin.index} not asked (--offline)", False)
        if version is None:
            return status(f"not locked, and --offline cannot ask {pin.index} for the newest", True)
        if found := _wheelhouse(plan, pin.name, version):
            return status(f"not locked; pip's wheelhouse holds it ({found})", False, wheelhouse=found)
        return status(f"neither the lock nor a wheelhouse holds it; a build needs {pin.index}", True)
    try:
        listed = wheelindex.listed(pin.index, pin.name, plan.env)
    except ToolchainError as exc:
        return status(f"{exc.message}; " + (held if locked else "not locked: a build cannot install it"), not locked)
    if version is None:
        newest = wheelindex.newest_nightly(listed)
        if newest is None:
            return status(f"{pin.index} lists no development release for {wheelpins.target()}", True, False)
        return status(f"not locked yet: the next build resolves it to {newest} (the newest listed on {pin.index}) and "
                      "locks it", False, True)
    if wheelindex.is_listed(listed, version):
        return status(f"listed on {pin.index}; " + (held if locked else "not locked yet: the next build locks its URL "
                                                    "and sha256"), False, True)
    nearest = tuple(wheelindex.nearest(listed, version))
    near = f"; nearest: {', '.join(nearest)}" if nearest else f"; {pin.index} lists no {pin.name} for this platform"
    tail = f"{held}: reinstalls use it" if locked else "not locked: a build cannot install it"
    return status(f"no longer listed on {pin.index}{near}; {tail}", not locked, False, nearest)


def check_all(plan: Plan, *, offline: bool) -> list[PinStatus]:
    return [check(plan, pin, offline=offline) for pin in wheelpins.of(plan)]
