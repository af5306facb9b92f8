"""Build: a stamped, provenance-carrying wheel from the patched tree, cached by its inputs.

The wheel is built by `python -m build --wheel --no-isolation` (scikit-build-core) in the
build environment, in a persistent CMake build folder: when the OOM killer takes a
compile, the same command runs again with fewer jobs and ninja rebuilds only what is
missing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git
from packaging.version import Version

from build_kernel import log, static_index, toolchain
from build_kernel.errors import BuildError
from build_kernel.plan import Plan
from build_kernel.stages.build import cudawheels
from build_kernel.stages.fetch.workspace import Tree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROVENANCE = "build_kernel_provenance.json"
# What a compile killed by the kernel's OOM killer leaves in the log.
OOM_PATTERNS = (
    re.compile(r"Killed signal terminated program (\S+)"),
    re.compile(r"'(cicc|ptxas|cudafe\+\+|nvlink|fatbinary)' died due to signal 9"),
    re.compile(r"died due to signal 9 \(Kill signal\)"),
    re.compile(r"internal compiler error: Killed"),
)
NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
ERROR_LINE = re.compile(r"(error:|error :|fatal error|CMake Error|Error:|nvcc fatal)", re.IGNORECASE)


@dataclass
class BuildResult:
    wheel: Path
    version: str
    cached: bool
    key: str
    log: Path
    jobs: list[int] = field(default_factory=list)
    oom_kills: int = 0
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda_home(self) -> str | None:
        home = self.provenance.get("toolchain", {}).get("cuda_home")
        return str(home) if home else None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["wheel"], data["log"] = str(self.wheel), str(self.log)
        return data


def local_label(plan: Plan, facts: toolchain.Facts, tree: Tree) -> str:
    """PEP 440 local label: CUDA, torch, archs, commit, patch-series digest."""
    cuda = (facts.torch_cuda or plan.recipe.toolchain.cuda or "0").replace(".", "")
    torch_mm = ".".join((facts.torch_version or "0.0").split("+")[0].split(".")[:2])
    archs = ".".join(a.sm.replace("_", "") for a in plan.archs)
    return f"cu{cuda}.torch{torch_mm}.{archs}.g{tree.commit[:7]}.p{tree.series_digest[:6]}"


def read_version(pyproject: Path) -> str:
    data = tomllib.loads(pyproject.read_text())
    version = data.get("project", {}).get("version")
    if not version:
        raise BuildError(f"{pyproject} has no static [project] version", hint="the recipe needs a project with a static version to stamp")
    return str(version)


def stamp_version(pyproject: Path, version: str) -> None:
    """Rewrite [project] version in place so METADATA, file name and pip agree."""
    text = pyproject.read_text()
    section = re.search(r"(?ms)^\[project\]\s*$(.*?)(?=^\[|\Z)", text)
    if not section:
        raise BuildError(f"{pyproject}: no [project] table to stamp")
    body = re.sub(r'(?m)^(version\s*=\s*)["\'][^"\']*["\']', lambda m: f'{m.group(1)}"{version}"', section.group(1), count=1)
    pyproject.write_text(text[: section.start(1)] + body + text[section.end(1):])


def cache_key(plan: Plan, facts: toolchain.Facts, tree: Tree, defines: dict[str, str],
              toolkit: cudawheels.Toolkit | None = None) -> str:
    """Every input that changes the wheel; the same key returns the cached wheel."""
    inputs = {
        "recipe": plan.recipe.digest, "commit": tree.commit, "series": tree.series_digest,
        "archs": plan.arch_list, "defines": {k: v for k, v in defines.items() if "FETCHCONTENT_SOURCE_DIR" not in k},
        "deps": {n: git.Repo(p).head.commit.hexsha if (p / ".git").exists() else str(p) for n, p in tree.dep_dirs.items()},
        "tools": {k: getattr(facts, k) for k in ("nvcc_version", "torch_version", "torch_cuda", "cmake_version",
                                                  "ninja_version", "gcc_version", "python_version")},
        "env": plan.recipe.build.env,
        "toolkit": dict(toolkit.packages) if toolkit else None,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:20]


def select_toolkit(plan: Plan, python: str, *, offline: bool = False
                   ) -> tuple[toolchain.Facts, cudawheels.Toolkit | None, str]:
    """The system toolkit or one assembled from PyPI wheels ([toolchain] cuda_source)."""
    facts = toolchain.detect(python)
    t = plan.recipe.toolchain
    cuda = facts.torch_cuda or t.cuda
    source, why = cudawheels.choose(t.cuda_source, facts, cuda, plan.archs)
    log.info(f"CUDA toolkit: {why}")
    if source == "system":
        return facts, None, why
    with log.step(f"CUDA {cuda} toolkit from PyPI wheels"):
        tk = cudawheels.ensure_toolkit(plan.cache_dir, cuda, python=python, offline=offline)
    return toolchain.detect(python, env=tk.environ()), tk, why


def build_defines(plan: Plan, facts: toolchain.Facts, tree: Tree,
                  toolkit: cudawheels.Toolkit | None = None) -> dict[str, str]:
    """CMake defines: torch + toolkit view < FetchContent overrides < recipe."""
    defines: dict[str, str] = {}
    if facts.torch_cmake_prefix:
        defines["Torch_DIR"] = str(Path(facts.torch_cmake_prefix) / "Torch")
    defines.update(toolkit.defines if toolkit else toolchain.cmake_defines(facts))
    defines.update(tree.fetchcontent_defines())
    defines.update(plan.recipe.build.defines)
    return defines


def build_env(plan: Plan, facts: toolchain.Facts, tree: Tree, jobs: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(plan.build_env())
    env["MAX_JOBS"] = env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    env["SOURCE_DATE_EPOCH"] = str(git.Repo(tree.root).commit(tree.commit).committed_date)
    env["PATH"] = os.pathsep.join([str(Path(facts.python).parent), *( [str(Path(facts.nvcc).parent)] if facts.nvcc else []), env.get("PATH", "")])
    if facts.cuda_home:
        env["CUDA_HOME"] = facts.cuda_home
    if facts.cmake_version and Version(facts.cmake_version).major >= 4:
        # Old dependencies declare cmake_minimum_required below 3.5, which CMake 4 refuses.
        env["CMAKE_POLICY_VERSION_MINIMUM"] = "3.5"
    env.update(plan.recipe.build.env)
    return env


def _children_cpu() -> float:
    """User + system CPU seconds of every finished descendant (compilers included: each waits
    for its own children, so their time rolls up)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def oom_killed(output: str) -> str | None:
    for pattern in OOM_PATTERNS:
        m = pattern.search(output)
        if m:
            return m.group(0)
    return None


def first_error(output: str) -> str:
    """The first real error line; CMake puts the reason on the lines after `CMake Error at`."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if ERROR_LINE.search(line) and "warning" not in line.lower():
            if line.lstrip().startswith("CMake Error"):
                reason = " ".join(l.strip() for l in lines[i + 1:i + 4] if l.strip())
                return f"{line.strip()} {reason}".strip()
            return line.strip()
    rest = [l for l in lines if l.strip()]
    return rest[-1].strip() if rest else "(no output)"


def _stream(cmd: list[str], env: dict[str, str], cwd: Path, log_path: Path, on_line: Callable[[str], None]) -> tuple[int, str]:
    """Run, tee every line to the log and to `on_line`; return (exit code, output)."""
    chunks: list[str] = []
    with log_path.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            chunks.append(line)
            on_line(line)
        code = proc.wait()
        fh.write(f"[exit {code}]\n")
    return code, "".join(chunks)


def _run_with_progress(cmd: list[str], env: dict[str, str], cwd: Path, log_path: Path, jobs: int) -> tuple[int, str]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn(f"compiling ({jobs} jobs)"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("eta"), TimeRemainingColumn(), console=log.console, transient=True,
                  disable=not log.console.is_terminal) as progress:
        task = progress.add_task("compile", total=None)
        start, last_said = time.monotonic(), [0.0]

        def on_line(line: str) -> None:
            m = NINJA_PROGRESS.match(line)
            if m:
                done, total = int(m.group(1)), int(m.group(2))
                progress.update(task, completed=done, total=total)
                # No bar in a log file (CI): a line at most every 15 s, and the last step.
                now = time.monotonic()
                if not log.console.is_terminal and (now - last_said[0] >= 15 or done == total):
                    last_said[0] = now
                    log.info(f"  [{done}/{total}] {now - start:.0f} s")
            elif not log.console.is_terminal and line.startswith(("FAILED", "ninja:")):
                log.info(line.rstrip())

        return _stream(cmd, env, cwd, log_path, on_line)


def _inject_provenance(wheel: Path, python: str, provenance: dict[str, object], workdir: Path, log_path: Path) -> Path:
    """Add the provenance JSON inside the wheel (RECORD regenerated by `wheel pack`)."""
    unpacked = workdir / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    subprocess.run([python, "-m", "wheel", "unpack", "-d", str(unpacked), str(wheel)], check=True, capture_output=True)
    [root] = list(unpacked.iterdir())
    dist_info = next(root.glob("*.dist-info"))
    (dist_info / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True))
    out = workdir / "packed"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    proc = subprocess.run([python, "-m", "wheel", "pack", "-d", str(out), str(root)], capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"adding provenance to {wheel.name} failed: {last}", hint=f"see {log_path}")
    [packed] = list(out.glob("*.whl"))
    return packed


def build(plan: Plan, tree: Tree, python: str, *, force: bool = False, offline: bool = False) -> BuildResult:
    """Build (or take from the cache) the wheel for this plan."""
    facts, toolkit, toolkit_why = select_toolkit(plan, python, offline=offline)
    toolchain.require(toolchain.preflight(facts, plan.archs, cmake_spec=plan.recipe.toolchain.cmake,
                                          want_cuda=plan.recipe.toolchain.cuda))
    host = toolchain.check_host_compiler(facts.nvcc, os.environ.get("CUDAHOSTCXX") or facts.gcc) if facts.nvcc else None
    if host:
        toolchain.require([host])
    defines = build_defines(plan, facts, tree, toolkit)
    key = cache_key(plan, facts, tree, defines, toolkit)
    cached_dir = plan.cache_dir / "wheels" / key
    logs = plan.cache_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{plan.recipe.name}-{key}.log"
    if not force and (cached_dir / "provenance.json").is_file():
        [wheel] = list(cached_dir.glob("*.whl"))
        provenance = json.loads((cached_dir / "provenance.json").read_text())
        out = _publish_local(plan, wheel)
        log.info(f"cache hit {key}: {out.name}")
        return BuildResult(out, str(provenance["version"]), True, key, log_path, list(provenance["jobs"]),
                           int(provenance["oom_kills"]), provenance)

    work = plan.cache_dir / "build" / key
    if force:
        # The sources are copied with their timestamps: only a fresh build folder recompiles.
        shutil.rmtree(work / "cmake", ignore_errors=True)
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(tree.project, src, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    base_version = read_version(src / "pyproject.toml")
    version = f"{base_version}+{local_label(plan, facts, tree)}"
    stamp_version(src / "pyproject.toml", version)
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    cmd = [python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
           f"-Cbuild-dir={work / 'cmake'}", "-Ccmake.build-type=Release",
           *(f"-Ccmake.define.{k}={v}" for k, v in sorted(defines.items())), str(src)]
    # Appended, not rewritten: a build resumed in the same folder (after an interruption) keeps
    # the story of the earlier attempts.
    with log_path.open("a") as fh:
        fh.write(f"# build-kernel {plan.recipe.name} key {key} at {dt.datetime.now(dt.timezone.utc).isoformat()}\n"
                 f"# {plan.jobs.derivation}\n")
    started = dt.datetime.now(dt.timezone.utc)
    jobs = plan.jobs.jobs
    tried: list[int] = []
    kills = 0
    t0 = time.monotonic()
    cpu0 = _children_cpu()
    while True:
        tried.append(jobs)
        env = build_env(plan, facts, tree, jobs)
        code, output = _run_with_progress(cmd, env, work, log_path, jobs)
        if code == 0:
            break
        killed = oom_killed(output)
        if killed and kills < plan.recipe.build.max_oom_retries and jobs > 1:
            kills += 1
            jobs = max(1, jobs // 2)
            message = f"OOM kill detected ({killed}): resuming in the same build folder with {jobs} job(s) (retry {kills}/{plan.recipe.build.max_oom_retries})"
            log.warn(message)
            with log_path.open("a") as fh:
                fh.write(f"# {message}\n")
            continue
        if killed:
            raise BuildError(f"compile OOM-killed ({killed}) even with {jobs} job(s); full log: {log_path}",
                             hint="free memory, lower [build] nvcc_threads, or build fewer archs")
        raise BuildError(f"build failed: {first_error(output)}; full log: {log_path}",
                         hint="fix the error above (the patch series or toolchain), then run again")
    [wheel] = list(dist.glob("*.whl"))
    provenance = {
        "tool": "build-kernel", "recipe": plan.recipe.name, "recipe_digest": plan.recipe.digest,
        "version": version, "repo": plan.recipe.source.repo, "commit": tree.commit, "subdir": plan.recipe.source.subdir,
        "patch_series": f"{plan.recipe.patches.series}/{plan.recipe.patches.version}", "series_digest": tree.series_digest,
        "patches": {p.name: p.sha256 for p in plan.series.patches},
        "toolchain": {"nvcc": facts.nvcc, "cuda_home": facts.cuda_home, "nvcc_version": facts.nvcc_version, "torch": facts.torch_version,
                      "torch_cuda": facts.torch_cuda, "cmake": facts.cmake_version, "ninja": facts.ninja_version,
                      "gcc": facts.gcc_version, "python": facts.python_version,
                      "cuda_source": "wheels" if toolkit else "system", "cuda_source_why": toolkit_why,
                      "cuda_packages": dict(toolkit.packages) if toolkit else None},
        "archs": [a.torch for a in plan.archs], "defines": defines, "jobs": tried, "oom_kills": kills,
        "job_derivation": plan.jobs.derivation, "key": key,
        "start": started.isoformat(), "end": dt.datetime.now(dt.timezone.utc).isoformat(),
        "seconds": round(time.monotonic() - t0, 1),
        "cpu_seconds": round(_children_cpu() - cpu0, 1),  # frontend, cmake, ninja, every compiler
    }
    packed = _inject_provenance(wheel, python, provenance, work, log_path)
    tmp_cache = cached_dir.with_name(cached_dir.name + ".partial")
    shutil.rmtree(tmp_cache, ignore_errors=True)
    tmp_cache.mkdir(parents=True)
    shutil.copy2(packed, tmp_cache / packed.name)
    (tmp_cache / "provenance.json").write_text(json.dumps(provenance, indent=2, sort_keys=True))
    shutil.rmtree(cached_dir, ignore_errors=True)
    tmp_cache.rename(cached_dir)
    out = _publish_local(plan, cached_dir / packed.name)
    return BuildResult(out, version, False, key, log_path, tried, kills, provenance)


def _publish_local(plan: Plan, wheel: Path) -> Path:
    """Copy into the output folder and refresh its PEP 503 index."""
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    out = plan.output_dir / wheel.name
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.copy2(wheel, tmp)
    tmp.replace(out)
    static_index.regenerate(plan.output_dir)
    return out
