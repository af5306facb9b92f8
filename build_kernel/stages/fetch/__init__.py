"""Fetch: the pinned commit from a partial mirror (remote), checked out with the series
applied into a cached tree (workspace)."""

from __future__ import annotations

from build_kernel.stages import Context, Done
from build_kernel.stages.fetch import workspace


class FetchStage:
    """The pinned source with the series applied, all or nothing (the patch stage reports it)."""

    name = "fetch"

    def skip(self, ctx: Context) -> str | None:
        return None

    def title(self, ctx: Context) -> str:
        p = ctx.plan
        return f"fetch + patch {p.recipe.source.commit[:12]} ({len(p.series.patches)} patches)"

    def run(self, ctx: Context) -> Done:
        tree = workspace.prepare(ctx.plan, offline=ctx.offline)
        ctx.tree = tree
        return Done("cached" if tree.cached else "done", {"tree": str(tree.root), "commit": tree.commit})
