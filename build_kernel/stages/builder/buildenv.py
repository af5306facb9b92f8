"""The Python environment a wheel is built in: one virtualenv per toolchain spec.

The wheel must link against exactly the recipe's torch, so it is built with
`--no-build-isolation` inside an environment that holds that torch; every later install
there carries a constraint pinning torch, so nothing can swap it (sglang 0.5.9 pins
torch==2.9.1 and would otherwise downgrade it and break the ABI). A torch pinned from the recipe's
index is installed from the file the recipe's lock names, hash-checked (wheelpins.py).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import sys
import venv
from pathlib import Path

from filelock import FileLock

from build_kernel import log
from build_kernel.errors import ToolchainError
from build_kernel.plan import Plan
from build_kernel.process import run
from build_kernel.stages.builder import wheelpins
from build_kernel.stages.builder.wheelindex import network_cause

BUILD_REQUIREMENTS = ("scikit-build-core>=0.10", "cmake>=3.26", "ninja>=1.11", "build>=1.2", "wheel")


def env_key(plan: Plan, torch: str | None = None) -> str:
    """One environment per toolchain spec; `torch = "nightly"` counts as the version it resolved to (`torch`,
    else the lock's), so a new nightly is a new environment and an exact pin of the same version shares it."""
    t = plan.recipe.toolchain
    pinned = wheelpins.of(plan)
    torch = torch or (wheelpins.version(plan, pinned[0]) if pinned else None) or t.torch
    spec: dict[str, object] = {"torch": torch, "index": t.torch_index, "python": sys.version_info[:2],
                               "reqs": BUILD_REQUIREMENTS}
    if t.build_requires:  # only when given: the environments of recipes without it keep their key
        spec["more"] = sorted(t.build_requires)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _install_failure(argv: list[str], code: int, output: str, torch: str, torch_index: str,
                     log: Path, config: str) -> ToolchainError:
    if cause := network_cause(output, torch_index):
        return ToolchainError(f"installing torch {torch}: {cause}; full log: {log}",
                              hint="check the network, the proxy and pip's configuration (`pip config list`), or map "
                                   f"the index to a mirror you can reach in {config}")
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return ToolchainError(f"installing torch {torch}: `{shlex.join(argv)}` exited {code}: "
                          f"{lines[-1] if lines else '(no output)'}; full log: {log}",
                          hint="check [toolchain] torch / torch_index, or set torch = \"existing\"")


def python_for(plan: Plan, *, dry_run: bool = False, offline: bool = False) -> str:
    """The interpreter to build with: this one (`torch = "existing"`) or a cached venv."""
    t = plan.recipe.toolchain
    if t.torch == "existing":
        return sys.executable
    pinned = wheelpins.of(plan)
    pin = pinned[0] if pinned else None
    torch = wheelpins.version(plan, pin) if pin else t.torch
    if torch is None and not dry_run:  # `nightly`, never resolved: asked once here, locked once installed
        assert pin is not None
        torch = wheelpins.newest(plan, pin, offline=offline)
    root = plan.cache_dir / "envs" / env_key(plan, torch)
    python = root / "bin" / "python"
    if dry_run or (root / ".complete").is_file():
        return str(python)
    assert torch is not None
    with FileLock(str(root) + ".lock"):
        if (root / ".complete").is_file():
            return str(python)
        shutil.rmtree(root, ignore_errors=True)
        with log.step(f"build environment for torch {torch}"):
            try:
                _make(plan, root, torch, pin, offline=offline)
            except ToolchainError:
                shutil.rmtree(root, ignore_errors=True)
                raise
            (root / ".complete").write_text(torch)
    return str(python)


def _make(plan: Plan, root: Path, torch: str, pin: wheelpins.WheelPin | None, *, offline: bool) -> None:
    t = plan.recipe.toolchain
    venv.create(root, with_pip=True)
    python = str(root / "bin" / "python")
    constraint = root / "constraints.txt"
    constraint.write_text(f"torch=={torch}\n")
    index = wheelpins.index_args(plan)  # torch_index and PyPI, each through its [mirrors] mirror
    log_path = root.parent / f"{root.name}.log"
    # A pin from the recipe's index installs the lock's file (resolved by pip now when the lock has none):
    # found whether or not the index still lists it, and refused by pip when its sha256 differs. Offline with
    # no lock, nothing can be resolved: pip installs `torch==` from what it has (its wheelhouse, its cache).
    found = wheelpins.locked(plan, pin) if pin else None
    if pin and not found and not offline:
        found = wheelpins.resolve(plan, pin, torch, python, log_path)
    requirement = found.requirement("torch", plan.mirrors) if found else f"torch=={torch}"
    # --no-compile: a build imports little of torch; the bytecode of what it imports is written then.
    # Compiling all of it up front took 70 s against 45 s for torch 2.14.1 (2 cores).
    proc = run([python, "-m", "pip", "install", "--quiet", "--no-compile", requirement, *BUILD_REQUIREMENTS,
                *t.build_requires, "-c", constraint, *index], error=ToolchainError, what=f"installing torch {torch}",
               fix="check [toolchain] torch / torch_index, or set torch = \"existing\"", log=log_path, check=False)
    if proc.returncode != 0:
        output = proc.stderr + proc.stdout
        if pin and found and (mismatch := wheelpins.hash_mismatch(plan, pin, found, output, log_path)):
            raise mismatch
        raise _install_failure([str(a) for a in proc.args], proc.returncode, output, torch,
                               pin.fetch_index if pin else t.torch_index, log_path, plan.mirrors.config_words())
    if pin and found:  # recorded once pip has checked the bytes against it: the lock never names a file pip refused
        wheelpins.record(plan, pin, found)
