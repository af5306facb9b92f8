"""Import a wheel's modules in a clean interpreter: the one probe verify and publish share.

Clean means: the wheel's folder first on `PYTHONPATH`, no user site, no `PYTHON*` or
`VIRTUAL_ENV` from our environment, and a working folder of its own, so nothing but the
wheel (and the interpreter's own packages, torch) can answer the import. The probe
reports each module's outcome and the file it came from; optionally the ops registered
under a `torch.ops` namespace and the result of a GPU check.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import process
from build_kernel.errors import BuildKernelError

_MARK = "@@RESULT@@"
_SCRIPT = r"""
import importlib, json, sys, traceback
spec = json.loads(sys.argv[1])
out = {"imports": {}, "ops_found": [], "ops_missing": [], "gpu": None}
for name in spec["modules"]:
    try:
        module = importlib.import_module(name)
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
        out["imports"][name] = {"ok": True, "file": where}
    except Exception as exc:
        out["imports"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                "detail": "".join(traceback.format_exception_only(type(exc), exc)).strip()}
if spec["ops"]:
    import torch
    ns = getattr(torch.ops, spec["namespace"])
    for op in spec["ops"]:
        try:
            getattr(ns, op)
            out["ops_found"].append(op)
        except (AttributeError, RuntimeError):
            out["ops_missing"].append(op)
if spec["gpu_check"]:
    import torch
    if not torch.cuda.is_available():
        out["gpu"] = {"status": "skipped", "why": "no GPU"}
    else:
        major, minor = torch.cuda.get_device_capability()
        have = f"{major}.{minor}"
        if not any(a.startswith(have) for a in spec["archs"]):
            out["gpu"] = {"status": "skipped", "why": f"GPU is sm_{major}{minor}, wheel has {spec['archs']}"}
        else:
            mod, func = spec["gpu_check"].split(":")
            try:
                out["gpu"] = {"status": "ran", **getattr(importlib.import_module(mod), func)()}
            except Exception as exc:
                out["gpu"] = {"status": "failed", "error": "".join(traceback.format_exception_only(exc)).strip()}
print("@@RESULT@@" + json.dumps(out))
"""


@dataclass
class Probe:
    """What the clean interpreter saw; `crashed` is set when it printed no result at all."""

    imports: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops_found: list[str] = field(default_factory=list)
    ops_missing: list[str] = field(default_factory=list)
    gpu: dict[str, Any] | None = None
    crashed: str | None = None
    output: str = ""

    def outcome(self, name: str) -> str:
        res = self.imports.get(name, {})
        return "ok" if res.get("ok") else str(res.get("error", "not tried"))

    def outside(self, name: str, site: Path) -> str | None:
        """Where `name` came from when that is not `site` (another copy answered the import)."""
        file = self.imports.get(name, {}).get("file")
        if file and not Path(file).resolve().is_relative_to(site.resolve()):
            return str(file)
        return None


def clean_env(base: Mapping[str, str], path: Sequence[Path], ld_library_path: Sequence[Path] = ()) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    env["PYTHONNOUSERSITE"] = "1"
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*(str(p) for p in ld_library_path),
                                                  *filter(None, [base.get("LD_LIBRARY_PATH", "")])])
    return env


def run(python: str, modules: Sequence[str], *, path: Sequence[Path], base_env: Mapping[str, str], cwd: Path,
        error: type[BuildKernelError], what: str, namespace: str = "", ops: Sequence[str] = (),
        gpu_check: str = "", archs: Sequence[str] = (), ld_library_path: Sequence[Path] = (),
        log: Path | None = None, timeout: float = 600, secrets: Sequence[str] = ()) -> Probe:
    """Run the probe; a missing interpreter or a timeout raises `error`, a crash is in `crashed`."""
    spec = {"modules": list(modules), "namespace": namespace, "ops": list(ops) if namespace else [],
            "gpu_check": gpu_check, "archs": list(archs)}
    # A module that blocks at import (a lock, a network call, a wait for a GPU) is found by importing it alone.
    hang_fix = (f"run `{python} -c 'import faulthandler; faulthandler.dump_traceback_later(30, exit=True); "
                f"import {modules[0]}'`: it prints where the import blocks") if modules else None
    proc = process.run([python, "-c", _SCRIPT, json.dumps(spec)], error=error, what=what, fix=hang_fix, cwd=cwd,
                       env=clean_env(base_env, path, ld_library_path), log=log, timeout=timeout, check=False,
                       secrets=secrets)
    output = proc.stdout + proc.stderr
    marker = next((line for line in proc.stdout.splitlines() if line.startswith(_MARK)), None)
    if marker is None:
        tail = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
        return Probe(crashed=f"{process.exit_cause(proc.returncode)} ({tail})", output=output)
    data = json.loads(marker[len(_MARK):])
    return Probe(data["imports"], data["ops_found"], data["ops_missing"], data["gpu"], None, output)
