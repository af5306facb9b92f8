"""Verify a built wheel: cubin archs and FP4 SASS (static), import and ops (clean process),
and a real kernel run against a reference when a GPU of a built arch is present.

An op being registered proves nothing (upstream registers FP4 ops unconditionally); the
FP4 kernels are proven by their SASS opcodes in the cubins of the library SM120 loads.
"""

from __future__ import annotations

import fnmatch
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from build_kernel import import_probe
from build_kernel.archs import Arch
from build_kernel.errors import VerifyError
from build_kernel.recipe import Verify
from build_kernel.stages.verify import cubins, driver_stub
from build_kernel.stages.verify.report import LibraryReport, Report, checks_digest, reusable, sha256_of, write_record

# build_kernel's parent: on the probe's path after the wheel, for the GPU checks it ships.
_TOOL_ROOT = Path(__file__).resolve().parents[3]


def verify(wheel: Path, spec: Verify, archs: tuple[Arch, ...], *, env: Mapping[str, str],
           python: str = sys.executable, gpu_check: str = "", cuda_home: str | None = None,
           reuse: bool = False) -> Report:
    """Check one wheel; write `<wheel>.verify.json`; return the report.

    `env` is the base of the tools' and the probe's environments (the plan's).
    `reuse`: a passing record of these bytes under the same checks is returned as is.
    """
    sha256 = sha256_of(wheel)
    digest = checks_digest({"spec": spec, "archs": [a.sm for a in archs], "gpu_check": gpu_check or spec.gpu_check,
                            "python": python})
    if reuse and (recorded := reusable(wheel, sha256, digest)) is not None:
        return recorded
    report = Report(wheel.name, sha256, [a.sm for a in archs], checks_digest=digest)
    tool = cubins.cuobjdump(env)
    with tempfile.TemporaryDirectory(prefix="bk-verify-") as tmp_str:
        tmp = Path(tmp_str)
        site = tmp / "site"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        libs = sorted(p for p in site.rglob("*.so*") if p.is_file())
        _static_checks(report, site, libs, spec, archs, tool, env)
        _import_check(report, site, spec, archs, python, gpu_check, tmp, cuda_home, libs, env)
    write_record(wheel, report)
    return report


def _static_checks(report: Report, site: Path, libs: list[Path], spec: Verify, archs: tuple[Arch, ...], tool: str,
                   env: Mapping[str, str]) -> None:
    asked = set(report.asked)
    for so in libs:
        rel = str(so.relative_to(site))
        found = cubins.archs(so, tool, env)
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
                for pattern, count in cubins.sass_matches(so, sm, spec.fp4_sass, tool, env).items():
                    lib.fp4_matches[f"{sm}:{pattern}"] = count
        report.libraries.append(lib)
    if not report.libraries:
        report.failures.append("no CUDA extension in the wheel (no .so holds device code)")
    fp4_archs = [a for a in archs if a.fp4_capable]
    if not (spec.fp4_library and spec.fp4_sass and fp4_archs):
        return
    hits = [(l, l.fp4_matches) for l in report.libraries if l.fp4_matches is not None]
    if not hits:
        report.failures.append(f"no library matching {spec.fp4_library} holds {fp4_archs[0].sm} code: "
                               "the FP4 kernels are missing")
    for lib, matches in hits:
        if not any(matches.values()):
            report.failures.append(
                f"{lib.path}: no FP4 instructions ({' / '.join(spec.fp4_sass)}) in its "
                f"{', '.join(a.sm for a in fp4_archs)} SASS: the FP4 kernels were not compiled "
                "(ENABLE_NVFP4 off? upstream skips it when CUDA_VERSION is empty)")


def _import_check(report: Report, site: Path, spec: Verify, archs: tuple[Arch, ...], python: str, gpu_check: str,
                  tmp: Path, cuda_home: str | None, libs: list[Path], env: Mapping[str, str]) -> None:
    stub_dir, report.driver = driver_stub.provide(libs, tmp / "driver", cuda_home, env=env)
    probe = import_probe.run(
        python, spec.import_modules, path=[site, _TOOL_ROOT], base_env=env, cwd=tmp, error=VerifyError,
        what="the import check", namespace=spec.op_namespace, ops=spec.ops, gpu_check=gpu_check or spec.gpu_check,
        archs=[a.torch for a in archs], ld_library_path=[stub_dir] if stub_dir else [])
    if probe.crashed is not None:
        report.failures.append(f"import check crashed: {probe.crashed}")
        return
    report.imports = {name: probe.outcome(name) for name in probe.imports}
    report.ops_found, report.ops_missing, report.gpu = probe.ops_found, probe.ops_missing, probe.gpu
    for name, outcome in report.imports.items():
        if outcome != "ok":
            report.failures.append(f"import {name} failed: {outcome}")
    if report.ops_missing:
        report.failures.append(f"ops missing from torch.ops.{spec.op_namespace}: {', '.join(report.ops_missing)}")
    if report.gpu and report.gpu.get("status") == "failed":
        report.failures.append(f"GPU check failed: {report.gpu.get('error')}")
    if report.gpu and report.gpu.get("status") == "ran" and not report.gpu.get("ok"):
        report.failures.append(f"GPU check out of tolerance: {report.gpu}")
