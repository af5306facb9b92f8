"""The Python environment a wheel is built in: one virtualenv per toolchain spec.

The wheel must link against exactly the recipe's torch, so it is built with
`--no-build-isolation` inside an environment that holds that torch; every later install
there carries a constraint pinning torch, so nothing can swap it (sglang 0.5.9 pins
torch==2.9.1 and would otherwise downgrade it and break the ABI).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import venv

from filelock import FileLock

from build_kernel import log
from build_kernel.errors import ToolchainError
from build_kernel.plan import Plan
from build_kernel.process import run

BUILD_REQUIREMENTS = ("scikit-build-core>=0.10", "cmake>=3.26", "ninja>=1.11", "build>=1.2", "wheel")


def env_key(plan: Plan) -> str:
    t = plan.recipe.toolchain
    spec: dict[str, object] = {"torch": t.torch, "index": t.torch_index, "python": sys.version_info[:2],
                               "reqs": BUILD_REQUIREMENTS}
    if t.build_requires:  # only when given: the environments of recipes without it keep their key
        spec["more"] = sorted(t.build_requires)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def python_for(plan: Plan, *, dry_run: bool = False) -> str:
    """The interpreter to build with: this one (`torch = "existing"`) or a cached venv."""
    t = plan.recipe.toolchain
    if t.torch == "existing":
        return sys.executable
    root = plan.cache_dir / "envs" / env_key(plan)
    python = root / "bin" / "python"
    if dry_run or (root / ".complete").is_file():
        return str(python)
    with FileLock(str(root) + ".lock"):
        if (root / ".complete").is_file():
            return str(python)
        shutil.rmtree(root, ignore_errors=True)
        with log.step(f"build environment for torch {t.torch}"):
            venv.create(root, with_pip=True)
            constraint = root / "constraints.txt"
            constraint.write_text(f"torch=={t.torch}\n")
            index = ["--extra-index-url", t.torch_index] if t.torch_index else []
            try:
                run([python, "-m", "pip", "install", "--quiet", f"torch=={t.torch}", *BUILD_REQUIREMENTS, *t.build_requires,
                     "-c", constraint, *index], error=ToolchainError, what=f"installing torch {t.torch}",
                    fix="check [toolchain] torch / torch_index, or set torch = \"existing\"", log=root.parent / f"{root.name}.log")
            except ToolchainError:
                shutil.rmtree(root, ignore_errors=True)
                raise
            (root / ".complete").write_text(t.torch)
    return str(python)
