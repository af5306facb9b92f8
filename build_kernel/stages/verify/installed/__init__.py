"""`doctor --installed`: what is wrong with the kernel package an interpreter would import, read
from its files (nothing imported), with verify's own parts: the inventory of the serve check,
cuobjdump listings and the per-library rules, the FP4 SASS scan, the CUDA sonames, the API check."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import gpus, recipe
from build_kernel.archs import Arch
from build_kernel.errors import VerifyError
from build_kernel.recipe import Verify
from build_kernel.stages.serve import api, environment
from build_kernel.stages.serve.preflight import same_torch
from build_kernel.stages.verify import checks, cubins, diagnose
from build_kernel.stages.verify.installed import fp4, origin, sglang_layout, stale, torch_abi, verdict
from build_kernel.stages.verify.installed.verdict import Problem
from build_kernel.stages.verify.report import LibraryReport, Report
from build_kernel.stages.verify.rules import rule_for


@dataclass
class Diagnosis:
    python: str
    module: str
    archs: list[str]
    archs_from: str
    torch: torch_abi.TorchHere
    origin: origin.Origin | None = None
    cuda_linked: dict[str, str] = field(default_factory=dict)
    built_for: torch_abi.BuiltFor = field(default_factory=torch_abi.BuiltFor)
    libraries: list[LibraryReport] = field(default_factory=list)
    fp4: list[fp4.Fp4] = field(default_factory=list)
    sglang: str | None = None
    sglang_kernels: str = ""  # where that sglang keeps its kernels (sglang_layout: jit_kernel/ or 0.5.23's kernels/)
    api_missing: dict[str, list[str]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recipe: str = ""
    recipe_why: str = ""
    fix: str = ""
    # Other kernel packages here whose torch is not this one (the torch ABI guard).
    stale: list[stale.Stale] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems and not self.stale

    @property
    def label(self) -> str:
        return self.origin.label if self.origin else self.module

    def summary(self) -> str:
        """What holds, for the healthy line."""
        majors = sorted(set(self.cuda_linked.values()))
        parts = [f"CUDA {'/'.join(majors)} libraries" if majors else "no versioned CUDA library linked",
                 f"on torch {self.torch.version}"]
        if self.archs:
            parts.append(f"{', '.join(self.archs)} covered")
        how = {"aot": "ahead of time", "jit": f"by JIT (sglang {self.sglang})",
               "jit-without-sglang": "not ahead of time (left to sglang's JIT; no such sglang here)"}
        parts += [f"FP4 for {f.arch} {how.get(f.how, f.how)}" for f in self.fp4]
        return "; ".join(parts)

    def verdict(self) -> str:
        if not self.problems and self.stale:
            first = self.stale[0]
            more = f" (and {len(self.stale) - 1} more)" if len(self.stale) > 1 else ""
            return f"{first.text}: {first.command}{more}"
        line = verdict.line(self.label, self.problems, self.fix, self.summary())
        return line + (f"; also stale: {', '.join(s.distribution for s in self.stale)}" if self.stale else "")

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k not in ("origin", "stale")}
        data["origin"] = self.origin.to_dict() if self.origin else None
        data["stale"] = [s.to_dict() for s in self.stale]
        return {**data, "healthy": self.healthy, "verdict": self.verdict()}


def _targets(archs: tuple[Arch, ...] | None) -> tuple[tuple[Arch, ...], str]:
    if archs:
        return archs, "--arch"
    here = gpus.present()
    if here is None:
        return (), "none: no GPU driver here and no --arch (pass --arch 12.0a to check device code for one)"
    return here, "the GPUs here (from the driver)" if here else "none: the driver reports no GPU"


def _pick(installed: environment.Installed, module: str, d: Diagnosis) -> tuple[str, dict[str, Any]] | None:
    """The distribution whose copy `import module` finds; a second one shipping it is a problem."""
    dists = installed.dists
    if not dists:
        return None
    origin_path = Path(installed.module_origin).resolve() if installed.module_origin else None
    chosen = next((n for n, dist in dists.items() if origin_path and origin_path.is_relative_to(
        (Path(dist["root"]) / module).resolve())), next(iter(dists)))
    for other in (n for n in dists if n != chosen):
        d.problems.append(Problem("installed", f"shares {module} with {other} {dists[other]['version']} (both install "
                                               "it; files of one overwrite the other's)",
                                  f"pip uninstall {other} {chosen}, then install one of them"))
    return chosen, dists[chosen]


def _torch_problems(d: Diagnosis, libs: list[Path]) -> None:
    o, here = d.origin, d.torch
    assert o is not None
    b = d.built_for
    b.pin = torch_abi.pinned(o.requires)
    b.provenance = o.provenance.get("toolchain", {}).get("torch")
    b.lacking, b.looked_up = torch_abi.lacking(libs, here.root)
    majors = sorted(set(d.cuda_linked.values()))
    if not here.version:
        d.problems.append(Problem("torch", f"is installed but {here.describe()} in {d.python}",
                                  f"install the torch it was built for ({b.pin or b.provenance or 'see its docs'})"))
        return
    if majors and not here.cuda:
        d.problems.append(Problem("cuda", f"is a CUDA {'/'.join(majors)} build; {here.describe()}",
                                  f"install a CUDA {majors[-1]} torch"))
    elif here.cuda and any(m != here.cuda.split(".")[0] for m in majors):
        other = sorted(n for n, m in d.cuda_linked.items() if m != here.cuda.split(".")[0])
        d.problems.append(Problem("cuda", f"is a CUDA {'/'.join(majors)} build (links {', '.join(other)}); "
                                          f"{here.describe()}"))
    for what, want in (("requires", b.pin), ("was built against", b.provenance)):
        if want and not same_torch(want, here.version):
            d.problems.append(Problem("torch", f"{what} torch{'==' if what == 'requires' else ' '}{want}; "
                                               f"{here.describe()}"))
    if b.lacking:
        d.problems.append(Problem("torch", f"was built against another torch: {len(b.lacking)} of the {b.looked_up} "
                                           f"torch symbols it imports are not in torch {here.version} (e.g. "
                                           f"{diagnose.demangle(b.lacking[0])})"))


def _device_code(d: Diagnosis, root: Path, libs: list[Path], spec: Verify, archs: tuple[Arch, ...],
                 kernel_names: set[str], sglang_root: str | None, env: Mapping[str, str],
                 counts_dir: Path | None) -> None:
    report = Report("installed", "", [a.sm for a in archs])
    with tempfile.TemporaryDirectory(prefix="bk-doctor-") as tmp:
        checks.static_checks(report, root, libs, {}, spec, archs, cubins.cuobjdump(env), env, Path(tmp), counts_dir)
    d.libraries = report.libraries
    for lib in (lib for lib in d.libraries if lib.missing):
        has = ", ".join([*lib.archs, *(f"compute_{p[3:]} PTX" for p in lib.ptx)]) or "no device code"
        d.problems.append(Problem("arch", f"has no {', '.join(lib.missing)} code in {lib.path} (has {has})"))
    # The rest of verify's failures that name no library (a required library absent); FP4 is judged below.
    for failure in (f for f in report.failures if f.startswith("no ") and "FP4 instructions" not in f):
        d.problems.append(Problem("arch", f"has {failure}"))
    names = fp4.api(spec.ops)
    jit = fp4.jit_in_sglang(sglang_root, names)
    fp4_lib = next((lib for lib in d.libraries if rule_for(lib.path, spec).fp4 and lib.applies), None)
    for arch in (a for a in archs if a.fp4_capable):
        if fp4_lib is None or arch.sm in fp4_lib.missing:
            continue  # no code for the arch at all: said above
        found = fp4.classify(arch.sm, fp4_lib.fp4_matches, fp4_lib.path, kernel_names, names, jit, d.sglang)
        d.fp4.append(found)
        if not found.ok:
            d.problems.append(Problem("fp4", f"has no FP4 kernels for {arch.sm}: {found.detail}"))
        elif found.how == "jit-without-sglang":
            d.notes.append(f"FP4 for {arch.sm}: {found.detail}")


def _api(d: Diagnosis, installed: environment.Installed, kernel_names: set[str], module: str) -> None:
    if not installed.sglang_root:
        return
    d.api_missing = {n: f for n, f in api.imported_by(Path(installed.sglang_root), module).items()
                     if n not in kernel_names}
    if d.api_missing:
        names = sorted(d.api_missing)
        pin = verdict.kernel_pin(installed.sglang_requires)
        fix = None
        if pin and d.origin and pin != d.origin.version.split("+")[0]:
            fix = f"install the kernel sglang {installed.sglang} pins ({pin}), or build it: " + "{fix}"
        d.problems.append(Problem("api", f"lacks {len(names)} name{'s' if len(names) > 1 else ''} sglang "
                                         f"{installed.sglang} imports from it ({', '.join(names[:4])}"
                                         f"{', ...' if len(names) > 4 else ''}): the server would die at start", fix))


def examine(python: str, *, archs: tuple[Arch, ...] | None, env: Mapping[str, str], recipe_name: str | None = None,
            module: str | None = None, counts_dir: Path | None = None) -> Diagnosis:
    """Everything `doctor --installed` reports about `module` in `python` (default: the package the recipe
    verifies, `[verify] import_modules`), and every other kernel package there whose torch is not this one;
    `counts_dir`: where each cubin's FP4 opcode counts are kept by content (a second doctor of the same library
    disassembles nothing)."""
    spec = recipe.load(recipe_name or verdict.DEFAULT_RECIPE).verify
    if module is None:
        if not spec.import_modules:
            raise VerifyError(f"recipe {recipe_name or verdict.DEFAULT_RECIPE} names no [verify] import_modules",
                              hint="give a recipe that verifies the package to examine")
        module = spec.import_modules[0].split(".")[0]
    installed = environment.inspect(python, module, env, error=VerifyError, what="Python interpreter",
                                    missing_hint="pass --python PATH of an existing interpreter")
    targets, targets_from = _targets(archs)
    d = Diagnosis(installed.python, module, [a.torch for a in targets], targets_from,
                  torch_abi.torch_here(installed.torch_root), sglang=installed.sglang)
    if installed.sglang_root:
        d.sglang_kernels = sglang_layout.of(installed.sglang_root).describe(
            verdict.kernel_pin(installed.sglang_requires))
    picked = _pick(installed, module, d)
    if picked is not None:
        name, dist = picked
        d.origin = o = origin.of(name, dist, module)
        if o.changed or o.missing:
            bad = o.changed or o.missing
            d.problems.insert(0, Problem("record", f"has {len(o.changed)} file(s) that differ from its RECORD and "
                                                   f"{len(o.missing)} missing (e.g. {bad[0]})", o.reinstall()))
        root = Path(dist["root"])
        # The package's libraries, and extension modules it installs beside it (a top-level `<ext>.so`).
        libs = sorted({*(p for p in (root / module).rglob("*") if p.is_file() and checks.LIBRARY.search(p.name)),
                       *(root / rel for rel in dist["files"] if "/" not in rel and checks.LIBRARY.search(rel))})
        d.cuda_linked = diagnose.cuda_majors(libs)
        _torch_problems(d, libs)
        kernel_names = api.defined_installed(root, module) or set()
        _device_code(d, root, libs, spec, targets, kernel_names, installed.sglang_root, env, counts_dir)
        _api(d, installed, kernel_names, module)
    else:
        d.problems.append(Problem("installed", f"is not installed in {installed.python}"))
    d.recipe, d.recipe_why = verdict.choose_recipe(
        given=recipe_name, built_by=d.origin.provenance.get("recipe") if d.origin else None,
        version=d.origin.version if d.origin else None, sglang_pin=verdict.kernel_pin(installed.sglang_requires),
        available=recipe.list_recipes(), module=module)
    d.fix = verdict.command(d.recipe, targets)
    d.problems = [Problem(p.kind, p.text, p.fix.replace("{fix}", d.fix) if p.fix else None) for p in d.problems]
    d.stale = stale.scan(installed.python, env, d.torch.version, skip=d.origin.distribution if d.origin else "")
    if d.problems:
        d.notes += verdict.recipe_notes(d.recipe, d.torch)
    return d
