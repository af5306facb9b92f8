"""`build-kernel nightly`: one night of a recipe start to end (build_kernel/nightly/), or its schedule."""

from __future__ import annotations

import re
from pathlib import Path

import click

from build_kernel.cli.options import Options, emit, offline_option, shared_options


def _night(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise click.UsageError(f"--night {value!r} is not a date: write YYYY-MM-DD, e.g. --night 2026-12-07")
    return value


@click.command("nightly")
@shared_options
@offline_option
@click.option("--upstream", "ref", metavar="BRANCH|TAG-GLOB",
              help="What the nights follow: a branch, or the newest tag a pattern matches ('v0.4.*'); default: the "
                   "recipe's [source] ref, else main.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              help="The nights' records, lock and kept wheels (default: ~/.local/state/build-kernel/nightly/RECIPE).")
@click.option("--keep", type=click.IntRange(min=1), default=7, show_default=True,
              help="Good nights whose wheels are kept (older ones go, unless a lock or recipe names them).")
@click.option("--to", metavar="NAME|URL|PATH", help="Publish to this target (default: the recipe's [publish] target).")
@click.option("--night", "night", metavar="YYYY-MM-DD", help="The night's date (default: today, UTC): the wheel's "
                                                              ".devYYYYMMDD and the record's name.")
@click.option("--dry-run", is_flag=True, help="Say what tonight would do (upstream, series, pins); build nothing, "
                                               "write no state.")
@click.option("--install-timer", is_flag=True, help="Write and verify a systemd service + timer that runs this "
                                                    "command every night (journal logging), instead of a night.")
@click.option("--user/--system", "user_scope", default=True, help="With --install-timer: a user unit (default, "
                                                                    "~/.config/systemd/user) or a system one.")
@click.option("--unit-dir", type=click.Path(file_okay=False, path_type=Path),
              help="With --install-timer: write the units here instead.")
@click.option("--at", "when", default="02:30", show_default=True, metavar="HH:MM",
              help="With --install-timer or --cron: the time of night.")
@click.option("--cron", is_flag=True, help="Print a crontab line for hosts without systemd, instead of a night.")
@click.option("--replay", "span", metavar="A..B", help="Instead of tonight: the nights of the past upstream range "
                                                       "A..B, one per day that touched the package (plan, series, "
                                                       "conflict or retirement, lock; nothing built but --built's nights), as "
                                                       "nightly-replay.")
@click.option("--built", "built", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="With --replay: a state folder of nights really built (`nightly --night D` with upstream at that "
                   "night's commit); their build, wheel and logs go into the replay's records of the same commits.")
@click.pass_context
def nightly_cmd(click_ctx: click.Context, ref: str | None, state_dir: Path | None, keep: int, to: str | None,
                night: str | None, dry_run: bool, install_timer: bool, user_scope: bool, unit_dir: Path | None,
                when: str, cron: bool, span: str | None, built: Path | None) -> None:
    """One night of the recipe: upstream's branch resolved, the newest series version that applies (or the
    conflicting patch, hunk and first bad commit), nightly pins moved, built, verified, tested where a GPU is,
    published with install-back, one record per night and the morning report. Exit 0: a new wheel or nothing
    new; 5: no series applies; a failed stage's own code; 75: another night is running."""
    from build_kernel.nightly import night as nights
    from build_kernel.nightly import report, state, timer

    opts: Options = click_ctx.ensure_object(Options)
    extra = [f"--keep={keep}", *([f"--upstream={ref}"] if ref else []), *([f"--to={to}"] if to else [])]
    recipe = str(Path(opts.recipe).absolute()) if opts.recipe and opts.recipe.endswith(".toml") else str(opts.recipe)
    if install_timer or cron:
        timer.at(when)  # a bad time is said before anything is read
        if not opts.recipe:
            raise click.UsageError("no recipe given: pass --recipe NAME (see `build-kernel recipes list`)")
        from build_kernel import recipe as recipes
        from build_kernel.plan import recipe_search_path

        # The recipe alone (no plan: the schedule needs neither the toolkit nor this host's resources).
        r = recipes.load(opts.recipe, search=recipe_search_path(opts.env))
        folder = (state_dir or state.default_dir(r.name, opts.env)).absolute()
        if cron:
            line = timer.cron_line(recipe, folder, r.root, when=when, extra=extra)
            emit(opts, {"cron": line}, line)
            return
        units, verified = timer.install(recipe, folder, r.root, opts.env, scope="user" if user_scope else "system",
                                        when=when, folder=unit_dir, extra=extra)
        said = {"units": [str(units.folder / f"{units.name}.service"), str(units.folder / f"{units.name}.timer")],
                "verified": verified, "enable": units.enable(), "journal": units.journal()}
        emit(opts, said, "\n".join([f"wrote {said['units'][0]}", f"wrote {said['units'][1]}", verified,
                                    f"enable: {said['enable']}", f"log:    {said['journal']}"]))
        return
    if built is not None and span is None:
        raise click.UsageError("--built goes with --replay A..B (the nights it merges are the replay's)")
    if span is not None:
        from build_kernel.nightly import replay

        start, end = replay.parse_range(span)  # a bad range is said before the plan is made
        p = opts.plan()
        folder = (state_dir or state.default_dir(p.recipe.name, opts.env)).absolute()
        records = replay.replay(p, start, end, folder, offline=opts.offline,
                                builds=replay.built_from(built) if built else None)
        emit(opts, records, replay.lines(records))
        return
    p = opts.plan()
    folder = (state_dir or state.default_dir(p.recipe.name, opts.env)).absolute()
    result = nights.run(p, nights.Options(state_dir=folder, night=_night(night) or nights.today(), ref=ref, keep=keep,
                                          to=to, dry_run=dry_run, offline=opts.offline))
    if result.dry_run:
        lines = [f"tonight would: {result.record['would']}"]
        up = result.record.get("upstream")
        if up:
            lines.append(f"upstream {up['ref']}: {up['commit'][:12]} ({up['commits_since']} commit(s) since the last "
                         "good night)" if up.get("previous_good") else f"upstream {up['ref']}: {up['commit'][:12]}")
        if result.record.get("series"):
            s = result.record["series"]
            lines.append(f"series: {s['name'] or 'none applies'}"
                         + (f"; retired: {', '.join(s['retired'])}" if s["retired"] else "")
                         + (f"; conflict: {s['conflict']['patch']}: {s['conflict']['hunk']}" if s["conflict"] else ""))
        emit(opts, result.record, "\n".join(lines))
        return
    said = report.write(folder, result.record, opts.env)
    emit(opts, {**result.record, "report": {k: v for k, v in said.items() if k != "record"}},
         report.markdown(result.record))
    if result.exit_code:
        click_ctx.exit(result.exit_code)


COMMANDS = (nightly_cmd,)
