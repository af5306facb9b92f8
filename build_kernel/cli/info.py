"""Commands that only read: recipes, plan, doctor."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from build_kernel import readiness, recipe, toolchain
from build_kernel.cli.options import Options, emit, offline_option, shared_options
from build_kernel.cli.planview import describe_plan
from build_kernel.errors import BuildKernelError
from build_kernel.log import styled
from build_kernel.plan import Plan, recipe_search_path
from build_kernel.resources import probe


@click.group("recipes")
@shared_options
def recipes_group() -> None:
    """List and show recipes."""


@recipes_group.command("list")
@shared_options
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
@click.argument("name", required=False)
@shared_options
@click.pass_obj
def recipes_show(opts: Options, name: str | None) -> None:
    """A recipe with inheritance resolved (NAME, or --recipe as every command takes it)."""
    if name and opts.recipe and name != opts.recipe:
        raise click.UsageError(f"two recipes given: {name} and --recipe {opts.recipe}; give one")
    if not (name or opts.recipe):
        raise click.UsageError("no recipe given: pass NAME or --recipe NAME (see `build-kernel recipes list`)")
    r = recipe.load(name or opts.recipe or "", search=recipe_search_path(opts.env))
    data = {"name": r.name, "path": str(r.path), "digest": r.digest, "recipe": r.raw}
    emit(opts, data, json.dumps(data, indent=2, default=str))


@recipes_group.command("reference")
@shared_options
@click.pass_obj
def recipes_reference(opts: Options) -> None:
    """The recipe reference (Markdown; --json: each table's keys, defaults, meanings), generated from the model."""
    from build_kernel.recipe.reference import reference_tables

    if opts.json:
        emit(opts, reference_tables(), "")
    else:
        click.echo(recipe.reference_markdown(), nl=False)


explain_option = click.option("--explain", is_flag=True,
                              help="Also where each value came from (file:line), each patch's sha256, the env and "
                                   "defines, and each TU's predicted memory (--json always has them).")


@click.command("plan")
@explain_option
@shared_options
@offline_option
@click.pass_obj
def plan_cmd(opts: Options, explain: bool) -> None:
    """What will be built, answer first: source, series, archs with what each library gets, toolchain, jobs
    (with derivation), compile order, cache, stages."""
    data, text = describe_plan(opts.plan(), explain=explain, offline=opts.offline)
    emit(opts, data, text)
    if data["toolchain_problems"]:  # printed first, with the fix: a build could not install its toolchain
        sys.exit(3)


def _doctor_table(facts: toolchain.Facts, data: dict[str, Any], p: Plan | None) -> Table:
    res = data["resources"]
    table = Table("tool", "found", show_header=False)
    for problem in data.get("toolchain_problems", []):  # the toolchain cannot be installed: said first
        table.add_row(styled("problem", "red"), problem)
    table.add_row("python", f"{facts.python_version} ({facts.python})")
    table.add_row("git", facts.git or "MISSING")
    table.add_row("cmake", f"{facts.cmake_version} ({facts.cmake})" if facts.cmake else "MISSING")
    table.add_row("ninja", f"{facts.ninja_version} ({facts.ninja})" if facts.ninja else "MISSING")
    table.add_row("g++", f"{facts.gcc_version} ({facts.gcc})" if facts.gcc else "MISSING")
    table.add_row("nvcc", f"CUDA {facts.nvcc_version} ({facts.nvcc}, root {facts.cuda_home})" if facts.nvcc else "MISSING")
    table.add_row("nvcc archs", " ".join(f"sm_{a}" for a in facts.nvcc_archs) or "-")
    built = (data.get("stack") or {}).get("built", True)
    table.add_row("torch", "MISSING" if not facts.torch_version else f"{facts.torch_version} (CUDA {facts.torch_cuda})"
                  + ("" if built else " (the recipe's pin)"))
    table.add_row("cpus", f"{res['cpus']} ({res['cpus_why']})")
    table.add_row("memory", f"{res['memory_gb']:.1f} GB ({res['memory_why']})")
    for rw in p.remotes() if p else []:
        if rw.rewritten:
            table.add_row("mirror", rw.describe())
    if "cuda_toolkit" in data:
        table.add_row("CUDA toolkit", f"{data['cuda_toolkit']['source']}: {data['cuda_toolkit']['why']}")
    for dep in data.get("system", []):
        state = Text("found") if dep["ok"] else styled("MISSING", "red") + (
            f" {', '.join(dep['missing'])} (apt: {dep['apt'] or '-'}, dnf: {dep['dnf'] or '-'})")
        table.add_row("system", Text(f"{dep['name']} for {dep['needed_by'] or 'the build'}: ") + state)
    for pin in data.get("pins", []):
        if not pin["problem"]:  # a problem is listed below with the others
            table.add_row("pin", pin["line"])
    for source in data.get("sources", []):
        if source["ok"]:
            table.add_row("source", source["line"])
    for disk in data.get("disks", []):
        if disk["ok"]:  # too little is listed below with the other problems
            table.add_row("disk", disk["line"])
    if note := (data.get("stack") or {}).get("note"):
        table.add_row("build env", note)
    for warning in data.get("warnings", []):
        table.add_row(styled("warning", "yellow"), warning)
    for problem in data.get("problems", []):
        if problem not in data.get("toolchain_problems", []):
            table.add_row(styled("problem", "red"), problem)
    return table


@click.command("doctor")
@click.option("--installed", is_flag=True,
              help="Judge the sgl_kernel an interpreter would import (not imported): distribution and RECORD, CUDA "
                   "and torch it was built for, SASS/FP4 for the GPUs here or --arch, sglang's imports; the fix.")
@click.option("--python", "python", metavar="PATH", help="With --installed: that interpreter (default: this one).")
@shared_options
@offline_option
@click.pass_obj
def doctor_cmd(opts: Options, installed: bool, python: str | None) -> None:
    """What is installed: python, git, cmake, ninja, nvcc (+ archs), gcc, torch, cgroup limits; with --recipe,
    every problem its build would meet (the checks the pipeline runs first), each with its fix; with
    --installed, what is wrong with the sgl_kernel there and which recipe fixes it (exit 7)."""
    if installed:
        from build_kernel.cli.installed import doctor_installed

        doctor_installed(opts, python)
        return
    if python:
        raise click.UsageError("--python goes with --installed")

    p = opts.plan() if opts.recipe else None
    # With a recipe, the stack its build will use (its environment's torch, or its pins), not this interpreter's;
    # and every check the pipeline runs first (readiness: one owner), so doctor and a build never disagree.
    ready = readiness.check(p, offline=opts.offline) if p is not None else None
    facts = ready.stack.facts if ready is not None else toolchain.detect(sys.executable, opts.env)
    res = probe()
    data: dict[str, Any] = {"tools": facts.to_dict(), "resources": {
        "cpus": res.cpus, "cpus_why": res.cpus_why, "memory_gb": round(res.memory_gb, 2), "memory_why": res.memory_why}}
    if ready is not None:
        data.update(ready.to_dict())
    emit(opts, data, _doctor_table(facts, data, p))
    if ready is not None and ready.problems:
        sys.exit(ready.problems[0].kind.exit_code)  # as the pipeline would: the first problem's kind


COMMANDS = (recipes_group, plan_cmd, doctor_cmd)
