"""Before serving: the kernel the server will import is the wheel we built and verified.

Proof, in order: the wheel has a passing verification record for its exact bytes; the
serve interpreter has that wheel's distribution at that version, and no other
distribution of the same package; the installed files hash to the wheel's RECORD (the
native libraries are hashed on disk, so a copy overwritten after install is caught); the
import resolves to that copy; sglang is the recipe's (its release, or the build of the
kernel's own commit: sglang_dist) and its start-up check on the kernel (the distribution its
pin names, at least the pin's version) admits ours; torch is the one the wheel was built against.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from build_kernel import log
from build_kernel.errors import ServeError
from build_kernel.stages.builder.provenance import FILE as PROVENANCE_FILE
from build_kernel.stages.serve.environment import KERNEL_DISTRIBUTIONS, Installed
from build_kernel.stages.serve.sglang_dist import Choice
from build_kernel.stages.verify import report

NATIVE = (".so", ".pyd", ".dylib")


@dataclass
class Preflight:
    wheel: str
    distribution: str
    version: str
    python: str
    sglang: str | None
    torch: str | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def wheel_record(wheel: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """The wheel's RECORD (path -> urlsafe-b64 sha256) and our provenance JSON inside it."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.StringIO(zf.read(record).decode()))
        hashes = {row[0]: row[1].split("=", 1)[1] for row in rows if len(row) >= 2 and row[1].startswith("sha256=")}
        prov = next((n for n in names if n.endswith(f".dist-info/{PROVENANCE_FILE}")), None)
        provenance = json.loads(zf.read(prov)) if prov else {}
    return hashes, provenance


def _installed_matches(wheel: Path, module: str, dist: dict[str, Any]) -> str | None:
    """None when the installed files are the wheel's; else what differs."""
    want, _ = wheel_record(wheel)
    want = {p: h for p, h in want.items() if p.startswith(module + "/")}
    have: dict[str, str | None] = dist["files"]
    missing = sorted(set(want) - set(have))
    if missing:
        return f"{len(missing)} of the wheel's files are not installed (e.g. {missing[0]})"
    changed = [p for p, h in want.items() if have[p] != h]
    if changed:
        return f"{len(changed)} installed files are not the wheel's (e.g. {changed[0]})"
    root = Path(dist["root"])
    for path in sorted(p for p in want if p.endswith(NATIVE) or ".so." in p):
        on_disk = root / path
        if not on_disk.is_file() or report.record_hash(on_disk) != want[path]:
            return f"{path} on disk is not the wheel's (overwritten after install?)"
    return None


# sglang's start-up check on the kernel (srt/entrypoints/engine.py at 6ffc74ef and at 0753182b:
# `assert_pkg_version(<kernel distribution>, X)`, X = its pyproject pin) refuses only a kernel *older* than X, or no
# distribution of that name (the pin's, so `sgl-kernel` and `sglang-kernel` are not interchangeable there, though
# both install sgl_kernel); this variable, read as sglang's get_bool_env_var reads it, skips the check.
SKIP_CHECK = "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"
# sglang's own start-up check is not mended by reinstalling: its refusal names the skip variable instead.
PIN_FIX = (f"set {SKIP_CHECK} = \"1\" in the recipe's [serve.env] to skip sglang's check (at your own risk), "
           "or serve an sglang whose kernel pin ours meets")


def _skips_check(env: Mapping[str, str]) -> bool:
    return env.get(SKIP_CHECK, "false").lower() in ("true", "1")


def _lowest(req: Requirement) -> Version | None:
    """The version a requirement's specifier starts at (`==X`, `>=X`, `~=X`, `>X`): sglang's start-up minimum."""
    bounds = [Version(s.version) for s in req.specifier if s.operator in ("==", "===", ">=", "~=", ">")
              and "*" not in s.version]
    return max(bounds) if bounds else None


def _sglang_pin_note(installed: Installed, dist_name: str, version: str,
                     env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(note, problem): what sglang's own requirement on the kernel, and its start-up check, say of our version."""
    if canonicalize_name(dist_name) not in KERNEL_DISTRIBUTIONS:
        return f"sglang {installed.sglang} does not depend on {dist_name}", None
    skipped = _skips_check(env)
    for text in installed.sglang_requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        if name not in KERNEL_DISTRIBUTIONS or (req.marker is not None and "extra" in str(req.marker)):
            continue
        ours, lowest = Version(version), _lowest(req)
        head = f"sglang {installed.sglang} requires {req}; ours is {dist_name} {version}"
        if name != canonicalize_name(dist_name) and not skipped:
            return head, (f"sglang {installed.sglang} checks for {req.name} at start and ours is named {dist_name}: "
                          "sglang refuses it at start")
        if lowest is not None and ours < lowest:
            if skipped:
                return f"{head}: older, but {SKIP_CHECK} in [serve.env] skips sglang's start-up check", None
            return head, (f"sglang {installed.sglang} requires {req} and ours is {version}, older than {lowest}: "
                          "sglang refuses it at start")
        # `==0.3.21` admits `0.3.21+cu130...`: a local label is ignored (PEP 440).
        if not req.specifier.contains(ours, prereleases=True):
            return (f"{head}: newer than the pin, which only pip reads (we install --no-deps); sglang's start-up "
                    f"check asks for at least {lowest}"), None
        return head, None
    return f"sglang {installed.sglang} does not depend on {dist_name}", None


def same_torch(built: str, have: str) -> bool:
    """2.14.1 is 2.14.1+cu130: package metadata may drop the local label torch.__version__ keeps."""
    a, b = Version(built), Version(have)
    return a.public == b.public and (a.local == b.local or not a.local or not b.local)


def check(wheel: Path, module: str, installed: Installed, *, sglang: Choice, env: Mapping[str, str],
          force: bool = False, recipe: str | None = None) -> Preflight:
    """Refuse (ServeError, or a loud warning under `force`) unless the server would run our verified wheel;
    `env`: the server's environment ([serve.env] included); `recipe`: how the refusal's `verify` hint names the
    recipe."""
    report.require_verified(wheel, force=force, recipe=recipe)
    parsed_name, parsed_version, _, _ = parse_wheel_filename(wheel.name)
    dist_name, version = str(parsed_name), str(parsed_version)
    _, provenance = wheel_record(wheel)
    found = {canonicalize_name(n): (n, d) for n, d in installed.dists.items()}
    ours = found.pop(canonicalize_name(dist_name), None)
    fix = "run `build-kernel serve --install --recipe R`: it installs this wheel --no-deps and sglang beside it"
    problems: list[str] = []
    if ours is None:
        problems.append(f"{installed.python} has no {dist_name}: the server would not import our {wheel.name}")
    else:
        name, dist = ours
        if Version(dist["version"]) != parsed_version:
            problems.append(f"{installed.python} has {name} {dist['version']}, not ours ({version})")
        elif (why := _installed_matches(wheel, module, dist)) is not None:
            problems.append(f"the {module} in {installed.python} is not {wheel.name}: {why}")
        elif installed.module_origin and not Path(installed.module_origin).resolve().is_relative_to(
                (Path(dist["root"]) / module).resolve()):
            problems.append(f"`import {module}` in {installed.python} finds {installed.module_origin}, not our copy "
                            "(a PYTHONPATH entry in [serve.env]?)")
    for name, dist in found.values():
        problems.append(f"{installed.python} also has {name} {dist['version']}, which installs {module} too")
    if sglang.version and not sglang.admits(installed.sglang):
        wants = (f"the recipe pins {sglang.version}" if sglang.origin == "release" else
                 f"the recipe serves sglang {sglang.version} (built from {sglang.commit[:12]}: [serve] sglang = \"source\")")
        problems.append(f"{installed.python} has sglang {installed.sglang or '(none)'}, {wants}")
    built_torch = provenance.get("toolchain", {}).get("torch")
    if built_torch and installed.torch and not same_torch(built_torch, installed.torch):
        problems.append(f"{installed.python} has torch {installed.torch}; {wheel.name} was built against {built_torch}")
    result = Preflight(wheel.name, dist_name, version, installed.python, installed.sglang, installed.torch)
    pin_problem = None
    if installed.sglang:
        note, pin_problem = _sglang_pin_note(installed, dist_name, version, env)
        result.notes.append(note or "")
        if pin_problem:
            problems.append(pin_problem)
    if problems:
        for p in problems[1:] if not force else ():
            log.info(f"  also: {p}")
        if not force:
            raise ServeError(f"refusing to serve: {problems[0]}" + (f" (and {len(problems) - 1} more)" if problems[1:]
                                                                    else ""),
                             hint=PIN_FIX if problems[0] == pin_problem else fix)
        for p in problems:
            log.warn(f"{p}: serving anyway because of --force")
    return result
