"""Verify a built wheel: device code per library against the recipe's rules (SASS, PTX),
FP4 SASS opcodes, then (unless static) a clean-process import, ops and a GPU check.

An op being registered proves nothing (upstream registers FP4 ops unconditionally); the
FP4 kernels are proven by their SASS opcodes in the cubins of the library SM120 loads.
Only libraries are unpacked for the static checks, each library is read by one
cuobjdump call, and libraries are looked at in parallel.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from build_kernel import cuda_driver, import_probe, toolchain
from build_kernel.archs import Arch
from build_kernel.errors import VerifyError
from build_kernel.recipe import Verify
from build_kernel.stages.verify import cubins, diagnose, links
from build_kernel.stages.verify.report import (
    LibraryReport,
    Report,
    checks_digest,
    file_stat,
    reusable,
    sha256_of,
    write_record,
)
from build_kernel.stages.verify.rules import cover, loading, required_missing, rule_for, wanted

# build_kernel's parent: on the probe's path after the wheel, for the GPU checks it ships.
_TOOL_ROOT = Path(__file__).resolve().parents[3]
LIBRARY = re.compile(r"\.so(\.\d+)*$")


def verify(wheel: Path, spec: Verify, archs: tuple[Arch, ...], *, env: Mapping[str, str],
           python: str = sys.executable, gpu_check: str = "", cuda_home: str | None = None,
           reuse: bool = False, static: bool = False, want_cuda: str = "", counts_dir: Path | None = None,
           counts: bool = False) -> Report:
    """Check one wheel; write `<wheel>.verify.json`; return the report.

    `env` is the base of the tools' and the probe's environments (the plan's).
    `reuse`: a passing record of these bytes under the same checks is returned as is.
    `static`: device code only, no import (a wheel for another torch or CUDA, a host without torch).
    `want_cuda`: the CUDA the recipe targets; libraries linking another major's CUDA libraries are a warning.
    `counts_dir`: where each cubin's FP4 opcode counts are kept by its content (cubins.fp4_scan).
    `counts`: whole FP4 opcode counts (every cubin of the asked FP4 archs disassembled to its end); otherwise each
    arch's scan stops at its first FP4 instruction, which decides the verdict all the same.
    """
    digest = checks_digest({"spec": spec, "archs": [a.sm for a in archs], "gpu_check": gpu_check or spec.gpu_check,
                            "python": python, "static": static, "want_cuda": want_cuda, "links": 1,
                            **({"counts": True} if counts else {})})  # a record of partial counts is not one of whole
    if reuse and (recorded := reusable(wheel, digest)) is not None:
        return recorded
    report = Report(wheel.name, sha256_of(wheel), [a.sm for a in archs], checks_digest=digest, stat=file_stat(wheel),
                    checks={"archs": True, "ptx": True, "fp4_sass": bool(spec.fp4_sass), "links": True,
                            "import": not static,
                            "ops": not static and bool(spec.ops), "gpu": not static and bool(gpu_check or spec.gpu_check)})
    tool = cubins.cuobjdump(env)
    with tempfile.TemporaryDirectory(prefix="bk-verify-") as tmp_str:
        tmp = Path(tmp_str)
        site = tmp / "site"
        libs, aliases = unpack(wheel, site, libraries_only=static)
        static_checks(report, site, libs, aliases, spec, archs, tool, env, tmp, counts_dir, complete=counts)
        _cuda_linked(report, libs, want_cuda)
        _no_own_libstdcxx(report, site, libs)
        _no_driver(report, wheel)
        stub_dir, report.driver = cuda_driver.for_load(libs, tmp / "driver", cuda_home, env=env)
        torch_only = _links(report, site, libs, python, env, stub_dir, static)
        if not static:
            _import_check(report, wheel, site, spec, archs, python, gpu_check, tmp, stub_dir, env)
            _other_torch(report, wheel, torch_only, python, env)
    write_record(wheel, report)
    return report


def unpack(wheel: Path, site: Path, *, libraries_only: bool) -> tuple[list[Path], dict[Path, list[str]]]:
    """Extract (in parallel: zlib lets threads run); the unique libraries and their byte-identical aliases."""
    with zipfile.ZipFile(wheel) as zf:
        members = [i for i in zf.infolist() if not i.is_dir()]
        wanted_members = [i for i in members if LIBRARY.search(i.filename)] if libraries_only else members
        firsts: dict[tuple[int, int], zipfile.ZipInfo] = {}
        aliases: dict[Path, list[str]] = {}
        for info in members:
            if LIBRARY.search(info.filename):
                first = firsts.setdefault((info.CRC, info.file_size), info)
                if first is not info:
                    aliases.setdefault(site / first.filename, []).append(info.filename)

    def extract(info: zipfile.ZipInfo) -> None:
        with zipfile.ZipFile(wheel) as own:  # one handle per thread
            own.extract(info, site)

    for info in wanted_members:  # folders first: zipfile's own makedirs races between threads
        (site / info.filename).parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(extract, sorted(wanted_members, key=lambda i: -i.file_size)))
    return sorted(site / i.filename for i in firsts.values()), aliases


def _library(so: Path, rel: str, found: cubins.Listing, spec: Verify, archs: tuple[Arch, ...], report: Report
             ) -> LibraryReport:
    rule = rule_for(rel, spec)
    must = wanted(rule, archs)
    lib = LibraryReport(rel, list(found.cubins), [], [], ptx=list(found.ptx), rule=rule.glob, applies=must is not None)
    if must is None:
        return lib
    for arch in must:
        got = cover(arch, found)
        if got.how == "missing":
            lib.missing.append(arch.sm)
        elif got.how == "jit":
            lib.jit.append(arch.sm)
            report.warnings.append(f"{rel}: {arch.sm} only as {got.detail}: the driver compiles it on first load "
                                   "(JIT: slow start, and no arch-specific instructions)")
    if lib.missing:
        has = ", ".join([*found.cubins, *(f"compute_{p[3:]} PTX" for p in found.ptx)]) or "no device code"
        report.failures.append(f"{rel}: no cubin or PTX for {', '.join(lib.missing)} (has {has})")
    lib.extra = sorted(set(found.cubins) - {a.sm for a in archs}) if "asked" in rule.archs else []
    if lib.extra:
        report.warnings.append(f"{rel}: code for {', '.join(lib.extra)} was not asked for (wasted build time)")
    return lib


def static_checks(report: Report, site: Path, libs: list[Path], aliases: dict[Path, list[str]], spec: Verify,
                   archs: tuple[Arch, ...], tool: str, env: Mapping[str, str], tmp: Path,
                   counts_dir: Path | None = None, *, complete: bool = False) -> None:
    workers = os.cpu_count() or 2
    with ThreadPoolExecutor(max_workers=workers) as pool:
        listings = list(pool.map(lambda so: cubins.listing(so, tool, env), libs))
    for so, found in zip(libs, listings, strict=True):
        if not found.cubins and not found.ptx:
            continue
        rel = str(so.relative_to(site))
        lib = _library(so, rel, found, spec, archs, report)
        lib.aliases = aliases.get(so, [])
        rule = rule_for(rel, spec)
        if lib.applies and rule.fp4 and spec.fp4_sass:  # FP4 of the asked archs whose GPUs load it
            _fp4(report, lib, so, spec, loading(rule, archs), tool, env, tmp, workers, counts_dir, complete)
        report.libraries.append(lib)
    if not report.libraries:
        report.failures.append("no CUDA extension in the wheel (no .so holds device code)")
    report.failures.extend(required_missing(spec, archs, {lib.rule for lib in report.libraries}))


def _no_driver(report: Report, wheel: Path) -> None:
    """A libcuda in the wheel (a build's link stub, a bundled driver) would shadow the GPU's own driver."""
    with zipfile.ZipFile(wheel) as zf:
        carried = [n for n in zf.namelist() if cuda_driver.is_driver(Path(n).name)]
    if carried:
        report.failures.append(f"the wheel carries {', '.join(carried)}: a CUDA driver library must come from the GPU's "
                               "driver, never the wheel (rebuild; a link stub belongs outside the install tree)")


def _no_own_libstdcxx(report: Report, site: Path, libs: list[Path]) -> None:
    """A library carrying libstdc++ mixes it with torch's at run time (diagnose.embedded_libstdcxx)."""
    own = {str(so.relative_to(site)): found for so in libs if (found := diagnose.embedded_libstdcxx(so))}
    if not own:
        return
    symbols = next(iter(own.values()))
    example = "_ZNSt6locale7classicEv" if "_ZNSt6locale7classicEv" in symbols else min(symbols, key=len)
    report.failures.append(
        f"{', '.join(own)} {'carries its' if len(own) == 1 else 'carry their'} own libstdc++ ({len(symbols)} exported "
        f"symbols such as {diagnose.demangle(example)}): beside torch's libstdc++.so.6 C++ streams crash in it (an "
        "error message with a number); rebuild linking libstdc++ shared: drop -static-libstdc++ from LDFLAGS, or "
        "install the compiler's libstdc++ (`g++ -print-file-name=libstdc++.so` must print a path)")


def _cuda_linked(report: Report, libs: list[Path], want_cuda: str) -> None:
    report.cuda_linked = diagnose.cuda_majors(libs)
    other = sorted(name for name, major in report.cuda_linked.items() if want_cuda and major != want_cuda.split(".")[0])
    if other:
        majors = sorted({report.cuda_linked[n] for n in other})
        report.warnings.append(f"built for CUDA {'/'.join(majors)} (links {', '.join(other)}); the recipe targets "
                               f"CUDA {want_cuda}: it will not load on a CUDA {want_cuda.split('.')[0]} stack")


def _fp4(report: Report, lib: LibraryReport, so: Path, spec: Verify, archs: tuple[Arch, ...], tool: str,
         env: Mapping[str, str], tmp: Path, workers: int, counts_dir: Path | None, complete: bool) -> None:
    fp4_archs = [a for a in archs if a.fp4_capable]
    lib.fp4_matches = {}
    scans = []
    for arch in (a for a in fp4_archs if a.sm in lib.archs):
        scan = cubins.fp4_scan(so, arch.sm, spec.fp4_sass, tool, cubins.tool_env(env), tmp / "cubins", workers,
                               counts_dir=counts_dir, complete=complete)
        lib.fp4_matches.update({f"{arch.sm}:{p}": n for p, n in scan.matches.items()})
        scans.append(scan.describe(arch.sm))
    lib.fp4_scanned = "; ".join(scans)
    if fp4_archs and not any(lib.fp4_matches.values()):
        where = f"its {', '.join(a.sm for a in fp4_archs)} SASS" if scans else \
            f"it: no {', '.join(a.sm for a in fp4_archs)} cubin to disassemble"
        report.failures.append(
            f"{lib.path}: no FP4 instructions ({' / '.join(spec.fp4_sass)}) in {where}: "
            f"{diagnose.fp4_absent(*_wheel_dist(report.wheel))}")


def _wheel_dist(wheel_name: str) -> tuple[str, str]:
    """A wheel file name's distribution and version (`sglang_kernel-0.4.3+cu130...-cp310-...whl`)."""
    name, version, *_ = [*wheel_name.split("-"), "", ""]
    return name, version


def _wheel_torch(wheel: Path) -> str | None:
    """The torch the wheel was built against: its provenance, else its `torch==` requirement."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        prov = next((n for n in names if n.endswith(".dist-info/build_kernel_provenance.json")), None)
        if prov:
            torch = json.loads(zf.read(prov)).get("toolchain", {}).get("torch")
            return str(torch) if torch else None
        meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        text = zf.read(meta).decode(errors="replace") if meta else ""
    m = re.search(r"^Requires-Dist: torch\s*\(?==\s*([\w.+]+)", text, re.M)
    return m.group(1) if m else None


def _links(report: Report, site: Path, libs: list[Path], python: str, env: Mapping[str, str], stub_dir: Path | None,
           static: bool) -> dict[str, list[str]]:
    """Every library's symbols bound as its import binds them (links.check), with torch's libraries and the driver
    (or its stub) where the loader finds them. Returns the libraries whose only unbound symbols are torch's (another
    torch's build): a static verify warns; otherwise the import check says it, or _other_torch does."""
    torch_only: dict[str, list[str]] = {}
    path = [*links.torch_libs(python, env), *([stub_dir] if stub_dir else [])]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = list(pool.map(lambda so: links.check(so, path, env), libs))
    for so, got in zip(libs, found, strict=True):
        if got.clean:
            continue
        rel = str(so.relative_to(site))
        report.links[rel] = got.to_dict()
        if got.versions:
            report.warnings.append(f"{rel} needs {', '.join(got.versions)}, newer than this host has: it will not "
                                   "load here (build on the oldest host that must run it)")
        elif got.not_found:
            report.warnings.append(f"{rel}: its symbols were not checked here: it needs {', '.join(got.not_found)}, "
                                   "which this host does not have")
        elif got.undefined:
            own = [s for s in got.undefined if not diagnose.torch_symbol(s)]
            if not own:
                torch_only[rel] = list(got.undefined)
                if static:  # a static verify may meet another torch than the wheel's
                    report.warnings.append(f"{rel}: {len(got.undefined)} torch symbol(s) this torch does not define, "
                                           f"e.g. {diagnose.demangle(min(got.undefined, key=len))}: built against "
                                           "another torch?")
                continue
            report.failures.append(
                f"{rel}: {len(got.undefined)} symbol(s) that no library it loads defines, e.g. "
                f"{diagnose.demangle(min(own, key=len))}: its import fails with 'undefined symbol' (the build left out "
                "the code that defines them while a caller stayed: rebuild with those sources; `nm -D "
                f"--undefined-only {Path(rel).name}` lists them)")
    return torch_only


def _other_torch(report: Report, wheel: Path, torch_only: dict[str, list[str]], python: str,
                 env: Mapping[str, str]) -> None:
    """A library built against another torch that no import of the check loaded: the import's own line for it."""
    said = " ".join(report.import_details.values())
    unsaid = {rel: symbols for rel, symbols in torch_only.items() if not any(s in said for s in symbols)}
    if not unsaid:
        return
    facts = toolchain.detect(python, env)
    stack = diagnose.Stack(facts.torch_version, facts.torch_cuda)
    for rel, symbols in unsaid.items():
        cause = diagnose.explain(f"undefined symbol: {min(symbols, key=len)}", stack, wheel_torch=_wheel_torch(wheel))
        report.failures.append(f"{rel} does not load: {cause}")


def _import_check(report: Report, wheel: Path, site: Path, spec: Verify, archs: tuple[Arch, ...], python: str,
                  gpu_check: str, tmp: Path, stub_dir: Path | None, env: Mapping[str, str]) -> None:
    probe = import_probe.run(
        python, spec.import_modules, path=[site, _TOOL_ROOT], base_env=env, cwd=tmp, error=VerifyError,
        what="the import check", namespace=spec.op_namespace, ops=spec.ops, gpu_check=gpu_check or spec.gpu_check,
        archs=[a.torch for a in archs], ld_library_path=[stub_dir] if stub_dir else [])
    if probe.crashed is not None:
        report.failures.append(f"import check crashed: {probe.crashed}")
        return
    report.imports = {name: probe.outcome(name) for name in probe.imports}
    report.ops_found, report.ops_missing, report.gpu = probe.ops_found, probe.ops_missing, probe.gpu
    failed = {name: res for name, res in probe.imports.items() if not res.get("ok")}
    if failed:
        facts = toolchain.detect(python, env)
        stack = diagnose.Stack(facts.torch_version, facts.torch_cuda)
        for name, res in failed.items():
            report.import_details[name] = str(res.get("detail") or res.get("error"))
            cause = diagnose.explain(report.import_details[name], stack, wheel_torch=_wheel_torch(wheel))
            report.failures.append(f"import {name} failed: {cause}")
    if report.ops_missing and not failed:  # after a failed import, missing ops say nothing more
        report.failures.append(f"ops missing from torch.ops.{spec.op_namespace}: {', '.join(report.ops_missing)}")
    if report.gpu and report.gpu.get("status") == "failed":
        report.failures.append(f"GPU check failed: {report.gpu.get('error')}")
    if report.gpu and report.gpu.get("status") == "ran" and not report.gpu.get("ok"):
        report.failures.append(f"GPU check out of tolerance: {report.gpu}")
