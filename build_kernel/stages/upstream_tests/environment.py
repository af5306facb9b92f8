"""The throwaway environment the package's tests run in: the wheel, pytest and what `[test] requires`.

A virtualenv in the cache that sees the build environment's torch through a `.pth` line (the
serve environment's recipe: nothing re-resolved), keyed by the wheel's bytes and everything
installed beside it, and marked complete only once every install succeeded: a failed install
is made again from nothing, never half-used. With `[test] sglang`, sglang and flashinfer come
as serving installs them (a release, or the kernel commit's own sglang; `--no-deps`, torch kept).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from build_kernel import atomic, log
from build_kernel.plan import Plan
from build_kernel.stages.serve import environment as serve_env
from build_kernel.stages.serve import install, sglang_dist

_COMPLETE = ".build-kernel-complete"


def key(plan: Plan, build_python: str, wheel_sha256: str) -> str:
    tests = plan.recipe.test
    spec = {"build_python": build_python, "wheel": wheel_sha256, "requires": list(tests.requires),
            "resolve": tests.resolve,
            "sglang": sglang_dist.choose(plan).describe() if tests.sglang else None,
            "flashinfer": plan.recipe.toolchain.flashinfer_python if tests.sglang else None}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def root_for(plan: Plan, build_python: str, wheel_sha256: str) -> Path:
    return plan.cache_dir / "tests" / f"env-{key(plan, build_python, wheel_sha256)}"


def prepare(plan: Plan, build_python: str, wheel: Path, wheel_sha256: str, *, offline: bool = False,
            folder: Path | None = None) -> str:
    """The test interpreter, made (or found complete) for this wheel (`wheel_sha256`: its digest, hashed once by
    the caller: wheels reach 535 MB); its path."""
    root = root_for(plan, build_python, wheel_sha256)
    python = str(root / "bin" / "python")
    if (root / _COMPLETE).is_file():
        return python
    shutil.rmtree(root, ignore_errors=True)
    env = serve_env.server_env(plan)
    log_path = plan.cache_dir / "logs" / f"test-env-{plan.recipe.name}.log"
    with log.step(f"test environment {root}"):
        python = serve_env.create(root, build_python, env)
        torch = serve_env.inspect(python, serve_env.kernel_module(plan), env, what="test interpreter").torch
        constraints = root / "build-kernel-constraints.txt"
        # The torch the wheel was built against stays whatever a test requirement asks.
        atomic.write_text(constraints, f"torch=={torch}\n" if torch else "")
        tests = plan.recipe.test
        if tests.sglang and tests.resolve:  # as serving installs it: sglang's requirements resolved, torch kept
            install.install(plan, build_python, wheel, offline=offline, folder=folder, python=python)
        else:
            given: list[str | Path] = [wheel]
            if tests.sglang:
                choice = sglang_dist.choose(plan)
                given.append(sglang_dist.build(plan, python, env, log_path=log_path, offline=offline, wheelhouse=folder)
                             if choice.origin == "source" else f"sglang=={choice.version}")
            install.pip_install(python, ["--no-deps", "--force-reinstall", *given], env=env, log_path=log_path,
                                folder=folder, what=f"installing {wheel.name}{' and sglang' if tests.sglang else ''}")
        install.pip_install(python, ["-c", constraints, *([] if tests.resolve else ["--no-deps"]), "pytest",
                                     *tests.requires], env=env, log_path=log_path, folder=folder,
                            what=f"installing pytest and [test] requires ({', '.join(tests.requires) or '-'})")
    atomic.write_text(root / _COMPLETE, root.name + "\n")
    return python
