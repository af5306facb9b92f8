"""Patch series commands: check, health, lock, worktree, refresh."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from build_kernel.cli.options import Options, emit, offline_option, shared_options
from build_kernel.log import styled


@click.group("patch")
@shared_options
def patch_group() -> None:
    """Check, lock and refresh patch series."""


@patch_group.command("check")
@shared_options
@click.option("--commit", metavar="SHA", help="Check against this upstream commit instead of the pin.")
@offline_option
@click.pass_obj
def patch_check_cmd(opts: Options, commit: str | None) -> None:
    """One row per patch: applies / applies with offset / already upstream / conflicts."""
    from build_kernel.stages.patch import check as patch_check

    p = opts.plan()
    statuses = patch_check.check(p, commit=commit, offline=opts.offline)
    table = Table("patch", "state", "detail")
    for s in statuses:
        colour = {"applies": "green", "applies with offset": "yellow"}.get(s.state, "red")
        table.add_row(s.name, styled(s.state, colour), "; ".join(s.offsets) or s.detail)
    emit(opts, [s.to_dict() for s in statuses], table)
    if any(s.state in ("conflicts", "already upstream") for s in statuses):
        sys.exit(5)


@patch_group.command("health")
@shared_options
@click.option("--since", metavar="REF", help="Only commits after this one (a commit, branch or tag).")
@click.option("--until", metavar="REF", help="Walk back from this branch, tag or full commit SHA (default: the recipe's [source] ref).")
@click.option("--write", "write_to", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the rows (commit, date, version, states) and each patch's need as JSON to FILE, atomically.")
@click.option("--series", "also", multiple=True, metavar="SERIES/VERSION",
              help="Also check this series of the recipe's patches/ folder (e.g. sm120/v4) at the same commits: "
                   "one column per series, and the commits none of them covers. Repeatable.")
@offline_option
@click.pass_obj
def patch_health_cmd(opts: Options, since: str | None, until: str | None,
                     write_to: Path | None, also: tuple[str, ...]) -> None:
    """The series' state at every upstream commit that changed the package version, and each patch: needed,
    or the first upstream commit from which it is not (its reverse applies, or its Applied-Upstream header
    names the fix). A report: exit 0."""
    from build_kernel.stages.patch import health as patch_health

    p = opts.plan()
    more = tuple(patch_health.other_series(p, name) for name in dict.fromkeys(also) if name != p.series.name)
    health = patch_health.walk(p, since=since, until=until, offline=opts.offline, also=more)
    if write_to is not None:
        patch_health.write(health, write_to)
    emit(opts, patch_health.as_json(health), patch_health.render(health, [s.name for s in p.series.patches]))


@patch_group.command("lock")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@shared_options
@click.pass_obj
def patch_lock_cmd(opts: Options, directory: Path) -> None:
    """Record the sha256 of every patch in DIRECTORY (after reviewing them)."""
    from build_kernel.series import write_lock

    lock = write_lock(directory)
    emit(opts, {"lock": str(lock)}, f"wrote {lock}")


@patch_group.command("worktree")
@shared_options
@click.argument("dest", type=click.Path(path_type=Path))
@offline_option
@click.pass_obj
def patch_worktree_cmd(opts: Options, dest: Path) -> None:
    """A checkout at DEST with one commit per patch, to edit and then `patch refresh`."""
    from build_kernel.stages.patch import check as patch_check

    p = opts.plan()
    patch_check.dev_worktree(p, dest, offline=opts.offline)
    emit(opts, {"worktree": str(dest)}, f"{dest}: one commit per patch; edit, commit (amend/fixup), then `build-kernel patch refresh`")


@patch_group.command("refresh")
@shared_options
@click.argument("worktree", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def patch_refresh_cmd(opts: Options, worktree: Path) -> None:
    """Regenerate the series' patch files from WORKTREE's commits (headers kept, lock updated)."""
    from build_kernel.stages.patch import check as patch_check

    p = opts.plan()
    changed = patch_check.refresh(p, worktree)
    emit(opts, {"changed": changed}, f"refreshed {len(changed)} patch(es): {', '.join(changed) or 'none changed'}")
