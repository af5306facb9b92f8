"""The whole recipe, stage after stage: fetch + patch, build, verify, publish, serve."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from build_kernel import log
from build_kernel.errors import VerifyError
from build_kernel.plan import Plan
from build_kernel.stages.build import buildenv
from build_kernel.stages.build import wheel as build
from build_kernel.stages.fetch import workspace
from build_kernel.stages.publish import upload as publish
from build_kernel.stages.verify import checks as verify

STAGES = ("fetch", "patch", "build", "verify", "publish", "serve")


@dataclass
class Options:
    offline: bool = False
    force: bool = False
    dry_run: bool = False
    gpu_check: str = ""
    stages: tuple[str, ...] = STAGES
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass
class Outcome:
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, stage: str, status: str, seconds: float, **info: Any) -> None:
        self.stages[stage] = {"status": status, "seconds": round(seconds, 1), **info}


def fetch_stage(plan: Plan, *, offline: bool = False) -> workspace.Tree:
    """The pinned source with the series applied (fetch + patch)."""
    with log.step(f"fetch + patch {plan.recipe.source.commit[:12]} ({len(plan.series.patches)} patches)"):
        return workspace.prepare(plan, offline=offline)


def build_stage(plan: Plan, tree: workspace.Tree, *, force: bool = False, offline: bool = False
                ) -> tuple[str, build.BuildResult]:
    """(build python, wheel): the build environment, then the wheel (or its cache hit)."""
    python = buildenv.python_for(plan)
    with log.step(f"build {plan.arch_list} with {plan.jobs.jobs} job(s)"):
        log.info(plan.jobs.derivation)
        return python, build.build(plan, tree, python, force=force, offline=offline)


def run(plan: Plan, opts: Options | None = None) -> dict[str, Any]:
    opts = opts or Options()
    outcome = Outcome()
    if opts.dry_run:
        for stage in opts.stages:
            outcome.record(stage, "not in this version of build-kernel" if stage == "serve" else "planned", 0.0)
        return {"recipe": plan.recipe.name, "dry_run": True, "plan": plan.to_dict(), "stages": outcome.stages}
    t = time.monotonic()
    tree = fetch_stage(plan, offline=opts.offline)
    outcome.record("fetch", "cached" if tree.cached else "done", time.monotonic() - t, tree=str(tree.root), commit=tree.commit)
    outcome.record("patch", "cached" if tree.cached else "done", 0.0, patches=[s.to_dict() for s in tree.patches])
    t = time.monotonic()
    python, result = build_stage(plan, tree, force=opts.force, offline=opts.offline)
    outcome.record("build", "cached" if result.cached else "done", time.monotonic() - t, **result.to_dict())
    t = time.monotonic()
    with log.step(f"verify {result.wheel.name}"):
        report = verify.verify(result.wheel, plan.recipe.verify, plan.archs, python=python,
                               gpu_check=opts.gpu_check, cuda_home=result.cuda_home)
    outcome.record("verify", "passed" if report.passed else "failed", time.monotonic() - t, **report.to_dict())
    for warning in report.warnings:
        log.warn(warning)
    if not report.passed:
        raise VerifyError(f"{result.wheel.name} failed verification: {'; '.join(report.failures)}",
                          hint=f"see {result.wheel}{verify.RECORD_SUFFIX}")
    if "publish" in opts.stages and plan.recipe.publish.target:
        t = time.monotonic()
        target = publish.resolve_target(None, plan.recipe.publish, env=opts.env, recipe_root=plan.recipe.root)
        with log.step(f"publish to {target.label}"):
            published = publish.publish([result.wheel], target, import_modules=plan.recipe.verify.import_modules,
                                        python=python, env=opts.env,
                                        log_path=plan.cache_dir / "logs" / f"publish-{plan.recipe.name}.log")
        outcome.record("publish", "done", time.monotonic() - t, **published.to_dict())
    else:
        outcome.record("publish", "skipped: the recipe has no [publish] target", 0.0)
    # Serving (sglang flags, systemd unit, health check) is not part of this version.
    outcome.record("serve", "not in this version of build-kernel", 0.0)
    return {"recipe": plan.recipe.name, "wheel": str(result.wheel), "version": result.version, "stages": outcome.stages}


def render(summary: dict[str, Any]) -> Table:
    table = Table("stage", "status", "seconds", title=f"{summary['recipe']}: {summary.get('wheel', '(dry run)')}")
    for stage, info in summary["stages"].items():
        table.add_row(stage, info["status"], f"{info['seconds']:.1f}")
    return table
