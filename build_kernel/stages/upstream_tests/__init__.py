"""Test: the package's own tests, taken from the pinned commit, run against the built wheel.

After cibuildwheel's `test-command` and upstream's own CI: the files under `[test] paths` of the
same tree the wheel was built from run in a throwaway environment (environment) that holds the
wheel, pytest and `[test] requires`, one pytest process per file, several at once (runner), and
each file's outcome is judged against the recipe's expectations (verdict): red means new. The
result is kept beside the wheel (`<wheel>.tests.json`, keyed by its sha256), where `publish`
reads it. A host whose GPU cannot run the asked archs gets one line and runs nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from build_kernel import atomic, log, process
from build_kernel.archs import Arch
from build_kernel.errors import TestError
from build_kernel.plan import Plan
from build_kernel.stages import Context, Done
from build_kernel.stages.fetch.workspace import Tree
from build_kernel.stages.serve import environment as serve_env
from build_kernel.stages.upstream_tests import collect, environment, runner, verdict
from build_kernel.stages.verify.report import sha256_of

RECORD_SUFFIX = ".tests.json"
_GPU_PROBE = ("import json, torch\n"
              "ok = torch.cuda.is_available()\n"
              "print(json.dumps({'available': ok, 'name': torch.cuda.get_device_name(0) if ok else None,\n"
              "                  'capability': list(torch.cuda.get_device_capability(0)) if ok else None}))\n")


def record_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + RECORD_SUFFIX)


def read_record(wheel: Path) -> dict[str, Any] | None:
    """The test record of exactly these wheel bytes (None: none, or one of other bytes)."""
    path = record_path(wheel)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if data.get("wheel_sha256") == sha256_of(wheel) else None


def runs_on(arch: Arch, capability: Sequence[int]) -> bool:
    """Whether SASS for `arch` runs on a GPU of this compute capability (`a`: that GPU only; `f`: its family;
    plain: the same major, an equal or newer minor)."""
    major, minor = capability[0], capability[1]
    if arch.suffix == "a":
        return (arch.major, arch.minor) == (major, minor)
    return arch.major == major and arch.minor <= minor


def gpu(python: str, env: dict[str, str]) -> dict[str, Any]:
    """The GPU torch sees from `python` ({"available": False} without one)."""
    out = process.probe([python, "-c", _GPU_PROBE], env=env, timeout=180, merge=False)
    try:
        found: dict[str, Any] = json.loads((out or "").strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        found = {"available": False}
    return found


def gpu_problem(plan: Plan, found: dict[str, Any]) -> str | None:
    """Why this host cannot run the tests (None: it can, or they need no GPU)."""
    if not plan.recipe.test.gpu:
        return None
    asked = ", ".join(a.torch for a in plan.archs)
    if not found.get("available"):
        return f"no GPU here, and [test] gpu = true: the tests need a GPU that runs {asked}"
    cap = found["capability"]
    if not any(runs_on(a, cap) for a in plan.archs):
        return (f"this host's GPU ({found.get('name')}, sm_{cap[0]}{cap[1]}) runs none of the wheel's archs "
                f"({asked}): run the tests on such a GPU, or build for sm_{cap[0]}{cap[1]}"
                f"{'a' if cap[0] >= 9 else ''} here (--arch {cap[0]}.{cap[1]}{'a' if cap[0] >= 9 else ''})")
    return None


def select(files: list[str], only: Sequence[str]) -> list[str]:
    if not only:
        return files
    chosen = [f for f in files if any(fnmatchcase(f, p) or fnmatchcase(f.rsplit("/", 1)[-1], p) for p in only)]
    if not chosen:
        raise TestError(f"no test file matches {', '.join(only)}", hint=f"files: {', '.join(files[:8])} ...")
    return chosen


def run_tests(plan: Plan, tree: Tree, wheel: Path, build_python: str, *, offline: bool = False,
              folder: Path | None = None, only: Sequence[str] = (), parallel: int | None = None,
              timeout_s: float | None = None, dry_run: bool = False) -> dict[str, Any]:
    """The package's tests against `wheel`; the record (also written beside the wheel unless a dry run)."""
    tests = plan.recipe.test
    if not tests.paths:
        raise TestError(f"recipe {plan.recipe.name} names no tests of its own package",
                        hint="add [test] paths = [\"tests\"] (relative to [source] subdir)")
    files = select(collect.files(tree.project, tests.paths), only)
    parallel, timeout_s = parallel or tests.parallel, timeout_s or tests.timeout_s
    asked = [a.torch for a in plan.archs]
    exps = verdict.applicable(tests.expect, asked)
    digest = sha256_of(wheel)
    record: dict[str, Any] = {
        "wheel": str(wheel), "wheel_sha256": digest, "recipe": plan.recipe.name, "commit": tree.commit,
        "archs": asked, "files": files, "pytest_args": list(tests.args), "parallel": parallel, "timeout_s": timeout_s,
        "environment": str(environment.root_for(plan, build_python, digest)),
    }
    if dry_run:
        return {**record, "dry_run": True}
    env = {**serve_env.server_env(plan), "PYTHONDONTWRITEBYTECODE": "1", **tests.env}
    # Asked of the build environment's torch (the test environment's own), before anything is installed.
    found = gpu(build_python, env) if tests.gpu else {"available": None}
    if problem := gpu_problem(plan, found):
        raise TestError(problem)
    record["gpu"] = found
    python = environment.prepare(plan, build_python, wheel, digest, offline=offline, folder=folder)
    run = plan.cache_dir / "tests" / f"run-{digest[:12]}"
    staged = collect.stage(tree.project, tests.paths, run / "src")
    started = dt.datetime.now(dt.timezone.utc)
    done: list[runner.FileResult] = []

    def progress(result: runner.FileResult) -> None:
        done.append(result)
        log.info(f"  [{len(done)}/{len(files)}] {result.file}: {verdict.judge(result, exps).line} "
                 f"({result.seconds:.0f} s)")

    results = runner.run_all(python, files, staged, run / "out", env, timeout_s=timeout_s, parallel=parallel,
                             on_done=progress, args=tests.args)
    verdicts = [verdict.judge(r, exps) for r in results]
    record.update({
        "start": started.isoformat(), "seconds": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1),
        "results": [r.to_dict() for r in results], "verdicts": [v.to_dict() for v in verdicts],
        "summary": summary(results, verdicts), "passed": not any(v.red for v in verdicts),
        "built_from": _built_from(wheel),
    })
    atomic.write_text(record_path(wheel), json.dumps(record, indent=2))
    return record


def _built_from(wheel: Path) -> str | None:
    """The commit the wheel's provenance names (the tests come from the recipe's)."""
    from build_kernel.stages.verify import wheel_provenance

    commit = (wheel_provenance(wheel) or {}).get("commit")
    return str(commit) if commit else None


def summary(results: Sequence[runner.FileResult], verdicts: Sequence[verdict.Verdict]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    return {"files": len(results), "by_status": by_status, "red": [v.file for v in verdicts if v.red],
            "passed_tests": sum(r.passed for r in results),
            "failed_tests": sum(len(r.failed) for r in results if r.status != "uncollectable"),
            "skipped_tests": sum(len(r.skipped) for r in results),
            "expected": sum(len(v.expected) for v in verdicts),
            "unexplained_skips": sum(len(v.unexplained_skips) for v in verdicts)}


class TestStage:
    """The pipeline's test stage: skipped where the recipe names no tests or no GPU here can run them."""

    __test__ = False  # not a pytest class
    name = "test"

    def __init__(self, *, only: Sequence[str] = (), parallel: int | None = None, timeout_s: float | None = None,
                 folder: Path | None = None, raise_on_failure: bool = True) -> None:
        self.only, self.parallel, self.timeout_s, self.folder = only, parallel, timeout_s, folder
        self.raise_on_failure = raise_on_failure
        self.record: dict[str, Any] = {}

    def skip(self, ctx: Context) -> str | None:
        if not ctx.plan.recipe.test.paths:
            return "no [test] paths in the recipe"
        if ctx.dry_run or not ctx.plan.recipe.test.gpu:
            return None
        return gpu_problem(ctx.plan, gpu(ctx.build_python(), dict(ctx.plan.env)))

    def title(self, ctx: Context) -> str:
        return f"test: the package's own tests ({', '.join(ctx.plan.recipe.test.paths)})"

    def run(self, ctx: Context) -> Done:
        if ctx.tree is None or not ctx.wheels:
            raise TestError("no source tree or wheel to test", hint="run the fetch and build stages first")
        self.record = run_tests(ctx.plan, ctx.tree, ctx.wheels[0], ctx.build_python(), offline=ctx.offline,
                                folder=self.folder, only=self.only, parallel=self.parallel, timeout_s=self.timeout_s,
                                dry_run=ctx.dry_run)
        if not self.record.get("dry_run") and not self.record["passed"] and self.raise_on_failure:
            red = self.record["summary"]["red"]
            raise TestError(f"{len(red)} test file(s) red: {', '.join(red[:5])}",
                            hint=f"see {record_path(ctx.wheels[0])}")
        status = "planned" if self.record.get("dry_run") else "passed" if self.record["passed"] else "failed"
        return Done(status, {k: v for k, v in self.record.items() if k in ("summary", "passed", "files")})
