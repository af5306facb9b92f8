"""The whole recipe, stage after stage: fetch, patch, build, verify, publish, serve.

The loop is `stages.run`; this module only builds the context, the dry-run answer and the
summary table. Before the first stage, readiness.require lists every problem a build would meet
(the checks `doctor --recipe` prints), each with its fix, and stops before anything is fetched.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from build_kernel import readiness, stages
from build_kernel.plan import Plan


def run(plan: Plan, *, offline: bool = False, force: bool = False, dry_run: bool = False, gpu_check: str = "",
        recheck: bool = False) -> dict[str, Any]:
    """Run every stage (or, with `dry_run`, say what would run); the summary `--json` prints."""
    ctx = stages.Context(plan, offline=offline, force=force, dry_run=dry_run)
    pipeline = stages.pipeline(gpu_check=gpu_check, recheck=recheck)
    if dry_run:
        for stage in pipeline:
            why = stage.skip(ctx)
            ctx.outcomes[stage.name] = {"status": why or "planned", "seconds": 0.0}
        return {"recipe": plan.recipe.name, "dry_run": True, "plan": plan.to_dict(), "stages": ctx.outcomes}
    readiness.require(plan, offline=offline)
    stages.run(ctx, pipeline)
    assert ctx.build is not None
    return {"recipe": plan.recipe.name, "wheel": str(ctx.build.wheel), "version": ctx.build.version,
            "stages": ctx.outcomes}


def render(summary: dict[str, Any]) -> Table:
    table = Table("stage", "status", "seconds", title=f"{summary['recipe']}: {summary.get('wheel', '(dry run)')}")
    for stage, info in summary["stages"].items():
        # A status quotes recipe tables ("no [serve] model"): the console reads no markup (log.py).
        table.add_row(stage, info["status"], f"{info['seconds']:.1f}")
    return table
