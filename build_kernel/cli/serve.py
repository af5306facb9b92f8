"""`build-kernel serve`: sglang on the recipe's wheel — check, unit, launch, bench."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from build_kernel import stages
from build_kernel.cli.options import WHEEL, Options, emit, newest_wheel, shared_options


def _human(result: dict[str, Any]) -> str:
    lines: list[str] = []  # notes and forced refusals went to stderr as they happened
    unit = result.get("unit")
    if unit:
        lines += [f"# {unit['name']}: {unit['verified']}" + (f", written to {unit['path']}" if "path" in unit else "")]
        if "path" not in unit:
            lines.append(unit["text"])
    elif "server" in result:
        s = result["server"]
        r = result.get("resolved") or {}
        lines.append("resolved: " + ", ".join(f"{k}={v}" for k, v in (r.get("resolved") or {}).items())
                     + f", cuda_graph={r.get('cuda_graph', '?')}")
        lines.append(f"healthy after {s['seconds_to_healthy']} s; smoke {s['smoke']['tokens']} tokens at "
                     f"{s['smoke']['tokens_per_s']} tokens/s")
        from build_kernel.stages.serve import ops

        for check in result.get("checks", []):
            lines.append(f"check passed in {check['seconds']} s: {check['command']}")
        if result.get("ops"):
            lines += ops.summary(result["ops"])
        for row in result.get("bench", []):
            lines.append(f"C={row['concurrency']}: {row['output_throughput']:.1f} output tokens/s, "
                         f"mean TTFT {row['mean_ttft_ms']:.1f} ms")
        if "bench_file" in result:
            lines.append(f"results: {result['bench_file']}")
    else:
        lines.append(shlex.join(result["argv"]))
    return "\n".join(lines)


@click.command("serve")
@click.argument("wheel", required=False, type=WHEEL)
@shared_options
@click.option("--model", metavar="PATH|ID", help="Model folder or hub id (default: the recipe's [serve] model).")
@click.option("--dry-run", "mode", flag_value="check", default=True,
              help="Check everything and print the command (the default).")
@click.option("--unit", "unit", is_flag=False, flag_value="-", default=None, metavar="[FILE]",
              help="Render the systemd unit (verified with systemd-analyze); write it to FILE atomically.")
@click.option("--launch", "mode", flag_value="launch", help="Start the server, wait for /health_generate, smoke "
              "/generate, then serve in the foreground (Ctrl-C stops it).")
@click.option("--bench", "mode", flag_value="bench", help="Launch, then sglang.bench_serving at each "
              "[serve] bench_concurrency; results beside the wheel.")
@click.option("--smoke-only", is_flag=True, help="With --launch: stop after the smoke request.")
@click.option("--install", is_flag=True, help="First install the wheel and sglang (pinned) into the serve "
              "interpreter, keeping its torch.")
@click.option("--wheelhouse", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR",
              help="With --install: install from this folder of wheels alone (an offline host); what it lacks is "
                   "listed before anything is installed.")
@click.option("--flags-only", is_flag=True, help="With --install: only what sglang's flag parser needs (no GPU here).")
@click.option("--op-report/--no-op-report", default=True, show_default=True,
              help="With --launch/--bench: count the custom torch ops (sgl_kernel's) the server's processes call, and "
                   "report those called for the smoke and bench requests and those captured in CUDA graphs.")
@click.option("--check", "checks", multiple=True, metavar="CMD",
              help="With --launch/--bench: after the smoke request, run CMD against the live server ({url} becomes "
                   "its URL; split like a shell line, run without a shell); a failing check fails serve. Repeatable.")
@click.option("--force", is_flag=True, help="Serve despite a refusal (unverified wheel, known-bad backend): loudly.")
@click.pass_obj
def serve_cmd(opts: Options, wheel: Path | None, model: str | None, mode: str, unit: str | None, smoke_only: bool,
              install: bool, wheelhouse: Path | None, flags_only: bool, op_report: bool, checks: tuple[str, ...],
              force: bool) -> None:
    """Serve the recipe's model with the wheel we built: checked flags, systemd unit, launch, bench."""
    from build_kernel.stages.serve import ServeStage

    if flags_only and not install:
        raise click.UsageError("--flags-only goes with --install")
    if wheelhouse is not None and not install:
        raise click.UsageError("--wheelhouse goes with --install")
    if unit is not None:
        mode = "unit"
    if checks and mode not in ("launch", "bench"):
        raise click.UsageError("--check goes with --launch or --bench (it needs a live server)")
    p = opts.plan()
    stage = ServeStage(mode, model=model, force=force, unit_path=None if unit in (None, "-") else Path(unit),
                       install=install, flags_only=flags_only, smoke_only=smoke_only,
                       wheelhouse=wheelhouse.resolve() if wheelhouse else None, op_report=op_report,
                       checks=checks)
    if stage.skip(stages.Context(p)) is not None:
        raise click.UsageError(f"the recipe {p.recipe.name} has no [serve] model: pass --model PATH|ID")
    # Checking (--dry-run, the default) makes nothing: --install is what creates environments.
    dry_run = mode == "check" and not install
    stages.run(stages.Context(p, wheels=[wheel or newest_wheel(p)], dry_run=dry_run), [stage])
    emit(opts, stage.result, _human(stage.result))


def _jit_human(result: dict[str, Any]) -> str:
    if result.get("dry_run"):
        lines = [f"{i['entry']}{':' + i['builder'] if i['builder'] else ''} for {i['arch']}" for i in result["items"]]
        return "\n".join([*lines, *result.get("notes", [])]) or "nothing to prewarm"
    v = result.get("verify") or {}
    lines = [f"{m['name']}: {m['size'] / 1e6:.2f} MB, " + ", ".join(f"{k}={n}" for k, n in m["sass"].items())
             for m in v.get("modules", [])]
    return "\n".join([*lines, f"cache: {result['cache']} ({'verified' if v.get('passed') else 'NOT verified'})"])


@click.command("jit-prewarm")
@shared_options
@click.option("--python", "python", metavar="PATH", help="The serve interpreter (default: the recipe's, as "
              "`serve --install` made it).")
@click.option("--dry-run", is_flag=True, help="List what would be compiled, compile nothing.")
@click.pass_obj
def jit_prewarm_cmd(opts: Options, python: str | None, dry_run: bool) -> None:
    """Compile the recipe's [serve] jit_prewarm sglang JIT modules into the server's tvm-ffi cache, and verify their SASS."""
    from build_kernel.stages.serve import environment, prewarm_and_verify

    p = opts.plan()
    if not p.recipe.serve.jit_prewarm:
        raise click.UsageError(f"the recipe {p.recipe.name} has no [serve] jit_prewarm "
                               "(e.g. jit_prewarm = [\"sglang.jit_kernel.nvfp4\"])")
    ctx = stages.Context(p, dry_run=dry_run)
    served = python or environment.python_for(p, ctx.build_python())
    result = prewarm_and_verify(p, served, environment.server_env(p), dry_run=dry_run)
    emit(opts, result, _jit_human(result))


COMMANDS = (serve_cmd, jit_prewarm_cmd)
