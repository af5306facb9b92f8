"""`build-kernel test`: the package's own tests from the pinned commit, against the built wheel."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from build_kernel import stages
from build_kernel.cli.options import WHEEL, Options, emit, newest_wheel, offline_option, shared_options


def _table(record: dict[str, Any]) -> Table | str:
    if record.get("dry_run"):
        return (f"would run {len(record['files'])} test file(s) of {record['commit'][:12]} against "
                f"{Path(record['wheel']).name}, {record['parallel']} at once, {record['timeout_s']:.0f} s each, in "
                f"{record['environment']}:\n  " + "\n  ".join(record["files"]))
    s = record["summary"]
    table = Table(title=f"{Path(record['wheel']).name}: {s['files']} files, {s['passed_tests']} passed, "
                        f"{s['failed_tests']} failed, {s['skipped_tests']} skipped; "
                        f"{'passed' if record['passed'] else 'RED: ' + ', '.join(s['red'])}")
    for col in ("file", "status", "verdict", "s"):
        table.add_column(col)
    for result, v in zip(record["results"], record["verdicts"], strict=True):
        # Text, not markup: a node id or a reason may hold brackets.
        table.add_row(Text(result["file"]), Text(result["status"]), Text(("✕ " if v["red"] else "✓ ") + v["line"]),
                      f"{result['seconds']:.0f}")
    return table


@click.command("test")
@click.argument("wheel", required=False, type=WHEEL)
@shared_options
@offline_option
@click.option("--file", "only", multiple=True, metavar="GLOB", help="Only the test files matching (repeatable).")
@click.option("--parallel", type=click.IntRange(min=1), help="Test files at once (default: [test] parallel).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), help="Seconds a file may run ([test] timeout_s).")
@click.option("--wheelhouse", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR",
              help="Install the tests' requirements from this folder of wheels only (an offline host).")
@click.option("--dry-run", is_flag=True, help="List the files and the environment; install and run nothing.")
@click.pass_obj
def test_cmd(opts: Options, wheel: Path | None, only: tuple[str, ...], parallel: int | None,
             timeout_s: float | None, wheelhouse: Path | None, dry_run: bool) -> None:
    """Run the package's own tests (recipe [test]) from the pinned commit against a wheel: per file passed /
    failed / skipped / uncollectable / crashed / timeout, judged against [test.expect] (exit 11 when red)."""
    from build_kernel.stages.fetch import FetchStage
    from build_kernel.stages.patch import PatchStage
    from build_kernel.stages.upstream_tests import TestStage

    p = opts.plan()
    stage = TestStage(only=only, parallel=parallel, timeout_s=timeout_s,
                      folder=wheelhouse.resolve() if wheelhouse else None, raise_on_failure=False)
    # A dry run reads the file list from the cached tree, offline: it downloads nothing.
    ctx = stages.Context(p, offline=opts.offline or dry_run, wheels=[wheel or newest_wheel(p)])
    stages.run(ctx, [FetchStage(), PatchStage()])
    ctx.dry_run = dry_run
    stage.run(ctx)
    emit(opts, stage.record, _table(stage.record))
    if not dry_run and not stage.record["passed"]:
        sys.exit(11)


COMMANDS = (test_cmd,)
