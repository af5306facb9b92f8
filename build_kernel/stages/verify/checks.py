"""Verify a built wheel: cubin archs and FP4 SASS (static), import and ops (clean process),
and a real kernel run against a reference when a GPU of a built arch is present.

An op being registered proves nothing (upstream registers FP4 ops unconditionally); the
FP4 kernels are proven by their SASS opcodes in the cubins of the library SM120 loads.
The result is recorded beside the wheel; publish and serve refuse a wheel without a
passing record.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from build_kernel import log
from build_kernel.archs import Arch
from build_kernel.errors import VerifyError
from build_kernel.recipe import Verify
from build_kernel.stages.verify import driver_stub

RECORD_SUFFIX = ".verify.json"

_IMPORT_PROBE = r"""
import importlib, json, sys, traceback
spec = json.loads(sys.argv[1])
out = {"imports": {}, "ops_found": [], "ops_missing": [], "gpu": None}
for name in spec["modules"]:
    try:
        importlib.import_module(name)
        out["imports"][name] = "ok"
    except Exception as exc:
        out["imports"][name] = f"{type(exc).__name__}: {exc}"
import torch
ns = getattr(torch.ops, spec["namespace"]) if spec["namespace"] else None
for op in spec["ops"]:
    try:
        getattr(ns, op)
        out["ops_found"].append(op)
    except (AttributeError, RuntimeError):
        out["ops_missing"].append(op)
if spec["gpu_check"]:
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
class LibraryReport:
    path: str
    archs: list[str]
    missing: list[str]
    extra: list[str]
    fp4_matches: dict[str, int] | None = None


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

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "passed": self.passed}


def find_tool(name: str) -> str | None:
    """cuobjdump/nvdisasm: PATH, then the PyPI nvidia-cuda-* wheels, then CUDA_HOME."""
    found = shutil.which(name)
    if found:
        return found
    for base in {Path(p) for p in sys.path if p}:
        for candidate in base.glob(f"nvidia/*/bin/{name}"):
            return str(candidate)
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidate = Path(home) / "bin" / name
    return str(candidate) if candidate.is_file() else None


def _tool_env() -> dict[str, str]:
    """cuobjdump -sass runs nvdisasm: put it on PATH."""
    env = dict(os.environ)
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm:
        env["PATH"] = f"{Path(nvdisasm).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _install_tools() -> str:
    """cuobjdump and nvdisasm come as PyPI wheels: install them into the tool's own env."""
    log.info("cuobjdump not found: installing nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "nvidia-cuda-cuobjdump",
                           "nvidia-cuda-nvdisasm"], capture_output=True, text=True, check=False)
    found = find_tool("cuobjdump")
    if proc.returncode or not found:
        reason = (proc.stderr.strip().splitlines() or ["installed, but not found"])[-1]
        raise VerifyError(f"cuobjdump not found and could not be installed: {reason}",
                          hint="pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or put the CUDA toolkit's bin on PATH")
    return found


def cubin_archs(so: Path, cuobjdump: str) -> list[str]:
    proc = subprocess.run([cuobjdump, "--list-elf", str(so)], capture_output=True, text=True, check=False)
    if proc.returncode and "does not contain device code" not in (proc.stderr + proc.stdout):
        raise VerifyError(f"cuobjdump --list-elf {so.name} failed: {proc.stderr.strip()}")
    return sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", proc.stdout)))


def sass_matches(so: Path, arch: str, patterns: tuple[str, ...], cuobjdump: str) -> dict[str, int]:
    """How many SASS instructions of `arch` match each pattern."""
    proc = subprocess.run([cuobjdump, "-sass", "-arch", arch, str(so)], capture_output=True, text=True,
                          env=_tool_env(), check=False)
    if proc.returncode:
        raise VerifyError(f"cuobjdump -sass {so.name} failed: {proc.stderr.strip()}",
                          hint="install nvidia-cuda-nvdisasm (cuobjdump -sass needs nvdisasm)")
    return {p: len(re.findall(p, proc.stdout)) for p in patterns}


def verify(wheel: Path, spec: Verify, archs: tuple[Arch, ...], *, python: str = sys.executable,
           gpu_check: str = "", cuda_home: str | None = None) -> Report:
    """Check one wheel; write `<wheel>.verify.json`; return the report."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = Report(wheel.name, digest, [a.sm for a in archs])
    cuobjdump = find_tool("cuobjdump") or _install_tools()
    with tempfile.TemporaryDirectory(prefix="bk-verify-") as tmp_str:
        tmp = Path(tmp_str)
        site = tmp / "site"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        libs = sorted(p for p in site.rglob("*.so*") if p.is_file())
        asked = set(report.asked)
        for so in libs:
            rel = str(so.relative_to(site))
            found = cubin_archs(so, cuobjdump)
            if not found:
                continue
            lib = LibraryReport(rel, found, sorted(asked - set(found)), sorted(set(found) - asked))
            if lib.missing:
                report.failures.append(f"{rel}: no cubin for {', '.join(lib.missing)} (has {', '.join(found)})")
            if lib.extra:
                report.warnings.append(f"{rel}: code for {', '.join(lib.extra)} was not asked for (wasted build time)")
            if spec.fp4_library and fnmatch.fnmatch(rel, spec.fp4_library):
                lib.fp4_matches = {}
                for sm in (a.sm for a in archs if a.fp4_capable and a.sm in found):
                    for pattern, count in sass_matches(so, sm, spec.fp4_sass, cuobjdump).items():
                        lib.fp4_matches[f"{sm}:{pattern}"] = count
            report.libraries.append(lib)
        if not report.libraries:
            report.failures.append("no CUDA extension in the wheel (no .so holds device code)")
        fp4_archs = [a for a in archs if a.fp4_capable]
        if spec.fp4_library and spec.fp4_sass and fp4_archs:
            hits = [(l, l.fp4_matches) for l in report.libraries if l.fp4_matches is not None]
            if not hits:
                report.failures.append(f"no library matching {spec.fp4_library} holds {fp4_archs[0].sm} code: the FP4 kernels are missing")
            for lib, matches in hits:
                if not any(matches.values()):
                    report.failures.append(
                        f"{lib.path}: no FP4 instructions ({' / '.join(spec.fp4_sass)}) in its "
                        f"{', '.join(a.sm for a in fp4_archs)} SASS: the FP4 kernels were not compiled "
                        "(ENABLE_NVFP4 off? upstream skips it when CUDA_VERSION is empty)")
        _import_check(report, site, spec, archs, python, gpu_check, tmp, cuda_home, libs)
    record = wheel.with_name(wheel.name + RECORD_SUFFIX)
    tmp_record = record.with_name(record.name + ".tmp")
    tmp_record.write_text(json.dumps(report.to_dict(), indent=2))
    tmp_record.replace(record)
    return report


def _import_check(report: Report, site: Path, spec: Verify, archs: tuple[Arch, ...], python: str, gpu_check: str,
                  tmp: Path, cuda_home: str | None, libs: list[Path]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # The wheel first; then build_kernel itself, for its GPU checks (never the package).
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(Path(__file__).resolve().parent.parent)])
    env["PYTHONNOUSERSITE"] = "1"
    stub_dir, report.driver = driver_stub.provide(libs, tmp / "driver", cuda_home)
    if stub_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(stub_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    probe = {"modules": list(spec.import_modules), "namespace": spec.op_namespace, "ops": list(spec.ops),
             "gpu_check": gpu_check or spec.gpu_check, "archs": [a.torch for a in archs]}
    proc = subprocess.run([python, "-c", _IMPORT_PROBE, json.dumps(probe)], capture_output=True, text=True,
                          cwd=tmp, env=env, check=False, timeout=600)
    marker = next((l for l in proc.stdout.splitlines() if l.startswith("@@RESULT@@")), None)
    if marker is None:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        report.failures.append(f"import check crashed: {tail}")
        return
    result = json.loads(marker[len("@@RESULT@@"):])
    report.imports, report.ops_found, report.ops_missing, report.gpu = (
        result["imports"], result["ops_found"], result["ops_missing"], result["gpu"])
    for name, outcome in report.imports.items():
        if outcome != "ok":
            report.failures.append(f"import {name} failed: {outcome}")
    if report.ops_missing:
        report.failures.append(f"ops missing from torch.ops.{spec.op_namespace}: {', '.join(report.ops_missing)}")
    if report.gpu and report.gpu.get("status") == "failed":
        report.failures.append(f"GPU check failed: {report.gpu.get('error')}")
    if report.gpu and report.gpu.get("status") == "ran" and not report.gpu.get("ok"):
        report.failures.append(f"GPU check out of tolerance: {report.gpu}")


def require_verified(wheel: Path, *, force: bool = False) -> dict[str, object]:
    """Refuse a wheel without a passing record for exactly these bytes."""
    record = wheel.with_name(wheel.name + RECORD_SUFFIX)
    problem = None
    if not record.is_file():
        problem = f"{wheel.name} has not been verified"
    else:
        data = json.loads(record.read_text())
        if data.get("sha256") != hashlib.sha256(wheel.read_bytes()).hexdigest():
            problem = f"{wheel.name} changed since it was verified"
        elif not data.get("passed"):
            problem = f"{wheel.name} failed verification: {'; '.join(data.get('failures', []))}"
        else:
            return dict(data)
    if force:
        log.warn(f"{problem}: going on because of --force")
        return {}
    raise VerifyError(problem, hint=f"run `build-kernel verify {wheel}` (or pass --force to override)")
