"""Installing from a folder of wheels (an offline host): what the folder lacks, all of it, in one line.

pip with `--no-index --find-links DIR` stops at the first distribution it cannot find. So
before pip runs, the requirements are walked through the folder's own wheels: for each, the
highest version that fits its specifier and the serve interpreter's tags, then that wheel's
Requires-Dist (markers evaluated for the serve interpreter, extras followed). What the serve
interpreter already has (its torch, the build environment's packages) is no need; an sdist
counts as there (its requirements are known only once built). Every requirement no file
meets is listed, with the distribution that needs it.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from build_kernel import process
from build_kernel.errors import ServeError

_MARK = "@@WHEELHOUSE-TARGET@@"
# pip vendors packaging: the serve interpreter's markers and tags, as pip will read them.
_PROBE = r"""
import importlib.metadata as md, json
from pip._vendor.packaging import markers, tags
have = {}
for d in md.distributions():
    if d.metadata["Name"]:
        have.setdefault(d.metadata["Name"], d.version)
print("@@WHEELHOUSE-TARGET@@" + json.dumps({"env": markers.default_environment(),
      "tags": [str(t) for t in tags.sys_tags()], "have": have}))
"""


@dataclass(frozen=True)
class Target:
    """The interpreter pip installs into: its marker environment, wheel tags and installed versions."""

    env: dict[str, str]
    tags: frozenset[str]
    have: dict[str, str]


@dataclass(frozen=True)
class Dist:
    name: str
    version: Version
    path: Path
    tags: frozenset[str] | None  # None: an sdist


def target(python: str, env: Mapping[str, str]) -> Target:
    proc = process.run([python, "-c", _PROBE], error=ServeError, what=f"asking {python} for its wheel tags", env=env,
                       timeout=120)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        raise ServeError(f"{python} printed no wheel tags", hint="its pip must be importable (python -m ensurepip)")
    data = json.loads(line[len(_MARK):])
    return Target(data["env"], frozenset(data["tags"]), {canonicalize_name(k): v for k, v in data["have"].items()})


def scan(folder: Path) -> dict[str, list[Dist]]:
    """The folder's wheels and sdists by distribution name; files of other names are ignored."""
    found: dict[str, list[Dist]] = {}
    for path in sorted(folder.iterdir()):
        try:
            if path.name.endswith(".whl"):
                name, version, _, tags = parse_wheel_filename(path.name)
                dist = Dist(name, version, path, frozenset(str(t) for t in tags))
            elif path.name.endswith((".tar.gz", ".zip")):
                name, version = parse_sdist_filename(path.name)
                dist = Dist(name, version, path, None)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        found.setdefault(canonicalize_name(dist.name), []).append(dist)
    return found


def requires(wheel: Path) -> list[str]:
    """Requires-Dist of a wheel, from its METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        headers = Parser().parsestr(zf.read(meta).decode(errors="replace"), headersonly=True)
    return [str(v) for v in headers.get_all("Requires-Dist") or []]


def best(found: Mapping[str, list[Dist]], req: Requirement, tgt: Target) -> Dist | None:
    fits = [d for d in found.get(canonicalize_name(req.name), ())
            if req.specifier.contains(d.version, prereleases=True) and (d.tags is None or d.tags & tgt.tags)]
    return max(fits, key=lambda d: (d.version, d.tags is not None), default=None)


def lacking(folder: Path, reqs: Iterable[str], tgt: Target, *, installed_count: bool = True) -> list[str]:
    """Every requirement (of `reqs`, or of a wheel they lead to) that no file of `folder` meets.
    `installed_count`: what the target has already is no need (false for an isolated build)."""
    found = scan(folder)
    todo: list[tuple[Requirement, str, frozenset[str]]] = []
    for text in reqs:
        try:
            todo.append((Requirement(text), "", frozenset({""})))
        except InvalidRequirement:
            continue
    seen: set[tuple[str, str]] = set()
    missing: list[str] = []
    while todo:
        req, parent, parent_extras = todo.pop(0)
        if req.marker is not None and not any(req.marker.evaluate({**tgt.env, "extra": e}) for e in parent_extras):
            continue
        name = canonicalize_name(req.name)
        key = (name, str(req.specifier) + ",".join(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        have = tgt.have.get(name) if installed_count else None
        if have is not None and req.specifier.contains(have, prereleases=True):
            continue
        dist = best(found, req, tgt)
        if dist is None:
            shown = f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}"
            missing.append(shown + (f" (for {parent})" if parent else ""))
            continue
        if dist.tags is None:
            continue
        extras = frozenset({"", *(canonicalize_name(e) for e in req.extras)})
        for dep in requires(dist.path):
            try:
                todo.append((Requirement(dep), f"{dist.name} {dist.version}", extras))
            except InvalidRequirement:
                continue
    return missing


def require(folder: Path, reqs: Iterable[str], tgt: Target, *, what: str, installed_count: bool = True) -> None:
    """Refuse, in one line listing all of it, a folder that lacks what `what` needs."""
    missing = lacking(folder, reqs, tgt, installed_count=installed_count)
    if missing:
        py = tgt.env.get("python_version", "?")
        raise ServeError(f"the wheelhouse {folder} lacks {len(missing)} distribution(s) for {what}: "
                         f"{', '.join(missing)}",
                         hint=f"add their wheels for Python {py} on {tgt.env.get('platform_machine', '?')}, e.g. "
                              f"`pip download -d {folder} --python-version {py} --only-binary :all: 'REQ'` on a host "
                              "with an index")


def index_args(folder: Path | None) -> list[str]:
    """pip's arguments for installing from the folder alone (none without a folder)."""
    return ["--no-index", "--find-links", str(folder)] if folder is not None else []
