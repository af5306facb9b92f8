"""The resolved plan as `plan` and the pipeline's `--dry-run` print it: the answer first (what will be built, for
which GPUs, with what, how fast, where), and with `--explain` everything behind it; `--json` always has both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from build_kernel import fa3_variants, log, stack, toolchain
from build_kernel.plan import Plan
from build_kernel.recipe.load import values as recipe_values
from build_kernel.recipe.problems import _toml as toml_value
from build_kernel.series import patch_stem, pool_names


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
    from build_kernel.stages.fetch import pins

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
    names = [patch_stem(patch.name) for patch in p.series.patches]
    rows.add("series", f"{r.patches.series}/{r.patches.version}: {len(names)} patches, digest {p.series.digest[:12]}")
    for name in names:
        rows.add("", name)
    data["patches"]["left_out"] = left_out = _left_out(p)
    for name, why in left_out.items():
        rows.add("left out", f"{name}: {why}")
    kit = p.toolkit.source if p.toolkit else "not checked"
    rows.add("archs", f"{p.arch_list} (from {p.arch_source}; checked against {kit})")
    for row in data["archs"]["per_arch"]:
        parts = "".join(f", {name} {'yes' if has else 'no'}"
                        + (f" ({row['left_out'][name]} in [build.defines])" if name in row["left_out"] else "")
                        for name, has in row["parts"].items())
        rows.add("", f"{row['arch']}: loads {', '.join(row['libraries']) or 'no library a rule names'}; "
                     f"FP4 {row['fp4']}{parts}")
    if r.build.fp4 and not data["archs"]["fp4_archs"]:
        rows.add("fp4", "none of the asked archs runs FP4 kernels: this wheel is built without them")
    t = r.toolchain
    torch_from = t.torch_index or "pip's index (a release: PyPI never prunes one)"
    rows.add("toolchain", f"torch {t.torch} from {torch_from}, CUDA {t.cuda} "
                          f"({data['cuda_toolkit']['source']}: {data['cuda_toolkit']['why']}), cmake {t.cmake}")
    statuses = pinstatus.check_all(p, offline=offline)
    data["pins"] = [s.to_dict() for s in statuses]
    for pin in data["pins"]:  # one line each: can this wheel pin still be installed (index, lock, wheelhouse)
        rows.add("pin", pin["line"])
    data["locked"] = pins.locked_refs(p)  # what the lock holds for tag and branch pins: one line each
    for line in data["locked"]:
        rows.add("locked", line)
    # A toolchain that cannot be installed is the answer: said first, with its fix (`plan` exits 3).
    data["toolchain_problems"] = pinstatus.problems(p, offline=offline, statuses=statuses)
    rows.rows[:0] = [("problem", problem) for problem in data["toolchain_problems"]]
    rows.add("jobs", p.jobs.derivation)
    for warning in p.jobs.warnings:
        log.warn(warning)
        rows.add("warning", warning)
    from build_kernel.stages.builder import forecast

    data["build_time"] = took = forecast.forecast(p).to_dict()  # the progress bar's model, before the build
    rows.add("build time", took["line"])
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
    applied = {patch_stem(patch.name) for patch in p.series.patches}
    given = {patch_stem(k): v for k, v in p.recipe.patches.omitted.items()}
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
