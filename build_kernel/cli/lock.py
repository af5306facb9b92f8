"""`build-kernel lock`: write the recipe's lock ahead of any build (build_kernel/lock.py)."""

from __future__ import annotations

import click

from build_kernel.cli.options import Options, emit, shared_options


@click.command("lock")
@click.option("--upgrade", is_flag=True,
              help="Resolve every pin again: a torch \"nightly\" moves to the newest the index lists, a tag or branch "
                   "to what it names now (without it, what the lock holds is kept).")
@click.option("--dry-run", is_flag=True, help="Print what would change in the lock; write nothing.")
@shared_options
@click.pass_obj
def lock_cmd(opts: Options, upgrade: bool, dry_run: bool) -> None:
    """Resolve the recipe's resolvable pins (torch from its torch_index, "nightly" included; tag and branch pins)
    and write <recipe>.lock beside it, as `uv lock` does; one line per pin."""
    from build_kernel import lock

    if opts.offline:
        raise click.UsageError("lock asks the indexes and servers what the pins name: drop --offline")
    result = lock.lock(opts.plan(), upgrade=upgrade, dry_run=dry_run)
    emit(opts, result, lock.render(result))


COMMANDS = (lock_cmd,)
