"""Thin click CLI: each command runs its stage (the same objects the pipeline runs) and
prints the result.

The shared options (--recipe, --arch, --jobs, --cache-dir, --output-dir, --json, --debug)
are accepted before or after every command and subcommand; given in both places, the later wins.
The root group's `main` (cli.output.GuardedGroup) is the only exit: an error is one line (or one
line per recipe problem) on stderr, or one JSON object on stdout with `--json`, and the error
kind's exit code; `--debug` shows the traceback as well.
"""

from __future__ import annotations

import click

from build_kernel import __version__
from build_kernel.cli.options import Options, _store, emit, shared_options
from build_kernel.cli.output import GuardedGroup

__all__ = ["cli", "main"]


@click.group(cls=GuardedGroup, invoke_without_command=True)
@shared_options
@click.option("--offline", is_flag=True, callback=_store, expose_value=False,
              help="Use only cached sources; never touch the network (the pipeline and every command after it).")
@click.option("--force", is_flag=True, help="Pipeline: rebuild even when the wheel cache has this build.")
@click.option("--dry-run", is_flag=True, help="Pipeline: print the resolved plan and stages, run nothing.")
@click.option("--gpu-check", default="", metavar="MODULE:FUNC", help="Pipeline: GPU check to run in verify.")
@click.option("--recheck", is_flag=True, help="Pipeline: run verify's checks even when the wheel's record matches.")
@click.option("--explain", is_flag=True, help="Pipeline with --dry-run: the plan with where each value came from (as "
                                              "`plan --explain`).")
@click.version_option(__version__)
@click.pass_context
def cli(ctx: click.Context, force: bool, dry_run: bool, gpu_check: str, recheck: bool, explain: bool) -> None:
    """Build GPU kernel libraries from pinned, patched source.

    `build-kernel --recipe NAME` runs the whole pipeline; each stage is also a command.
    """
    opts = ctx.ensure_object(Options)
    if ctx.invoked_subcommand is None:
        if not opts.recipe:
            if dry_run or force or recheck or gpu_check or explain:
                # A pipeline flag alone is a mistake, not a request for help (which would exit 0).
                raise click.UsageError("no recipe given: pass --recipe NAME (see `build-kernel recipes list`)")
            click.echo(ctx.get_help())
            return
        from build_kernel import pipeline

        p = opts.plan()
        result = pipeline.run(p, offline=opts.offline, force=force, dry_run=dry_run, gpu_check=gpu_check,
                              recheck=recheck)
        if dry_run:
            from build_kernel.cli.planview import describe_plan

            # What --help promises: the resolved plan (as `plan` prints it), then the stages.
            text = describe_plan(p, explain=explain, offline=opts.offline)[1]
            if not opts.json:
                click.echo(text + "\n")  # plain lines, never wrapped; the stages' table below it
            emit(opts, result, pipeline.render(result))
            return
        emit(opts, result, pipeline.render(result))


def _register() -> None:
    from build_kernel.cli import info, lock, nightly, nightly_history, patch, proof, serve, stages, upstream_tests

    for module in (info, lock, stages, upstream_tests, proof, serve, nightly, nightly_history):
        for command in module.COMMANDS:
            cli.add_command(command)
    cli.add_command(patch.patch_group)
    from build_kernel.cli import cache

    cli.add_command(cache.cache_group)


_register()


def main(argv: list[str] | None = None) -> None:
    cli.main(argv, prog_name="build-kernel")
