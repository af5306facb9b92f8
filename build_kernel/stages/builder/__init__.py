"""Build: a stamped, provenance-carrying wheel from the patched tree, cached by its inputs.

`python -m build --wheel --no-isolation` (scikit-build-core) runs in the build environment
(buildenv) with the chosen CUDA toolkit (toolkit, cudawheels), resuming after OOM kills
(runner); the wheel gets its provenance (provenance) and is kept by its inputs (cache).
"""

from __future__ import annotations

import datetime as dt
import resource
import shutil
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from build_kernel import compile_cache, cuda_driver, host_compiler, log, toolchain
from build_kernel.plan import Plan
from build_kernel.stages import Context, Done
from build_kernel.stages.builder import (
    backends,
    cache,
    devrelease,
    key_history,
    provenance,
    reproducible,
    runner,
    scheduling,
    system_deps,
    toolkit,
    trace,
)
from build_kernel.stages.builder.cache import BuildResult
from build_kernel.stages.fetch.workspace import Tree

__all__ = ["BuildResult", "BuildStage", "build"]


def _children_cpu() -> float:
    """User + system CPU seconds of every finished descendant (compilers included: each waits
    for its own children, so their time rolls up)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_env(plan: Plan, selected: toolkit.Selected, tree: Tree, jobs: int, work: Path,
                cache_env: Mapping[str, str] | None = None, *, host_maps: bool = True) -> dict[str, str]:
    """The build's environment: the plan's, the toolkit's, the job count, the compile cache's, the recipe's, and
    last what makes its output independent of the time and the folders it runs in (reproducible.py)."""
    facts = selected.facts
    env = selected.environ(plan.env)
    env.update(plan.build_env())
    env.update(plan.jobs_env(jobs))
    env["SOURCE_DATE_EPOCH"] = str(reproducible.epoch(tree.root, tree.commit))
    env["PATH"] = ":".join([str(Path(facts.python).parent), *([str(Path(facts.nvcc).parent)] if facts.nvcc else []),
                            env.get("PATH", "")])
    if facts.cuda_home:
        env["CUDA_HOME"] = facts.cuda_home
    if facts.cmake_version and Version(facts.cmake_version).major >= 4:
        # Old dependencies declare cmake_minimum_required below 3.5, which CMake 4 refuses.
        env["CMAKE_POLICY_VERSION_MINIMUM"] = "3.5"
    env.update(cache_env or {})
    env.update(plan.recipe.build.env)
    env.update(reproducible.flags(reproducible.prefix_maps(work, plan.cache_dir), env, host=host_maps))
    return env


def _preflight(plan: Plan, selected: toolkit.Selected, defines: Mapping[str, str]) -> host_compiler.Resolution:
    """Every check that needs no compile of the project's own, before configure; the linkers to use."""
    facts, environ = selected.facts, selected.environ(plan.env)
    toolchain.require(toolchain.preflight(facts, plan.archs, cmake_spec=plan.recipe.toolchain.cmake,
                                          want_cuda=plan.recipe.toolchain.cuda))
    flags = {**environ, **plan.build_env(), **plan.recipe.build.env}  # the recipe may set CXX or LDFLAGS too
    # Every compiler that links a library links libstdc++ shared, as torch's, or the build stops here.
    linkers = host_compiler.resolve(plan.recipe.toolchain.host_compiler, flags, defines, facts.nvcc)
    toolchain.require(linkers.problems)
    for line in linkers.why:
        log.info(line)
    host = linkers.chosen or next((lk.path for lk in linkers.linkers if lk.role == host_compiler.CUDA_ROLE), None)
    problem = host_compiler.check_host_compiler(facts.nvcc, host, env=environ) if facts.nvcc else None
    toolchain.require([problem] if problem else [])
    # Before configure: CMake would stop on it minutes in (mscclpp: "Could NOT find NUMA").
    toolchain.require(system_deps.problems(plan.recipe.system, environ))
    return linkers


def build(plan: Plan, tree: Tree, python: str, *, force: bool = False, offline: bool = False) -> BuildResult:
    """Build (or take from the cache) the wheel for this plan."""
    selected = toolkit.select(plan, python, offline=offline)
    toolchain.require(toolchain.preflight(selected.facts, plan.archs, cmake_spec=plan.recipe.toolchain.cmake,
                                          want_cuda=plan.recipe.toolchain.cuda, series=plan.series,
                                          commit=plan.recipe.source.commit))
    # The recipe's own defines last: a define the recipe sets by hand wins over what [build] fa3 sets.
    defines = {**toolkit.cmake_defines(selected), **tree.fetchcontent_defines(), **plan.fa3.defines(),
               **plan.recipe.build.defines}
    key_inputs = cache.inputs(plan, selected.facts, tree, defines, selected.toolkit)
    key = cache.digest(key_inputs)
    log_path = plan.cache_dir / "logs" / f"{plan.recipe.name}-{key}.log"
    if not force and (hit := cache.lookup(plan, key, log_path)) is not None:
        log.info(f"cache hit {key}: {hit.wheel.name}")
        # A wheel cached before wheels declared their torch gets the declaration (repacked, not rebuilt).
        cached = cache.entry(plan, key) / hit.wheel.name
        if (declared := provenance.redeclared(cached, python, cache.work_dir(plan, key) / "declare", log_path,
                                              epoch=reproducible.epoch(tree.root, tree.commit))):
            hit.wheel = cache.deliver(plan, cache.store(plan, key, declared, hit.provenance))
            log.info(f"{hit.wheel.name}: cached before wheels declared their torch; Requires-Dist added")
        provenance.write_beside(hit.wheel, hit.provenance)
        return hit
    work = cache.work_dir(plan, key)
    if line := key_history.changed_since(work.parent, work, plan.recipe.name, plan.arch_list, key_inputs):
        log.info(line)
    key_history.record(work, plan.recipe.name, plan.arch_list, key_inputs)
    linkers = _preflight(plan, selected, defines)  # the host compiler matters only when compiling
    defines = {**defines, **linkers.defines}
    # After the key, as the launcher: what the link resolves the driver to is not in the wheel.
    nvidia = Path(selected.facts.torch_nvidia_dir) if selected.facts.torch_nvidia_dir else None
    link = cuda_driver.for_link(plan.cache_dir, toolkit.roots(selected), defines, env=selected.environ(plan.env),
                                torch_nvidia=nvidia)
    for line in link.why:
        log.info(line)
    session = compile_cache.open_session(plan, python, log_path)
    try:
        # After the key: a launcher changes how objects are made, not what they are.
        return _compile(plan, tree, python, selected, _reproducible(plan, key, {**defines, **link.defines,
                                                                                **session.cmake_defines()}), key,
                        log_path, force=force, launcher=session, link_env={**link.env, **linkers.env},
                        linkers=linkers)
    finally:
        session.close()


def _reproducible(plan: Plan, key: str, defines: Mapping[str, str]) -> dict[str, str]:
    """`defines` with nvcc_paths in front of the CUDA launcher (the compile cache's, if any): nvcc's output then
    names no folder of this build (reproducible.py). Both backends take it from here (setuptools: PYTORCH_NVCC).
    CMake links with the install RPATH at once: the build tree's RPATH (the driver stub's folder) would be
    blanked at install, but the GNU build ID, computed at link, would still hash it."""
    name = "CMAKE_CUDA_COMPILER_LAUNCHER"
    maps = reproducible.prefix_maps(cache.work_dir(plan, key), plan.cache_dir)
    return {"CMAKE_BUILD_WITH_INSTALL_RPATH": "ON", **defines,
            name: reproducible.cuda_launcher(sys.executable, maps, defines.get(name, ""))}


def _compile(plan: Plan, tree: Tree, python: str, selected: toolkit.Selected, defines: Mapping[str, str], key: str,
             log_path: Path, *, force: bool, launcher: compile_cache.Session | None = None,
             link_env: Mapping[str, str] | None = None,
             linkers: host_compiler.Resolution | None = None) -> BuildResult:
    work = cache.work_dir(plan, key)
    backend = backends.for_plan(plan)
    src, dist = work / "src", work / "dist"
    if force:
        # The sources are copied with their timestamps: only a fresh build folder recompiles.
        shutil.rmtree(work / "cmake", ignore_errors=True)
        for folder in backend.kept(src):
            shutil.rmtree(folder, ignore_errors=True)
    # A backend whose objects live inside the source copy (setuptools' build/) keeps them across it.
    backends.keep_across_copy(backend.kept(src), work / "kept", restore=False)
    for folder in (src, dist):
        shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(tree.project, src, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    backends.keep_across_copy(backend.kept(src), work / "kept", restore=True)
    base = devrelease.stamp(backend.read_version(src), plan.version_dev)
    version = f"{base}+{provenance.local_label(plan, selected.facts, tree)}"
    backend.stamp_version(src, version)
    # Chosen first: under the jobserver a backend's ninja wrapper leaves out the caller's -j.
    sched = scheduling.choose(plan, selected.facts.ninja_version, work, scheduling.strip_roots(src, defines))
    how = backend.invocation(plan, python, sys.executable, selected.facts.ninja, work, src, dist, defines,
                             selected.facts.nvcc, jobserver=sched.governor is not None)
    for note in how.notes:
        log.info(note)
    defines = how.defines
    cmd = how.cmd
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Appended, not rewritten: a build resumed in the same folder (after an interruption) keeps
    # the story of the earlier attempts.
    with log_path.open("a") as fh:
        fh.write(f"# build-kernel {plan.recipe.name} key {key} at {dt.datetime.now(dt.timezone.utc).isoformat()}\n"
                 f"# {plan.jobs.derivation}\n# {sched.why}\n")
    started, t0, cpu0 = dt.datetime.now(dt.timezone.utc), time.monotonic(), _children_cpu()
    cache_env = {**(link_env or {}), **(launcher.env if launcher else {}), **how.env}
    host_maps = not launcher or launcher.tool != "sccache"
    if not host_maps:
        log.info("reproducible: host compiles keep their folders (sccache hashes -ffile-prefix-map's paths and would "
                 "miss across folders): the wheel is the same bytes when rebuilt in the same folder")

    def env_for(jobs: int, sched_env: Mapping[str, str]) -> dict[str, str]:
        env = {**compile_env(plan, selected, tree, jobs, work, cache_env, host_maps=host_maps), **sched_env}
        env["PATH"] = ":".join([*how.path_first, env.get("PATH", "")])
        return env

    def timeline() -> Path | None:
        return trace.leave(scheduling.db_path(plan), project=scheduling.plan_project(plan), since=started.timestamp(),
                           folder=work, path=log_path.with_suffix(".trace.json"), name=f"{plan.recipe.name} {key}")

    try:
        with scheduling.running(sched) as sched_env:
            attempts = runner.build_with_retries(
                cmd, lambda jobs: env_for(jobs, sched_env), cwd=work,
                log_path=log_path, jobs=plan.jobs.jobs, max_oom_retries=plan.recipe.build.max_oom_retries,
                eta=scheduling.eta(plan, sched.tus, plan.jobs.jobs, work) if any(t.wall_s for t in sched.tus) else None)
    except Exception:
        if (failed := timeline()) is not None:  # a failed build's timeline (an OOM kill's) is the one most wanted
            log.info(f"compile timeline: {failed} (Perfetto, chrome://tracing)")
        raise
    traced = timeline()
    [wheel] = list(dist.glob("*.whl"))
    backends.check_version(wheel, version)
    if (cache_stats := launcher.stats() if launcher else None) is not None:
        log.info(cache_stats.summary())
    record: dict[str, Any] = {
        "tool": "build-kernel", "recipe": plan.recipe.name, "recipe_digest": plan.recipe.digest,
        "version": version, "repo": plan.recipe.source.repo, "commit": tree.commit, "subdir": plan.recipe.source.subdir,
        "patch_series": f"{plan.recipe.patches.series}/{plan.recipe.patches.version}", "series_digest": tree.series_digest,
        "patches": {p.name: p.sha256 for p in plan.series.patches},
        "toolchain": provenance.toolchain_record(selected.facts, selected.source, selected.why,
                                                 selected.toolkit.packages if selected.toolkit else None),
        "backend": backend.name, "torch": selected.facts.torch_version,
        "archs": [a.torch for a in plan.archs], "defines": dict(defines), "jobs": attempts.jobs,
        "oom_kills": attempts.oom_kills, "job_derivation": plan.jobs.derivation, "scheduler": sched.why, "key": key,
        "host_compiler": linkers.to_dict() if linkers else None,
        "compile_cache": provenance.compile_cache_record(launcher.tool if launcher else "none", cache_stats),
        "start": started.isoformat(), "end": dt.datetime.now(dt.timezone.utc).isoformat(),
        "seconds": round(time.monotonic() - t0, 1),
        "cpu_seconds": round(_children_cpu() - cpu0, 1),  # frontend, cmake, ninja, every compiler
        "host": socket.gethostname(), "folders": {"work": str(work), "cache": str(plan.cache_dir),
                                                  "output": str(plan.output_dir)},
        # What identifies the inputs goes in the wheel, the rest of this record beside it (provenance.split).
        "recipe_defines": {**plan.fa3.defines(), **plan.recipe.build.defines},
    }
    packed = provenance.inject(wheel, python, record, work, log_path, epoch=reproducible.epoch(tree.root, tree.commit))
    out = cache.deliver(plan, cache.store(plan, key, packed, record))
    provenance.write_beside(out, record)
    if traced is not None:
        log.info(f"compile timeline: {traced} (Perfetto, chrome://tracing)")
    return BuildResult(out, version, False, key, log_path, attempts.jobs, attempts.oom_kills, record)


class BuildStage:
    name = "build"

    def skip(self, ctx: Context) -> str | None:
        return None

    def title(self, ctx: Context) -> str:
        return f"build {ctx.plan.arch_list} with {ctx.plan.jobs.jobs} job(s)"

    def run(self, ctx: Context) -> Done:
        if ctx.tree is None:
            from build_kernel.errors import BuildError

            raise BuildError("no source tree to build", hint="run the fetch stage first")
        toolchain = ctx.plan.recipe.toolchain
        if toolchain.cuda_source != "system" and toolchain.cuda:
            # Before the build environment: it installs torch (GBs), the toolkit would then stop the build.
            from build_kernel.stages.builder import cudawheels

            cudawheels.require_wheels_for(toolchain.cuda, toolchain.cuda_source, ctx.plan.env)
        python = ctx.build_python()
        log.info(ctx.plan.jobs.derivation)
        for warning in ctx.plan.jobs.warnings:
            log.warn(warning)
        result = build(ctx.plan, ctx.tree, python, force=ctx.force, offline=ctx.offline)
        ctx.build, ctx.wheels = result, [result.wheel]
        return Done("cached" if result.cached else "done", result.to_dict())
