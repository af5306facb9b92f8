"""The publish stage: the context's wheels to the recipe's (or the command line's) target."""

from __future__ import annotations

from build_kernel.stages import Context, Done


class PublishStage:
    name = "publish"

    def __init__(self, *, to: str | None = None, install_url: str | None = None, skip_existing: bool = False,
                 force: bool = False, in_pipeline: bool = True, find_links: tuple[str, ...] = ()) -> None:
        # In the pipeline, publishing happens only when the recipe names a target.
        self.to, self.install_url, self.skip_existing, self.force = to, install_url, skip_existing, force
        self.find_links = find_links
        self.in_pipeline = in_pipeline
        self.target_label = ""

    def skip(self, ctx: Context) -> str | None:
        if self.in_pipeline and not self.to and not ctx.plan.recipe.publish.target:
            return "skipped: the recipe has no [publish] target"
        return None if ctx.wheels or ctx.dry_run else "skipped: no wheel to publish"

    def title(self, ctx: Context) -> str:
        return f"publish {len(ctx.wheels)} wheel(s)"

    def run(self, ctx: Context) -> Done:
        from build_kernel.plan import recipe_arg
        from build_kernel.stages import publish

        p = ctx.plan
        _upstream_tests_gate(ctx, force=self.force)
        target = publish.resolve_target(self.to, p.recipe.publish, env=ctx.env, install_url=self.install_url)
        self.target_label = target.label
        # ctx.build_python is passed uncalled: publish checks the wheels, their verify records and the
        # target first, and only then builds the recipe's torch environment (minutes) if it is missing.
        result = publish.publish(list(ctx.wheels), target, skip_existing=self.skip_existing, force=self.force,
                                 import_modules=p.recipe.verify.import_modules, python=ctx.build_python,
                                 env=ctx.env, log_path=p.cache_dir / "logs" / f"publish-{p.recipe.name}.log",
                                 recipe=recipe_arg(p.recipe), find_links=self.find_links)
        self.result = result
        return Done("done", result.to_dict())


def _upstream_tests_gate(ctx: Context, *, force: bool) -> None:
    """A wheel whose package's own tests went red is not published (unless forced); one never tested is said."""
    from build_kernel import log
    from build_kernel.errors import PublishError
    from build_kernel.stages.upstream_tests import read_record

    if not ctx.plan.recipe.test.paths:
        return
    for wheel in ctx.wheels:
        record = read_record(wheel)
        if record is None:
            log.warn(f"{wheel.name}: the package's own tests have not run against it "
                     f"(build-kernel test --recipe {ctx.plan.recipe.name} {wheel})")
        elif not record.get("passed"):
            red = ", ".join(record.get("summary", {}).get("red", [])[:5])
            if not force:
                raise PublishError(f"{wheel.name}: the package's own tests went red ({red})",
                                   hint=f"see {wheel}.tests.json; fix the build, or list a known failure under "
                                        "[test.expect] with its evidence; --force publishes it anyway")
            log.warn(f"{wheel.name}: publishing although its own tests went red ({red}): --force")
