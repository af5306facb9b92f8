"""Patch: a versioned series applied all or nothing (apply), checked against any upstream
commit (check), and its health across upstream releases (health)."""

from __future__ import annotations

from build_kernel.errors import PatchError
from build_kernel.stages import Context, Done


class PatchStage:
    """Reports the series applied inside the fetch stage's tree.

    The series is applied while the tree is still a partial folder, so a tree in the cache
    is always whole: applying it later, as a step of its own, could leave it half-patched.
    """

    name = "patch"

    def skip(self, ctx: Context) -> str | None:
        return None

    def title(self, ctx: Context) -> str:
        return f"patch: series {ctx.plan.recipe.patches.series}/{ctx.plan.recipe.patches.version}"

    def run(self, ctx: Context) -> Done:
        if ctx.tree is None:
            raise PatchError("no source tree to patch", hint="run the fetch stage first")
        return Done("cached" if ctx.tree.cached else "done", {"patches": [s.to_dict() for s in ctx.tree.patches]})
