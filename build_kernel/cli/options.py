"""The options every command shares, and how results are printed (JSON or a table)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from build_kernel import log, recipe
from build_kernel.cli.output import remember_wheel
from build_kernel.compile_cache.settings import FROM_COMMAND_LINE
from build_kernel.plan import Plan, environment, recipe_search_path, resolve
from build_kernel.wheel_check import check_wheel

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Options:
    """The shared options of one run: set by the group and by the command (the later wins)."""

    recipe: str | None = None
    arch: str | None = None
    jobs: int | None = None
    cache_dir: Path | None = None
    output_dir: Path | None = None
    json: bool = False
    debug: bool = False
    # Before or after the command, as the shared options (`build-kernel --offline fetch` is offline too).
    offline: bool = False
    env: dict[str, str] = field(default_factory=environment)

    def plan(self) -> Plan:
        if not self.recipe:
            raise click.UsageError("no recipe given: pass --recipe NAME (see `build-kernel recipes list`)")
        return resolve(recipe.load(self.recipe, search=recipe_search_path(self.env)), env=self.env, arch=self.arch, jobs=self.jobs,
                       cache_dir=self.cache_dir, output_dir=self.output_dir)


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Put a shared option on the run's Options, unless it was not given at this level."""
    if value is None or value is False:
        return
    assert param.name is not None
    setattr(ctx.ensure_object(Options), param.name, value)


def _store_env(variable: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A command-line value that overrides an environment variable of the same meaning (the plan
    reads both from its environment: the command line simply sets it, so it wins). It is marked as
    the command line's (FROM_COMMAND_LINE), so messages do not blame the environment for it; a relative
    folder is made absolute here, from where the user is (a build runs in other folders)."""
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value:
            env = ctx.ensure_object(Options).env
            text = str(value)
            if param.name == "cache_url" and "://" not in text and not text.startswith(("/", "~")):
                text = str(Path(text).absolute())
            env[variable] = text
            given = [v for v in env.get(FROM_COMMAND_LINE, "").split(",") if v and not v.startswith(f"{variable}=")]
            env[FROM_COMMAND_LINE] = ",".join([*given, f"{variable}={param.opts[0]}"])
    return store


_SHARED: tuple[Callable[[F], F], ...] = (
    click.option("--recipe", "-r", metavar="NAME|PATH", callback=_store, expose_value=False,
                 help="Recipe: a name in recipes/ or a .toml path."),
    click.option("--arch", metavar="LIST", callback=_store, expose_value=False,
                 help="Arch list, e.g. 12.0a or '9.0a;12.0a' (`;`, spaces or commas, TORCH_CUDA_ARCH_LIST's spellings; "
                      "overrides ARCH, TORCH_CUDA_ARCH_LIST and the recipe)."),
    click.option("--jobs", "-j", type=int, callback=_store, expose_value=False,
                 help="Compile jobs (overrides MAX_JOBS and the recipe)."),
    click.option("--cache-dir", type=click.Path(path_type=Path), callback=_store, expose_value=False,
                 help="Cache folder (default: $BUILD_KERNEL_CACHE_DIR or ~/.cache/build-kernel)."),
    click.option("--output-dir", type=click.Path(path_type=Path), callback=_store, expose_value=False,
                 help="Where wheels go (default: $BUILD_KERNEL_OUTPUT_DIR or wheels/)."),
    click.option("--compile-cache", type=click.Choice(["none", "ccache", "sccache"]),
                 callback=_store_env("BUILD_KERNEL_COMPILE_CACHE"), expose_value=False,
                 help="Compiler launcher (overrides BUILD_KERNEL_COMPILE_CACHE, the user config and the recipe)."),
    click.option("--compile-scheduler", type=click.Choice(["auto", "static", "governor"]),
                 callback=_store_env("BUILD_KERNEL_SCHEDULER"), expose_value=False,
                 help="How compiles start: auto (governor where ninja >= 1.13), static, governor (overrides "
                      "BUILD_KERNEL_SCHEDULER and the recipe)."),
    click.option("--cache-url", metavar="URL|DIR", callback=_store_env("BUILD_KERNEL_CACHE_URL"), expose_value=False,
                 help="Shared compile cache: redis://host:6379, s3://bucket/prefix, a folder (overrides "
                      "BUILD_KERNEL_CACHE_URL, the user config and the recipe)."),
    click.option("--json", is_flag=True, callback=_store, expose_value=False, help="Machine-readable output on stdout."),
    click.option("--debug", is_flag=True, callback=_store, expose_value=False, help="Show tracebacks."),
)


def shared_options(command: F) -> F:
    """The shared options, on the group and on every command."""
    for option in reversed(_SHARED):
        command = option(command)
    return command


class WheelPath(click.ParamType[Path, Any]):
    """A wheel argument: checked to be a wheel when parsed, so every command that takes one refuses
    a text file, an empty file, a foreign zip or a folder with the same one line (exit 7)."""

    name = "wheel"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        remember_wheel(ctx, Path(value))
        return check_wheel(Path(value))


WHEEL = WheelPath()

offline_option = click.option("--offline", is_flag=True, callback=_store, expose_value=False,
                              help="Use only what is cached; never touch the network.")


def emit(opts: Options, data: Any, human: Any) -> None:
    """JSON on stdout for scripts, or the human rendering: a string as it is, a rich table through a
    console without markup, so a cell says what the JSON says (log.py)."""
    if opts.json:
        click.echo(json.dumps(data, indent=2, default=str))
    elif isinstance(human, str):
        click.echo(human)
    else:
        log.out(human)


def newest_wheel(p: Plan) -> Path:
    """The recipe's most recent wheel in the output folder (what `build` just made)."""
    candidates = sorted(p.output_dir.glob("*.whl"), key=lambda w: w.stat().st_mtime)
    if not candidates:
        raise click.UsageError(f"no wheel in {p.output_dir}: build one first (build-kernel build --recipe "
                               f"{p.recipe.name}) or pass WHEEL")
    remember_wheel(None, candidates[-1])
    return check_wheel(candidates[-1])
