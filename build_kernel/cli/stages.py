"""Stage commands: fetch, build, verify, publish — each runs the pipeline's own stage objects."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from build_kernel import log, stages
from build_kernel.cli.options import WHEEL, Options, emit, newest_wheel, offline_option, shared_options
from build_kernel.log import styled

if TYPE_CHECKING:
    from build_kernel.stages.verify.report import Report

# Stage modules are imported by the command that runs them: a cache-hit `build` does not
# pay for verify's ELF reader, nor `verify` for the build's.


@click.command("fetch")
@shared_options
@offline_option
@click.pass_obj
def fetch_cmd(opts: Options) -> None:
    """Fetch the pinned source and apply the patch series (cached by commit + series)."""
    from build_kernel.stages.fetch import FetchStage
    from build_kernel.stages.patch import PatchStage

    ctx = stages.run(stages.Context(opts.plan(), offline=opts.offline), [FetchStage(), PatchStage()])
    tree = ctx.tree
    assert tree is not None
    data = {"tree": str(tree.root), "project": str(tree.project), "commit": tree.commit, "cached": tree.cached,
            "patches": [s.to_dict() for s in tree.patches], "defines": tree.fetchcontent_defines()}
    emit(opts, data, f"{tree.project}  ({'cached' if tree.cached else 'new'}, {len(tree.patches)} patches)")


@click.command("build")
@shared_options
@offline_option
@click.option("--force", is_flag=True, help="Rebuild even on a cache hit.")
@click.pass_obj
def build_cmd(opts: Options, force: bool) -> None:
    """Fetch, patch and build the wheel (cached by every input), after checking everything a build needs
    (every problem at once, as `doctor --recipe` lists them)."""
    from build_kernel import readiness
    from build_kernel.stages.builder import BuildStage
    from build_kernel.stages.fetch import FetchStage
    from build_kernel.stages.patch import PatchStage

    p = opts.plan()
    readiness.require(p, offline=opts.offline)
    ctx = stages.run(stages.Context(p, offline=opts.offline, force=force), [FetchStage(), PatchStage(), BuildStage()])
    result = ctx.build
    assert result is not None
    emit(opts, result.to_dict(), f"{result.wheel}  ({'cache hit' if result.cached else 'built'}, {result.version})")


def _report_table(report: Report) -> Table:
    table = Table("check", "result")
    for lib in report.libraries:
        code = " ".join([*lib.archs, *(f"compute_{p[3:]}(PTX)" for p in lib.ptx)]) or "-"
        if not lib.applies:
            table.add_row(lib.path, f"{code}; not loaded for {' '.join(report.asked)} (rule {lib.rule})")
            continue
        jit = f"; JIT {' '.join(lib.jit)}" if lib.jit else ""
        table.add_row(lib.path, f"{code}; missing {' '.join(lib.missing) or '-'}{jit}; extra {' '.join(lib.extra) or '-'}"
                                f"{'' if lib.rule == 'default' else f' (rule {lib.rule})'}")
        if lib.fp4_matches is not None:
            table.add_row("  FP4 SASS", (", ".join(f"{k} x{v}" for k, v in lib.fp4_matches.items()) or "-")
                          + (f" ({lib.fp4_scanned})" if lib.fp4_scanned else ""))
    for name, outcome in report.imports.items():
        table.add_row(f"import {name}", outcome.splitlines()[0] if outcome else outcome)
    if report.checks.get("import", True):
        table.add_row("ops", f"found {len(report.ops_found)}, missing {', '.join(report.ops_missing) or 'none'}")
        table.add_row("gpu", json.dumps(report.gpu) if report.gpu else "not requested")
    else:
        table.add_row("import, ops, gpu", "not run (--static)")
    for w in report.warnings:
        table.add_row(styled("warning", "yellow"), w)
    for f in report.failures:
        table.add_row(styled("FAIL", "red"), f)
    verdict = styled("passed", "green") if report.passed else styled("failed", "red")
    if report.passed and not report.checks.get("import", True):
        # Device code only: a wheel that links another CUDA passed that much, and no more.
        wrong = [w for w in report.warnings if "it will not load on" in w]
        verdict = (styled(f"device code passed (--static), but it will not load with this recipe: "
                          f"{wrong[0].split(';')[0]}", "yellow") if wrong
                   else styled("device code passed (--static: not imported)", "green"))
    table.add_row("result", verdict + " (recorded earlier; --recheck runs the checks)" if report.from_record else verdict)
    return table


@click.command("verify")
@click.argument("wheel", required=False, type=WHEEL)
@shared_options
@click.option("--gpu-check", default="", metavar="MODULE:FUNC", help="GPU check to run when a GPU of a built arch is present.")
@click.option("--recheck", is_flag=True, help="Run the checks even when the wheel's record already matches.")
@click.option("--static", "static", is_flag=True,
              help="Device code only (archs, PTX, FP4 SASS), no import: a wheel for another torch/CUDA, a host without torch.")
@click.option("--counts", is_flag=True,
              help="Whole FP4 opcode counts: every cubin of the asked archs disassembled (the verdict needs only the "
                   "first FP4 instruction).")
@click.option("--rebuild", is_flag=True,
              help="Build WHEEL again from its own provenance (recipe, commit, series, archs) in a fresh folder and "
                   "compare the bytes: identical, or which members (and ELF sections) differ.")
@click.option("--rebuild-in", "rebuild_in", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="With --rebuild: the folder to rebuild in, kept (default: a new temporary folder, removed when the "
                   "wheels are identical).")
@click.pass_obj
def verify_cmd(opts: Options, wheel: Path | None, gpu_check: str, recheck: bool, static: bool, counts: bool,
               rebuild: bool, rebuild_in: Path | None) -> None:
    """Check a wheel: cubin/PTX archs per library, FP4 SASS, clean import, ops, GPU run (build env's python)."""
    from build_kernel.stages.verify import VerifyStage

    if rebuild or rebuild_in:
        _rebuild(opts, wheel, rebuild_in)
        return
    p = opts.plan()
    stage = VerifyStage(gpu_check=gpu_check, recheck=recheck, raise_on_failure=False, static=static, counts=counts)
    ctx = stages.Context(p, wheels=[wheel or newest_wheel(p)])
    stages.run(ctx, [stage])
    report = stage.reports[0]
    emit(opts, report.to_dict(), _report_table(report))
    if not report.passed:
        sys.exit(7)


def _rebuild(opts: Options, wheel: Path | None, folder: Path | None) -> None:
    """`verify --rebuild`: the plan the wheel's provenance names, in a fresh folder; a VerifyError when bytes differ."""
    import dataclasses
    import tempfile

    from build_kernel.errors import VerifyError
    from build_kernel.stages.verify import rebuild

    if wheel is None:
        raise click.UsageError("verify --rebuild needs the WHEEL to rebuild: build-kernel verify --rebuild PATH.whl")
    said = rebuild.of(wheel)
    root = (folder or Path(tempfile.mkdtemp(prefix="build-kernel-rebuild-"))).absolute()
    p = dataclasses.replace(opts, recipe=opts.recipe or said["recipe"], arch=";".join(said["archs"]),
                            cache_dir=root / "cache", output_dir=root / "wheels").plan()
    result = rebuild.rebuild(wheel, p, said, keep=folder is not None, offline=opts.offline)
    table = Table("member", "difference", "ELF sections that differ")
    for d in result.differences:
        table.add_row(d.member, d.what, ", ".join(d.sections) or "-")
    if result.identical:
        table.add_row("(all)", styled(f"identical: {result.rebuilt.name} rebuilt in {result.folder}", "green"), "-")
    emit(opts, result.to_dict(), table)
    rebuild.clean(result)
    if not result.identical and opts.json:
        sys.exit(VerifyError.exit_code)  # the one JSON document says it (`identical`, `differences`)
    if not result.identical:
        raise VerifyError(f"{wheel.name} is not reproduced: {len(result.differences)} member(s) differ from the "
                          f"rebuild {result.rebuilt}",
                          hint="see the table above: the named sections say where (paths, times, a build ID)")


@click.command("publish")
@click.argument("wheels", nargs=-1, type=WHEEL)
@shared_options
@click.option("--to", "to", metavar="NAME|URL|PATH",
              help="Index name ([publish.targets], indexes.toml or ~/.pypirc), upload URL, or static folder "
                   "(default: the recipe's [publish] target).")
@click.option("--install-url", metavar="URL", help="Simple URL to install back from (default: <upload URL>/simple/).")
@click.option("--skip-existing", is_flag=True, help="A file already on the index is skipped (still installed back).")
@click.option("--force", is_flag=True, help="Publish even without a passing verification record (loud warning).")
@click.option("--find-links", "find_links", metavar="DIR|URL", multiple=True,
              help="A wheelhouse the install-back may take the wheel's torch from, besides the target (repeatable).")
@click.pass_obj
def publish_cmd(opts: Options, wheels: tuple[Path, ...], to: str | None, install_url: str | None,
                skip_existing: bool, force: bool, find_links: tuple[str, ...]) -> None:
    """Upload verified wheels to an index or a static folder, then install them back and import them."""
    from build_kernel.stages import publish
    from build_kernel.stages.publish.stage import PublishStage

    if not opts.recipe:
        if not wheels:
            raise click.UsageError("nothing to publish: pass WHEEL… or --recipe NAME")
        # No recipe: this interpreter installs back, and the wheels' own top-level modules are imported.
        target = publish.resolve_target(to, None, env=opts.env, install_url=install_url)
        with log.step(f"publish {len(wheels)} wheel(s) to {target.label}"):
            result = publish.publish(list(wheels), target, skip_existing=skip_existing, force=force,
                                     import_modules=None, python=sys.executable, env=opts.env, log_path=None,
                                     find_links=find_links)
        emit(opts, result.to_dict(), publish.render(result))
        return
    p = opts.plan()
    stage = PublishStage(to=to, install_url=install_url, skip_existing=skip_existing, force=force, in_pipeline=False,
                         find_links=find_links)
    stages.run(stages.Context(p, wheels=list(wheels) or [newest_wheel(p)]), [stage])
    emit(opts, stage.result.to_dict(), publish.render(stage.result))


COMMANDS = (fetch_cmd, build_cmd, verify_cmd, publish_cmd)
