"""The install-back's fresh environment: a venv of the build environment's interpreter without any of its
packages (no `--system-site-packages`), which pip fills from the published index alone, as a fleet's is.

A wheel declares the torch it was built against (`Requires-Dist: torch==…`), so pip must find that torch
too: on the index, or in a wheelhouse named with `--find-links`. When neither has it (the demo's static
folder; most internal indexes hold only the kernels), the build environment's own torch may stand in: its
distribution and everything it requires are *linked* into the fresh venv (symlinks, nothing copied: a CUDA
torch is gigabytes), so pip sees the requirement satisfied by the very torch the wheel was built and
verified with, and installs the rest from the index. The stage says so in a warning: that index alone does
not install the wheel on a fleet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_kernel.stages.publish.backends import last_line, run
from build_kernel.stages.publish.targets import Target

VENV_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Fresh:
    python: str
    site: Path


def create(target: Target, python: str, folder: Path, *, env: Mapping[str, str], log_path: Path | None) -> Fresh:
    """`python -m venv --without-pip`: a second or so; pip comes from the build environment (`pip --python`)."""
    code, output = run(target, [python, "-m", "venv", "--without-pip", folder], what="making a fresh environment "
                       "to install back into", env=env, log_path=log_path, timeout=VENV_TIMEOUT_S)
    sites = sorted(folder.glob("lib/python*/site-packages"))
    if code != 0 or not sites:
        raise target.fail(f"cannot make a fresh environment with {python} to install back into: {last_line(output)}",
                          "install that interpreter's venv module (Debian/Ubuntu: apt install python3-venv)")
    return Fresh(str(folder / "bin" / "python"), sites[0])


# Run by the build environment's interpreter: each named distribution and, transitively, what it requires
# (installed ones only; extras left out), with the top-level entries of its files under its site folder.
_CLOSURE = r"""
import importlib.metadata as m, json, re, sys
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()
todo, found = [canon(n) for n in sys.argv[1:]], {}
while todo:
    name = todo.pop()
    if name in found:
        continue
    try:
        dist = m.distribution(name)
    except m.PackageNotFoundError:
        found[name] = None
        continue
    files = [str(f) for f in (dist.files or []) if not str(f).startswith("..")]
    found[name] = {"version": dist.version, "root": str(dist.locate_file("")),
                   "top": sorted({f.split("/")[0] for f in files})}
    for req in dist.requires or []:
        if "extra" not in req.partition(";")[2]:
            todo.append(canon(re.match(r"[A-Za-z0-9._-]+", req.strip()).group(0)))
print(json.dumps(found))
"""


def lend(target: Target, python: str, names: Sequence[str], fresh: Fresh, *, env: Mapping[str, str],
         log_path: Path | None) -> dict[str, str]:
    """Link the build environment's `names` and all they require into the fresh venv; the version of each
    of `names` it has (absent: it has none)."""
    code, output = run(target, [python, "-c", _CLOSURE, *names], what="reading the build environment's "
                       f"{', '.join(names)}", env=env, log_path=log_path, timeout=VENV_TIMEOUT_S)
    try:
        found: dict[str, dict[str, Any] | None] = json.loads(output.strip().splitlines()[-1]) if code == 0 else {}
    except (ValueError, IndexError):
        found = {}
    for dist in found.values():
        if dist is None:
            continue
        root = Path(str(dist["root"]))
        for top in dist["top"]:
            link, source = fresh.site / top, root / top
            if source.exists() and not link.exists() and not link.is_symlink():
                link.symlink_to(source, target_is_directory=source.is_dir())
    versions = {}
    for name in names:
        dist = found.get(re.sub(r"[-_.]+", "-", name).lower())
        if dist is not None:
            versions[name] = str(dist["version"])
    return versions
