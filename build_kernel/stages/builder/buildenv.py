"""The Python environment a wheel is built in: one virtualenv per toolchain spec.

The wheel must link against exactly the recipe's torch, so it is built with
`--no-build-isolation` inside an environment that holds that torch; every later install
there carries a constraint pinning torch, so nothing can swap it (sglang 0.5.9 pins
torch==2.9.1 and would otherwise downgrade it and break the ABI).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import sys
import venv
from pathlib import Path
from urllib.parse import urlsplit

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


# pip's own words when an index cannot be reached; pip goes on without that index and then reports what it
# could not find (or, under a constraint, ResolutionImpossible): the first is the cause, the last a symptom.
_NETWORK = re.compile(r"(?:Failed to establish a new connection: \[Errno -?\d+\] ([^'\")]+)|"
                      r"(Temporary failure in name resolution|Name or service not known|Connection refused|"
                      r"Network is unreachable|Read timed out|certificate verify failed|ProxyError[^'\")]*))"
                      r"[^\n]*?(?:\)'?\)?:\s*(/\S*))?$", re.M)


def network_cause(output: str, torch_index: str) -> str | None:
    """The first index pip could not reach, named by the recipe's torch_index when the failed path is under it."""
    found = [((m.group(1) or m.group(2)).strip(), m.group(3) or "") for m in _NETWORK.finditer(output)]
    if not found:
        return None
    index_path = urlsplit(torch_index).path.rstrip("/") + "/" if torch_index else None
    torch_hits = [(reason, failed) for reason, failed in found if index_path and failed.startswith(index_path)]
    if torch_hits:
        return f"pip could not reach the torch index {torch_index}: {torch_hits[0][0]}"
    reason, failed = found[0]
    return f"pip could not reach a package index{f' ({failed})' if failed else ''}: {reason}"


def _install_failure(argv: list[str], code: int, output: str, torch: str, torch_index: str,
                     log: Path) -> ToolchainError:
    if cause := network_cause(output, torch_index):
        return ToolchainError(f"installing torch {torch}: {cause}; full log: {log}",
                              hint="check the network, the proxy and pip's configuration (`pip config list`), or set "
                                   "[toolchain] torch_index to a mirror you can reach")
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return ToolchainError(f"installing torch {torch}: `{shlex.join(argv)}` exited {code}: "
                          f"{lines[-1] if lines else '(no output)'}; full log: {log}",
                          hint="check [toolchain] torch / torch_index, or set torch = \"existing\"")


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
            log_path = root.parent / f"{root.name}.log"
            try:
                # --no-compile: a build imports little of torch; the bytecode of what it imports is written then.
                # Compiling all of it up front took 70 s against 45 s for torch 2.14.1 (2 cores).
                proc = run([python, "-m", "pip", "install", "--quiet", "--no-compile", f"torch=={t.torch}", *BUILD_REQUIREMENTS,
                            *t.build_requires,
                            "-c", constraint, *index], error=ToolchainError, what=f"installing torch {t.torch}",
                           fix="check [toolchain] torch / torch_index, or set torch = \"existing\"", log=log_path,
                           check=False)
                if proc.returncode != 0:
                    raise _install_failure([str(a) for a in proc.args], proc.returncode, proc.stderr + proc.stdout,
                                           t.torch, t.torch_index, log_path)
            except ToolchainError:
                shutil.rmtree(root, ignore_errors=True)
                raise
            (root / ".complete").write_text(t.torch)
    return str(python)
