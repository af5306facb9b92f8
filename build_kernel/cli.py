"""Thin click CLI: each command makes one call into its stage module and prints the result.

`main()` catches only BuildKernelError: one line (or one line per recipe problem), and
the error kind's exit code. `--debug` shows the traceback as well.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from build_kernel import __version__, log, recipe, toolchain
from build_kernel.errors import BuildKernelError
from build_kernel.plan import Plan, resolve
from build_kernel.resources import probe


@dataclass
class Options:
    recipe: str | None
    arch: str | None
    jobs: int | None
    cache_dir: Path | None
    output_dir: Path | None
    json: bool
    debug: bool

    def plan(self, name: str | None = None) -> Plan:
        chosen = name or self.recipe
        if not chosen:
            raise click.UsageError("no recipe given: pass --recipe NAME (see `build-kernel recipes list`)")
        return resolve(recipe.load(chosen), arch=self.arch, jobs=self.jobs, cache_dir=self.cache_dir,
                       output_dir=self.output_dir)


def emit(opts: Options, data: Any, human: Any) -> None:
    """JSON on stdout for scripts, or the human rendering."""
    if opts.json:
        click.echo(json.dumps(data, indent=2, default=str))
    elif isinstance(human, str):
        click.echo(human)
    else:
        log.console.file = sys.stdout
        try:
            log.console.print(human)
        finally:
            log.console.file = sys.stderr


recipe_option = click.option("--recipe", "-r", "recipe_name", metavar="NAME", help="Recipe name or path.")


@click.group(invoke_without_command=True)
@click.option("--recipe", "-r", metavar="NAME|PATH", help="Recipe to run (name in recipes/ or a .toml path).")
@click.option("--arch", metavar="LIST", help="Arch list, e.g. 12.0a (overrides ARCH and the recipe).")
@click.option("--jobs", "-j", type=int, help="Compile jobs (overrides MAX_JOBS and the recipe).")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Cache folder (default: $BUILD_KERNEL_CACHE_DIR or ~/.cache/build-kernel).")
@click.option("--output-dir", type=click.Path(path_type=Path), help="Where wheels go (default: $BUILD_KERNEL_OUTPUT_DIR or wheels/).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("--offline", is_flag=True, help="Pipeline: use only cached sources; never touch the network.")
@click.option("--force", is_flag=True, help="Pipeline: rebuild even when the wheel cache has this build.")
@click.option("--dry-run", is_flag=True, help="Pipeline: print the resolved plan and stages, run nothing.")
@click.option("--gpu-check", default="", metavar="MODULE:FUNC", help="Pipeline: GPU check to run in verify.")
@click.version_option(__version__)
@click.pass_context
def cli(ctx: click.Context, recipe: str | None, arch: str | None, jobs: int | None, cache_dir: Path | None,
        output_dir: Path | None, as_json: bool, debug: bool, offline: bool, force: bool, dry_run: bool, gpu_check: str) -> None:
    """Build GPU kernel libraries from pinned, patched source.

    `build-kernel --recipe NAME` runs the whole pipeline; each stage is also a command.
    """
    ctx.obj = Options(recipe, arch, jobs, cache_dir, output_dir, as_json, debug)
    if ctx.invoked_subcommand is None:
        if not recipe:
            click.echo(ctx.get_help())
            return
        from build_kernel import pipeline

        result = pipeline.run(ctx.obj.plan(), pipeline.Options(offline=offline, force=force, dry_run=dry_run,
                                                               gpu_check=gpu_check))
        emit(ctx.obj, result, pipeline.render(result))


@cli.group("recipes")
def recipes_group() -> None:
    """List and show recipes."""


@recipes_group.command("list")
@click.pass_obj
def recipes_list(opts: Options) -> None:
    """The recipes in recipes/."""
    rows: list[dict[str, Any]] = []
    for name in recipe.list_recipes():
        try:
            r = recipe.load(name)
            rows.append({"name": name, "description": r.description, "archs": [a.torch for a in r.build.arch],
                         "commit": r.source.commit, "ok": True})
        except BuildKernelError as exc:
            rows.append({"name": name, "description": f"INVALID: {exc.render().splitlines()[0]}", "archs": [],
                         "commit": "", "ok": False})
    table = Table("recipe", "archs", "commit", "description")
    for row in rows:
        table.add_row(row["name"], " ".join(row["archs"]), row["commit"][:12], row["description"])
    emit(opts, rows, table)


@recipes_group.command("show")
@click.argument("name")
@click.pass_obj
def recipes_show(opts: Options, name: str) -> None:
    """A recipe with inheritance resolved."""
    r = recipe.load(name)
    data = {"name": r.name, "path": str(r.path), "digest": r.digest, "recipe": r.raw}
    emit(opts, data, json.dumps(data, indent=2, default=str))


@recipes_group.command("reference")
def recipes_reference() -> None:
    """The recipe reference (Markdown), generated from the recipe model."""
    click.echo(recipe.reference_markdown(), nl=False)


@cli.command("plan")
@recipe_option
@click.pass_obj
def plan_cmd(opts: Options, recipe_name: str | None) -> None:
    """Everything resolved: source, patches, toolchain, archs, jobs (with derivation), env."""
    p = opts.plan(recipe_name)
    data = p.to_dict()
    data["cuda_toolkit"] = _toolkit_choice(p)
    table = Table("key", "value", show_header=False)
    table.add_row("recipe", f"{p.recipe.name} ({p.recipe.path})")
    table.add_row("source", f"{p.recipe.source.repo} @ {p.recipe.source.commit} {p.recipe.source.subdir}")
    for rw in p.remotes():
        if rw.rewritten:
            table.add_row("mirror", rw.describe())
    for patch in p.series.patches:
        table.add_row("patch", f"{patch.name}  sha256:{patch.sha256[:16]}")
    table.add_row("archs", f"{p.arch_list}  (from {p.arch_source})")
    table.add_row("jobs", p.jobs.derivation)
    for key, value in {**p.build_env(), **{f"-D{k}": v for k, v in p.recipe.build.defines.items()}}.items():
        table.add_row("env" if not key.startswith("-D") else "define", f"{key}={value}")
    table.add_row("cuda toolkit", f"{data['cuda_toolkit']['source']}: {data['cuda_toolkit']['why']}")
    table.add_row("cache", str(p.cache_dir))
    emit(opts, data, table)


def _newest_wheel(p: Plan) -> Path:
    """The recipe's most recent wheel in the output folder (what `build` just made)."""
    candidates = sorted(p.output_dir.glob("*.whl"), key=lambda w: w.stat().st_mtime)
    if not candidates:
        raise click.UsageError(f"no wheel in {p.output_dir}: build one first (build-kernel build --recipe "
                               f"{p.recipe.name}) or pass WHEEL")
    return candidates[-1]


def _toolkit_choice(p: Plan) -> dict[str, str]:
    """Which nvcc the build would use, and why, without installing anything."""
    from build_kernel.stages.build import buildenv, cudawheels

    python = buildenv.python_for(p, dry_run=True)
    facts = toolchain.detect(python if Path(python).exists() else sys.executable)
    # Before its build env exists, the recipe's CUDA stands in for torch's.
    cuda = (facts.torch_cuda if Path(python).exists() else None) or p.recipe.toolchain.cuda
    try:
        source, why = cudawheels.choose(p.recipe.toolchain.cuda_source, facts, cuda, p.archs)
    except BuildKernelError as exc:
        return {"source": "none", "why": exc.render()}
    return {"source": source, "why": why}


@cli.command("doctor")
@recipe_option
@click.pass_obj
def doctor_cmd(opts: Options, recipe_name: str | None) -> None:
    """What is installed: python, git, cmake, ninja, nvcc (+ archs), gcc, torch, cgroup limits."""
    facts = toolchain.detect()
    res = probe()
    data: dict[str, Any] = {"tools": facts.to_dict(), "resources": {
        "cpus": res.cpus, "cpus_why": res.cpus_why, "memory_gb": round(res.memory_gb, 2), "memory_why": res.memory_why}}
    name = recipe_name or opts.recipe
    if name:
        p = opts.plan(name)
        from build_kernel.stages.build import cudawheels

        data["problems"] = toolchain.preflight(facts, p.archs, cmake_spec=p.recipe.toolchain.cmake,
                                               want_cuda=p.recipe.toolchain.cuda)
        cuda = facts.torch_cuda or p.recipe.toolchain.cuda
        try:
            source, why = cudawheels.choose(p.recipe.toolchain.cuda_source, facts, cuda, p.archs)
            cached = cudawheels.find_cached(p.cache_dir, cuda, python=sys.executable) if source == "wheels" else None
            data["cuda_toolkit"] = {"source": source, "why": why, "cached": str(cached.root) if cached else None}
            if source == "wheels":
                # The wheels replace the system nvcc: its problems are not the build's.
                data["problems"] = [x for x in data["problems"] if not x.startswith("nvcc")]
        except BuildKernelError as exc:
            data["problems"].append(exc.render())
    table = Table("tool", "found", show_header=False)
    table.add_row("python", f"{facts.python_version} ({facts.python})")
    table.add_row("git", facts.git or "MISSING")
    table.add_row("cmake", f"{facts.cmake_version} ({facts.cmake})" if facts.cmake else "MISSING")
    table.add_row("ninja", f"{facts.ninja_version} ({facts.ninja})" if facts.ninja else "MISSING")
    table.add_row("g++", f"{facts.gcc_version} ({facts.gcc})" if facts.gcc else "MISSING")
    table.add_row("nvcc", f"CUDA {facts.nvcc_version} ({facts.nvcc}, root {facts.cuda_home})" if facts.nvcc else "MISSING")
    table.add_row("nvcc archs", " ".join(f"sm_{a}" for a in facts.nvcc_archs) or "-")
    table.add_row("torch", f"{facts.torch_version} (CUDA {facts.torch_cuda})" if facts.torch_version else "MISSING")
    table.add_row("cpus", f"{res.cpus} ({res.cpus_why})")
    table.add_row("memory", f"{res.memory_gb:.1f} GB ({res.memory_why})")
    if name:
        data["mirrors"] = [rw.to_dict() for rw in p.remotes() if rw.rewritten]
        for rw in p.remotes():
            if rw.rewritten:
                table.add_row("mirror", rw.describe())
    if "cuda_toolkit" in data:
        table.add_row("CUDA toolkit", f"{data['cuda_toolkit']['source']}: {data['cuda_toolkit']['why']}")
    for problem in data.get("problems", []):
        table.add_row("[red]problem[/]", problem)
    emit(opts, data, table)
    if data.get("problems"):
        sys.exit(3)


offline_option = click.option("--offline", is_flag=True, help="Use only what is cached; never touch the network.")


@cli.command("fetch")
@recipe_option
@offline_option
@click.pass_obj
def fetch_cmd(opts: Options, recipe_name: str | None, offline: bool) -> None:
    """Fetch the pinned source and apply the patch series (cached by commit + series)."""
    from build_kernel import pipeline

    p = opts.plan(recipe_name)
    tree = pipeline.fetch_stage(p, offline=offline)
    data = {"tree": str(tree.root), "project": str(tree.project), "commit": tree.commit, "cached": tree.cached,
            "patches": [s.to_dict() for s in tree.patches], "defines": tree.fetchcontent_defines()}
    emit(opts, data, f"{tree.project}  ({'cached' if tree.cached else 'new'}, {len(tree.patches)} patches)")


@cli.group("patch")
def patch_group() -> None:
    """Check, lock and refresh patch series."""


@patch_group.command("check")
@recipe_option
@click.option("--commit", metavar="SHA", help="Check against this upstream commit instead of the pin.")
@offline_option
@click.pass_obj
def patch_check_cmd(opts: Options, recipe_name: str | None, commit: str | None, offline: bool) -> None:
    """One row per patch: applies / applies with offset / already upstream / conflicts."""
    from build_kernel.stages.patch import check as patch_check

    p = opts.plan(recipe_name)
    statuses = patch_check.check(p, commit=commit, offline=offline)
    table = Table("patch", "state", "detail")
    for s in statuses:
        colour = {"applies": "green", "applies with offset": "yellow"}.get(s.state, "red")
        table.add_row(s.name, f"[{colour}]{s.state}[/]", "; ".join(s.offsets) or s.detail)
    emit(opts, [s.to_dict() for s in statuses], table)
    if any(s.state in ("conflicts", "already upstream") for s in statuses):
        sys.exit(5)


@patch_group.command("health")
@recipe_option
@click.option("--since", metavar="REF", help="Only commits after this one (a commit, branch or tag).")
@click.option("--until", metavar="REF", help="Walk back from this branch, tag or full commit SHA (default: the recipe's [source] ref).")
@click.option("--write", "write_to", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the rows (commit, date, version, states) as JSON to FILE, atomically.")
@offline_option
@click.pass_obj
def patch_health_cmd(opts: Options, recipe_name: str | None, since: str | None, until: str | None,
                     write_to: Path | None, offline: bool) -> None:
    """The series' state at every upstream commit that changed the package version (a report: exit 0)."""
    from build_kernel.stages.patch import health as patch_health

    p = opts.plan(recipe_name)
    health = patch_health.walk(p, since=since, until=until, offline=offline)
    if write_to is not None:
        patch_health.write(health, write_to)
    emit(opts, [row.to_dict() for row in health.rows], patch_health.render(health, [s.name for s in p.series.patches]))


@patch_group.command("lock")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def patch_lock_cmd(opts: Options, directory: Path) -> None:
    """Record the sha256 of every patch in DIRECTORY (after reviewing them)."""
    from build_kernel.series import write_lock

    lock = write_lock(directory)
    emit(opts, {"lock": str(lock)}, f"wrote {lock}")


@patch_group.command("worktree")
@recipe_option
@click.argument("dest", type=click.Path(path_type=Path))
@offline_option
@click.pass_obj
def patch_worktree_cmd(opts: Options, recipe_name: str | None, dest: Path, offline: bool) -> None:
    """A checkout at DEST with one commit per patch, to edit and then `patch refresh`."""
    from build_kernel.stages.patch import check as patch_check

    p = opts.plan(recipe_name)
    patch_check.dev_worktree(p, dest, offline=offline)
    emit(opts, {"worktree": str(dest)}, f"{dest}: one commit per patch; edit, commit (amend/fixup), then `build-kernel patch refresh`")


@patch_group.command("refresh")
@recipe_option
@click.argument("worktree", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def patch_refresh_cmd(opts: Options, recipe_name: str | None, worktree: Path) -> None:
    """Regenerate the series' patch files from WORKTREE's commits (headers kept, lock updated)."""
    from build_kernel.stages.patch import check as patch_check

    p = opts.plan(recipe_name)
    changed = patch_check.refresh(p, worktree)
    emit(opts, {"changed": changed}, f"refreshed {len(changed)} patch(es): {', '.join(changed) or 'none changed'}")


@cli.command("build")
@recipe_option
@offline_option
@click.option("--force", is_flag=True, help="Rebuild even on a cache hit.")
@click.pass_obj
def build_cmd(opts: Options, recipe_name: str | None, offline: bool, force: bool) -> None:
    """Fetch, patch and build the wheel (cached by every input)."""
    from build_kernel import pipeline

    p = opts.plan(recipe_name)
    _, result = pipeline.build_stage(p, pipeline.fetch_stage(p, offline=offline), force=force, offline=offline)
    emit(opts, result.to_dict(), f"{result.wheel}  ({'cache hit' if result.cached else 'built'}, {result.version})")


@cli.command("verify")
@click.argument("wheel", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@recipe_option
@click.option("--gpu-check", default="", metavar="MODULE:FUNC", help="GPU check to run when a GPU of a built arch is present.")
@click.pass_obj
def verify_cmd(opts: Options, wheel: Path | None, recipe_name: str | None, gpu_check: str) -> None:
    """Check a wheel: cubin archs, FP4 SASS, clean import, ops, GPU run."""
    from build_kernel.stages.verify import checks as verify

    p = opts.plan(recipe_name)
    if wheel is None:
        wheel = _newest_wheel(p)
    with log.step(f"verify {wheel.name}"):
        report = verify.verify(wheel, p.recipe.verify, p.archs, gpu_check=gpu_check)
    table = Table("check", "result")
    for lib in report.libraries:
        table.add_row(lib.path, f"archs {' '.join(lib.archs)}; missing {' '.join(lib.missing) or '-'}; extra {' '.join(lib.extra) or '-'}")
        if lib.fp4_matches is not None:
            table.add_row("  FP4 SASS", ", ".join(f"{k} x{v}" for k, v in lib.fp4_matches.items()) or "-")
    for name, outcome in report.imports.items():
        table.add_row(f"import {name}", outcome)
    table.add_row("ops", f"found {len(report.ops_found)}, missing {', '.join(report.ops_missing) or 'none'}")
    table.add_row("gpu", json.dumps(report.gpu) if report.gpu else "not requested")
    for w in report.warnings:
        table.add_row("[yellow]warning[/]", w)
    for f in report.failures:
        table.add_row("[red]FAIL[/]", f)
    table.add_row("result", "[green]passed[/]" if report.passed else "[red]failed[/]")
    emit(opts, report.to_dict(), table)
    if not report.passed:
        sys.exit(7)


@cli.command("publish")
@click.argument("wheels", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@recipe_option
@click.option("--to", "to", metavar="NAME|URL|PATH",
              help="Index name ([publish.targets], indexes.toml or ~/.pypirc), upload URL, or static folder "
                   "(default: the recipe's [publish] target).")
@click.option("--install-url", metavar="URL", help="Simple URL to install back from (default: <upload URL>/simple/).")
@click.option("--skip-existing", is_flag=True, help="A file already on the index is skipped (still installed back).")
@click.option("--force", is_flag=True, help="Publish even without a passing verification record (loud warning).")
@click.pass_obj
def publish_cmd(opts: Options, wheels: tuple[Path, ...], recipe_name: str | None, to: str | None,
                install_url: str | None, skip_existing: bool, force: bool) -> None:
    """Upload verified wheels to an index or a static folder, then install them back and import them."""
    from build_kernel.stages.build import buildenv
    from build_kernel.stages.publish import upload as publish

    name = recipe_name or opts.recipe
    p = opts.plan(name) if name else None
    if not wheels:
        if p is None:
            raise click.UsageError("nothing to publish: pass WHEEL… or --recipe NAME")
        wheels = (_newest_wheel(p),)
    target = publish.resolve_target(to, p.recipe.publish if p else None, env=os.environ, install_url=install_url,
                                    recipe_root=p.recipe.root if p else None)
    with log.step(f"publish {len(wheels)} wheel(s) to {target.label}"):
        result = publish.publish(
            list(wheels), target, skip_existing=skip_existing, force=force,
            import_modules=p.recipe.verify.import_modules if p else None,
            python=buildenv.python_for(p) if p else sys.executable, env=os.environ,
            log_path=p.cache_dir / "logs" / f"publish-{p.recipe.name}.log" if p else None)
    emit(opts, result.to_dict(), publish.render(result))


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv)
    try:
        cli.main(args=argv, prog_name="build-kernel", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BuildKernelError as exc:
        if debug:
            raise
        for line in exc.render().splitlines():
            click.echo(f"error: {line}", err=True)
        sys.exit(exc.exit_code)
