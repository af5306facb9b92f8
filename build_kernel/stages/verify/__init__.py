"""Verify: device code per library (cubins), FP4 SASS, a clean-process import (checks),
and the record beside the wheel that publish and serve require (report)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from build_kernel import log
from build_kernel.errors import VerifyError
from build_kernel.stages import Context, Done
from build_kernel.stages.verify import checks
from build_kernel.stages.verify.report import RECORD_SUFFIX, Report, own_archs, record_path


def wheel_provenance(wheel: Path) -> dict[str, Any] | None:
    """The provenance build-kernel put in the wheel, with the run's record beside it (`WHEEL.build.json`: the
    toolkit's folder, times) where there is one (None: a wheel of someone else's, or not a zip)."""
    from build_kernel.stages.builder import provenance

    return provenance.read(wheel)


def wheel_cuda_home(wheel: Path) -> str | None:
    """The toolkit root the wheel was built with, from its provenance (for the driver stub)."""
    home = (wheel_provenance(wheel) or {}).get("toolchain", {}).get("cuda_home")
    return str(home) if home else None


class VerifyStage:
    """Verify every wheel on the context with the build environment's interpreter."""

    name = "verify"

    def __init__(self, *, gpu_check: str = "", recheck: bool = False, raise_on_failure: bool = True,
                 static: bool = False, counts: bool = False) -> None:
        # raise_on_failure=False: the caller (`build-kernel verify`) shows the whole table first.
        self.gpu_check, self.recheck, self.raise_on_failure = gpu_check, recheck, raise_on_failure
        self.static, self.counts = static, counts  # counts: whole FP4 opcode counts, not the first instruction
        self.reports: list[Report] = []

    def skip(self, ctx: Context) -> str | None:
        return None if ctx.wheels or ctx.dry_run else "skipped: no wheel to verify"

    def title(self, ctx: Context) -> str:
        return f"verify {', '.join(w.name for w in ctx.wheels)}"

    def run(self, ctx: Context) -> Done:
        # Static checks import nothing: no build environment needed for them.
        python = (ctx.python or sys.executable) if self.static else ctx.build_python()
        reports = self.reports
        for wheel in ctx.wheels:
            cuda_home = ctx.build.cuda_home if ctx.build and ctx.build.wheel == wheel else wheel_cuda_home(wheel)
            cubins_counts = "sass-counts"  # each cubin's FP4 opcode counts, by content (cubins.fp4_scan)
            report = checks.verify(wheel, ctx.plan.recipe.verify, ctx.plan.archs, env=ctx.env, python=python,
                                   gpu_check=self.gpu_check, cuda_home=cuda_home, reuse=not self.recheck,
                                   static=self.static, want_cuda=ctx.plan.recipe.toolchain.cuda,
                                   counts_dir=ctx.plan.cache_dir / cubins_counts, counts=self.counts)
            record = record_path(wheel, report.asked)
            if report.from_record:
                log.info(f"{wheel.name}: verified before with the same checks (record {record.name}; "
                         "--recheck runs them again)")
            if record.name != wheel.name + RECORD_SUFFIX:
                log.warn(f"{wheel.name} is built for {', '.join(own_archs(wheel) or [])}; this verify asked for "
                         f"{', '.join(report.asked)}: its verdict is kept apart in {record.name}, not the wheel's")
            for warning in report.warnings:
                log.warn(warning)
            reports.append(report)
        ctx.report = reports[-1]
        failed = [r for r in reports if not r.passed]
        if failed and self.raise_on_failure:
            r = failed[0]
            where = next((record_path(w, r.asked).name for w in ctx.wheels if w.name == r.wheel), r.wheel + RECORD_SUFFIX)
            raise VerifyError(f"{r.wheel} failed verification: {'; '.join(r.failures)}",
                              hint=f"see {where} beside the wheel")
        return Done("failed" if failed else "passed", reports[-1].to_dict() if len(reports) == 1 else {"reports": [r.to_dict() for r in reports]})
