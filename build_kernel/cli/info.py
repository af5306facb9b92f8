"""Commands that only read: recipes, plan, doctor."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from build_kernel import fa3_variants, host_compiler, log, recipe, stack, toolchain
from build_kernel.cli.options import Options, emit, offline_option, shared_options
from build_kernel.errors import BuildKernelError
from build_kernel.log import styled
from build_kernel.plan import Plan, recipe_search_path
from build_kernel.recipe.load import values as recipe_values
from build_kernel.recipe.problems import _toml as toml_value
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


def _toolkit(p: Plan) -> tuple[dict[str, str | None], toolchain.Facts]:
    """Which nvcc the build would use, and why, without installing anything (and what else is there)."""
    from build_kernel.stages.builder import toolkit

    found = stack.resolve(p)
    return toolkit.describe(p, found.facts, python_exists=found.built), found.facts


def _scheduling(p: Plan, ninja_version: str | None) -> dict[str, Any]:
    """The scheduler in effect, where each per-TU memory prediction comes from (the recorded profile,
    or the built-in default), and what orders build.ninja's compiles."""
    from build_kernel.stages.builder import jobserver, ninja_order, planner, scheduling

    default = scheduling.default_bytes(p)
    tus = planner.plan_tus(scheduling.db_path(p), default, shipped=scheduling.shipped_tus(p),
                           project=scheduling.plan_project(p))
    name, where = scheduling.setting(p)
    effect = name if name != "auto" else "governor" if jobserver.supports_jobserver(ninja_version) else "static"
    shipped = Path(p.recipe.build.order_profile) if p.recipe.build.order_profile else None
    order = ninja_order.preview(ninja_order.predictions(scheduling.db_path(p), shipped, [],
                                                        project=scheduling.plan_project(p)))
    return {"scheduler": name, "scheduler_from": where, "in_effect": effect, "ninja": ninja_version,
            "profile": str(scheduling.db_path(p)) if p.recipe.build.profile else None,
            "default_gb": round(default / 1024**3, 2), "order": order,
            "tus": [{"source": t.source, "peak_gb": round(t.peak_bytes / 1024**3, 2), "wall_s": t.wall_s,
                     "from": f"{t.how}, {t.runs} run(s)" if t.runs else t.how} for t in planner.heaviest_first(tus)]}


def _order_row(order: dict[str, Any]) -> str:
    if order["source"] == "none":
        return "CMake's (no recorded profile, no [build] order_profile)"
    first = ", ".join(f"{e['source']} {e['seconds']:g} s" for e in order["first"])
    return f"longest first by the {order['source']}{' ' + order['file'] if order['file'] else ''}: {first}, ..."


def describe_plan(p: Plan, *, explain: bool = False, offline: bool = False) -> tuple[dict[str, Any], str]:
    """The resolved plan as `plan` prints it (JSON data, text); reads only, installs nothing (the pipeline's
    dry run prints the same). The answer comes first, in a screen: what will be built, for which GPUs, with
    what, how fast and where. `explain` adds where each value came from and every value behind the answer
    (the JSON always has both)."""
    from build_kernel.stages.builder import pinstatus

    data = p.to_dict()
    data["cuda_toolkit"], facts = _toolkit(p)
    if warning := stack.series_warning(p):
        log.warn(warning)  # a recipe may pair a series with a commit on purpose: said, not refused
        data["warnings"] = [warning]
    r, rows = p.recipe, _Rows()
    rows.add("recipe", f"{r.name}: {r.description}" if r.description else r.name)
    rows.add("source", f"{r.source.repo} @ {r.source.commit}" + (f" ({r.source.ref})" if r.source.ref else "")
             + (f", folder {r.source.subdir}" if r.source.subdir else ""))
    for rw in p.remotes():
        if rw.rewritten:
            rows.add("mirror", rw.describe())
    names = [patch.name.removesuffix(".patch") for patch in p.series.patches]
    rows.add("series", f"{r.patches.series}/{r.patches.version}: {len(names)} patches, digest {p.series.digest[:12]}")
    for name in names:
        rows.add("", name)
    data["patches"]["left_out"] = left_out = _left_out(p)
    for name, why in left_out.items():
        rows.add("left out", f"{name}: {why}")
    kit = p.toolkit.source if p.toolkit else "not checked"
    rows.add("archs", f"{p.arch_list} (from {p.arch_source}; checked against {kit})")
    for row in data["archs"]["per_arch"]:
        parts = "".join(f", {name} {'yes' if has else 'no'}" for name, has in row["parts"].items())
        rows.add("", f"{row['arch']}: loads {', '.join(row['libraries']) or 'no library a rule names'}; "
                     f"FP4 {row['fp4']}{parts}")
    if r.build.fp4 and not data["archs"]["fp4_archs"]:
        rows.add("fp4", "none of the asked archs runs FP4 kernels: this wheel is built without them")
    t = r.toolchain
    rows.add("toolchain", f"torch {t.torch}{f' from {t.torch_index}' if t.torch_index else ''}, CUDA {t.cuda} "
                          f"({data['cuda_toolkit']['source']}: {data['cuda_toolkit']['why']}), cmake {t.cmake}")
    data["pins"] = [s.to_dict() for s in pinstatus.check_all(p, offline=offline)]
    for pin in data["pins"]:  # one line each: can this wheel pin still be installed (index, lock, wheelhouse)
        rows.add("pin", pin["line"])
    rows.add("jobs", p.jobs.derivation)
    for warning in p.jobs.warnings:
        log.warn(warning)
        rows.add("warning", warning)
    # Only where there is an FA3 choice: a recipe that makes one, or a series that reads it (sgl-kernel's);
    # another package's plan (flash-attn 2) has no such kernels to list.
    if r.build.fa3 != "all" or fa3_variants.series_reads_choice([patch.path for patch in p.series.patches]):
        asked = any(a.major == 9 for a in p.archs)  # FA3 compiles for 9.0a only: otherwise only why not
        rows.add("fa3", f"head dims {', '.join(p.fa3.head_dims)}; dtypes {', '.join(p.fa3.dtypes)}; softcap "
                        f"{'on' if p.fa3.softcap else 'off'} ({p.fa3.why})" if asked else p.fa3.why)
    data["scheduling"] = sched = _scheduling(p, facts.ninja_version)
    rows.add("scheduler", f"{sched['in_effect']} ({sched['scheduler']}: {sched['scheduler_from']}; "
                          f"ninja {sched['ninja'] or 'none'})")
    rows.add("compile order", _order_row(sched["order"]))
    if sched["tus"]:
        top = sched["tus"][0]
        rows.add("TU memory", f"heaviest {top['source']} {top['peak_gb']} GB ({top['from']}); {len(sched['tus'])} TUs "
                              f"known, any other {sched['default_gb']:g} GB")
    else:
        rows.add("TU memory", f"{sched['default_gb']:g} GB a TU (default: job_memory_gb x archs in flight)")
    if r.serve.model:
        from build_kernel.stages.serve import sglang_dist

        data["serve"]["sglang"] = sglang = sglang_dist.choose(p).to_dict()
        rows.add("serve", f"{r.serve.model} with {sglang['describe']}")
    rows.add("cache", str(p.cache_dir))
    rows.add("wheels", str(p.output_dir))
    from build_kernel import stages

    rows.add("stages", " -> ".join(stage.name for stage in stages.pipeline()))
    if explain:
        _explain(p, data, rows)
    else:
        rows.add("", "(--explain: where each value came from, each patch's sha256, env and defines, each TU's memory)")
    return data, rows.text()


class _Rows:
    """`key  value` lines, the key column as wide as the widest key: plain text, never markup (log.py)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []

    def add(self, key: str, value: str) -> None:
        self.rows.append((key, value))

    def text(self) -> str:
        width = max(len(k) for k, _ in self.rows)
        return "\n".join(f"{k:<{width}}  {v}".rstrip() for k, v in self.rows)


def _left_out(p: Plan) -> dict[str, str]:
    """Patches of the series that this version does not apply, each with the recipe's reason."""
    from build_kernel.series import pool_names

    applied = {patch.name.removesuffix(".patch") for patch in p.series.patches}
    given = {k.removesuffix(".patch"): v for k, v in p.recipe.patches.omitted.items()}
    missing = sorted(pool_names(p.series.directory) - applied)
    return {name: given.get(name, "no reason given (say why in [patches] omitted)") for name in missing}


def _explain(p: Plan, data: dict[str, Any], rows: _Rows) -> None:
    """Everything behind the answer: origins (file:line), patch hashes, env and defines, per-TU memory."""
    set_values = recipe_values(p.recipe.raw)
    for key, where in p.recipe.origins.items():  # every value with the file and line that set it
        if key in set_values and key != "extends":
            rows.add("from", f"{key} = {toml_value(set_values[key])}  ({where})")
    for patch in p.series.patches:
        rows.add("patch", f"{patch.name}  sha256:{patch.sha256}")
    defines = {**p.fa3.defines(), **p.recipe.build.defines}
    for key, value in {**p.build_env(), **{f"-D{k}": v for k, v in defines.items()}}.items():
        rows.add("env" if not key.startswith("-D") else "define", f"{key}={value}")
    for tu in data["scheduling"]["tus"]:
        rows.add("TU memory", f"{tu['source']}: {tu['peak_gb']} GB ({tu['from']})")
    rows.add("TU memory", f"any other TU: {data['scheduling']['default_gb']:g} GB (default: job_memory_gb x archs in flight)")


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
    emit(opts, *describe_plan(opts.plan(), explain=explain, offline=opts.offline))


def _doctor_table(facts: toolchain.Facts, data: dict[str, Any], p: Plan | None) -> Table:
    res = data["resources"]
    table = Table("tool", "found", show_header=False)
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
    if note := (data.get("stack") or {}).get("note"):
        table.add_row("build env", note)
    for warning in data.get("warnings", []):
        table.add_row(styled("warning", "yellow"), warning)
    for problem in data.get("problems", []):
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
    """What is installed: python, git, cmake, ninja, nvcc (+ archs), gcc, torch, cgroup limits;
    with --installed, what is wrong with the sgl_kernel there and which recipe fixes it (exit 7)."""
    from build_kernel.stages.builder import system_deps, toolkit

    if installed:
        from build_kernel.cli.installed import doctor_installed

        doctor_installed(opts, python)
        return
    if python:
        raise click.UsageError("--python goes with --installed")

    p = opts.plan() if opts.recipe else None
    # With a recipe, the stack its build will use (its environment's torch, or its pins), not this interpreter's.
    found = stack.resolve(p) if p is not None else None
    facts = found.facts if found is not None else toolchain.detect(sys.executable, opts.env)
    res = probe()
    data: dict[str, Any] = {"tools": facts.to_dict(), "resources": {
        "cpus": res.cpus, "cpus_why": res.cpus_why, "memory_gb": round(res.memory_gb, 2), "memory_why": res.memory_why}}
    if p is not None and found is not None:
        data["stack"] = found.to_dict()
        data["problems"] = toolchain.preflight(facts, p.archs, cmake_spec=p.recipe.toolchain.cmake,
                                               want_cuda=p.recipe.toolchain.cuda, series=p.series,
                                               commit=p.recipe.source.commit)
        if warning := stack.series_warning(p):
            data["warnings"] = [warning]
        data["cuda_toolkit"] = toolkit.describe(p, facts)
        if data["cuda_toolkit"]["source"] == "none":
            data["problems"].append(data["cuda_toolkit"]["why"])
        elif data["cuda_toolkit"]["source"] == "wheels":
            # The wheels replace the system nvcc: its problems are not the build's.
            data["problems"] = [x for x in data["problems"] if not x.startswith("nvcc")]
        env = {**p.env, **p.build_env()}  # what the build's CMake would read
        linkers = host_compiler.resolve(p.recipe.toolchain.host_compiler, {**env, **p.recipe.build.env},
                                        p.recipe.build.defines, facts.nvcc)
        data["host_compiler"] = linkers.to_dict()
        data["problems"] += linkers.problems
        system = system_deps.check(p.recipe.system, opts.env)
        data["system"] = [st.to_dict() for st in system]
        data["problems"] += [st.problem() for st in system if not st.ok]
        data["mirrors"] = [rw.to_dict() for rw in p.remotes() if rw.rewritten]
        from build_kernel.stages.builder import pinstatus

        pins = pinstatus.check_all(p, offline=opts.offline)
        data["pins"] = [s.to_dict() for s in pins]
        data["problems"] += [s.line for s in pins if s.problem]
    emit(opts, data, _doctor_table(facts, data, p))
    if data.get("problems"):
        sys.exit(3)


COMMANDS = (recipes_group, plan_cmd, doctor_cmd)
