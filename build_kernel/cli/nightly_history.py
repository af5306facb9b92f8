"""The nights' history: `nightly-page` (the static history page from a state folder) and `nightly-replay`
(the nights of a past upstream range, run without a clock). `build-kernel nightly` itself is cli/nightly.py."""

from __future__ import annotations

from pathlib import Path

import click

from build_kernel.cli.options import Options, emit, offline_option, shared_options

_STATE = click.option("--state-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
                      help="The nightly's state folder (its nights/ records).")


@click.command("nightly-page")
@shared_options
@_STATE
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The folder the static index is in: the page goes to OUT/history/<recipe>/.")
@click.pass_obj
def nightly_page_cmd(opts: Options, state_dir: Path, out: Path) -> None:
    """Write each recipe's history page (HTML + history.json, plots inline, links relative) under OUT/history/."""
    from build_kernel.nightly import history_page

    pages = history_page.write(state_dir, out)
    emit(opts, {"pages": [str(p) for p in pages]}, "\n".join(str(p) for p in pages))


@click.command("nightly-replay")
@shared_options
@_STATE
@click.argument("span", metavar="A..B")
@offline_option
@click.option("--built", "built", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A state folder of nights really built (`nightly --night D` with upstream at that night's "
                   "commit); their build, wheel and logs go into the replay's records of the same commits.")
@click.pass_obj
def nightly_replay_cmd(opts: Options, state_dir: Path, span: str, built: Path | None) -> None:
    """The recipe's nights from upstream commit A to B, one per day that touched the package: plan, series
    choice, conflict or retirement, lock; one record each in STATE_DIR/nights/ (nothing is built)."""
    from build_kernel.nightly import replay

    start, end = replay.parse_range(span)
    records = replay.replay(opts.plan(), start, end, state_dir, offline=opts.offline,
                            builds=replay.built_from(built) if built else None)
    lines = [f"{r['night']} {r['upstream']['commit'][:12]} {r['outcome']:9} "
             f"{r['series']['version'] or '-':4} {r['reason']}" for r in records]
    emit(opts, records, "\n".join(lines))


COMMANDS = [nightly_page_cmd, nightly_replay_cmd]
