"""The torch ABI guard: every installed kernel package whose torch is no longer the environment's.

A C++/CUDA extension links torch's C++ ABI, which changes with every torch minor: after a torch
upgrade or downgrade (a serving stack's `torch==` pin pulling torch back under a wheel built
for a newer one) the package still imports its Python files and dies at the first library load, or worse.
Which packages to look at comes from data, not from names in the code:

- every distribution with our provenance (`build_kernel_provenance.json`: the torch it was compiled
  against, the recipe and archs that built it): its recorded torch vs the installed one;
- every distribution that ships a module some recipe verifies (`[verify] import_modules`) without our provenance (PyPI, a hand build): the torch symbols its libraries import
  that the installed torch's libraries do not export.

Each one found is named with the command that rebuilds it for this torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from build_kernel import process, recipe
from build_kernel.errors import BuildKernelError, VerifyError
from build_kernel.stages.serve.preflight import same_torch
from build_kernel.stages.verify.installed import torch_abi

_MARK = "@@BK-STALE@@"
_INSPECT = r"""
import importlib.metadata as md, importlib.util, json, sys
wanted = set(sys.argv[1:])
out = {"torch": None, "dists": []}
found = importlib.util.find_spec("torch")
out["torch_root"] = next(iter(found.submodule_search_locations or []), None) if found else None
for dist in md.distributions():
    files = [str(f) for f in (dist.files or [])]
    tops = sorted({f.split("/")[0] for f in files if "/" in f and not f.split("/")[0].endswith((".dist-info", ".data"))})
    provenance = dist.read_text("build_kernel_provenance.json")
    if provenance or wanted & set(tops):
        libs = [str(dist.locate_file(f)) for f in files if f.endswith(".so") or ".so." in f]
        out["dists"].append({"name": dist.metadata["Name"], "version": dist.version, "tops": tops,
                             "provenance": provenance, "libs": libs})
print("@@BK-STALE@@" + json.dumps(out))
"""


@dataclass(frozen=True)
class Stale:
    distribution: str
    version: str
    built_for: str  # the torch it was compiled against, or what its libraries lack
    how: str  # "provenance" | "symbols"
    command: str  # the fix

    @property
    def text(self) -> str:
        return f"{self.distribution} {self.version} {self.built_for}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text}


def known_modules(available: Sequence[str]) -> dict[str, str]:
    """top-level module -> the first recipe (by name) that verifies it."""
    out: dict[str, str] = {}
    for name in sorted(available):
        try:
            spec = recipe.load(name).verify
        except BuildKernelError:
            continue
        for module in spec.import_modules:
            out.setdefault(module.split(".")[0], name)
    return out


def _command(recipe_name: str | None, archs: Sequence[str]) -> str:
    if not recipe_name:
        return "rebuild it against this torch (no recipe here builds it)"
    return f"build-kernel --recipe {recipe_name}" + (f" --arch {','.join(archs)}" if archs else "")


def judge(dists: Sequence[Mapping[str, Any]], torch_version: str | None, torch_root: str | None,
          modules: Mapping[str, str], available: Sequence[str], skip: str = "") -> list[Stale]:
    """The distributions (as the inspect script lists them) whose torch is not `torch_version`."""
    if not torch_version:
        return []  # no torch at all is said by doctor's own torch check
    found: list[Stale] = []
    for dist in dists:
        if dist["name"] == skip:
            continue
        known = next((modules[t] for t in dist["tops"] if t in modules), None)
        prov = json.loads(dist["provenance"]) if dist.get("provenance") else {}
        built = prov.get("torch") or prov.get("toolchain", {}).get("torch")
        if prov:
            if not built or same_torch(built, torch_version):
                continue
            name = prov.get("recipe") if prov.get("recipe") in available else known
            found.append(Stale(dist["name"], dist["version"], f"was built against torch {built}; this torch is "
                               f"{torch_version}", "provenance", _command(name, prov.get("archs") or [])))
            continue
        lacking, looked_up = torch_abi.lacking([Path(p) for p in dist["libs"] if Path(p).is_file()], torch_root)
        if lacking:
            found.append(Stale(dist["name"], dist["version"], f"was built against another torch: {len(lacking)} of "
                               f"the {looked_up} torch symbols it imports are not in torch {torch_version}",
                               "symbols", _command(known, [])))
    return found


def scan(python: str, env: Mapping[str, str], torch_version: str | None, *, skip: str = "") -> list[Stale]:
    """Every stale kernel package `python` would import (the one doctor examines in full, `skip`, left out)."""
    available = recipe.list_recipes()
    modules = known_modules(available)
    proc = process.run([python, "-c", _INSPECT, *sorted(modules)], error=VerifyError,
                       what=f"listing the kernel packages of {python}", fix="pass --python PATH of a working interpreter",
                       env=dict(env), check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)), None)
    if proc.returncode or line is None:
        raise VerifyError(f"could not list the packages of {python}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}",
                          hint="pass --python PATH of a working interpreter")
    data = json.loads(line[len(_MARK):])
    return judge(data["dists"], torch_version, data.get("torch_root"), modules, available, skip)
