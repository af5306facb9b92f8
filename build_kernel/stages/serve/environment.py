"""The interpreter that runs the server, and what is installed in it.

By default it is a virtualenv of our own in the cache that sees the build environment's
site-packages through a `.pth` line: the server imports the very torch the wheel was
built against (nothing copied, nothing re-resolved), and what sglang needs is installed
beside it under a constraint that pins that torch. `[serve] python` names an environment
of the user's own instead; then we only inspect it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import venv
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import process
from build_kernel.errors import BuildKernelError, ServeError
from build_kernel.plan import Plan

# sgl-kernel <= 0.3.x and sglang-kernel >= 0.4 both install the `sgl_kernel` package.
KERNEL_DISTRIBUTIONS = ("sgl-kernel", "sglang-kernel")

_MARK = "@@SERVE-ENV@@"
_INSPECT = r"""
import importlib.metadata as md, importlib.util, json, sys
module = sys.argv[1]
out = {"python": sys.executable, "version": list(sys.version_info[:2]), "dists": {}, "module_origin": None,
       "sglang": None, "torch": None, "torch_root": None}
try:
    spec = importlib.util.find_spec(module)
    out["module_origin"] = spec.origin if spec else None
except Exception as exc:
    out["module_origin"] = None
for name in ("sglang", "torch"):
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        pass
if out["torch"]:
    found = importlib.util.find_spec("torch")
    out["torch_root"] = next(iter(found.submodule_search_locations or []), None) if found else None
if out["sglang"]:
    out["sglang_requires"] = md.requires("sglang") or []
    found = importlib.util.find_spec("sglang")
    out["sglang_root"] = next(iter(found.submodule_search_locations or []), None) if found else None
for dist in md.distributions():
    files = dist.files or []
    tops = {str(f).split("/")[0] for f in files}
    if module in tops:
        name = dist.metadata["Name"]
        out["dists"][name] = {"version": dist.version, "root": str(dist.locate_file("")),
                              "files": {str(f): (f.hash.value if f.hash else None) for f in files
                                        if str(f).startswith(module + "/")
                                        or ("/" not in str(f) and ".so" in str(f))},
                              "requires": dist.requires or [], "direct_url": dist.read_text("direct_url.json"),
                              "provenance": dist.read_text("build_kernel_provenance.json"),
                              "installer": (dist.read_text("INSTALLER") or "").strip()}
print("@@SERVE-ENV@@" + json.dumps(out))
"""


@dataclass(frozen=True)
class Installed:
    """What the serve interpreter would import: versions, and each distribution that ships the module."""

    python: str
    sglang: str | None
    torch: str | None
    module_origin: str | None
    # distribution name -> {"version", "root", "files": {path: "sha256 urlsafe-b64" | None}}
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)
    sglang_requires: tuple[str, ...] = ()
    sglang_root: str | None = None
    torch_root: str | None = None


def kernel_module(plan: Plan) -> str:
    """The top-level package the server imports the kernel as (the recipe's first import module)."""
    return (plan.recipe.verify.import_modules or ("sgl_kernel",))[0].split(".")[0]


def env_key(plan: Plan, build_python: str) -> str:
    # A release keeps the key it always had; a source build is keyed by its commit.
    source = plan.recipe.serve.sglang == "source"
    sglang = f"source:{plan.recipe.source.repo}@{plan.recipe.source.commit}" if source else plan.recipe.toolchain.sglang
    spec = {"build_python": build_python, "sglang": sglang,
            "flashinfer": plan.recipe.toolchain.flashinfer_python}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def default_root(plan: Plan, build_python: str) -> Path:
    return plan.cache_dir / "serve" / f"env-{env_key(plan, build_python)}"


def python_for(plan: Plan, build_python: str) -> str:
    """`[serve] python`, or the cache's serve environment (which may not exist yet)."""
    if plan.recipe.serve.python:
        return plan.recipe.serve.python
    return str(default_root(plan, build_python) / "bin" / "python")


def server_env(plan: Plan) -> dict[str, str]:
    """The server's environment: ours without our interpreter's settings, plus `[serve.env]`."""
    env = {k: v for k, v in plan.env.items() if not k.startswith(("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"))}
    return {**env, **plan.recipe.serve.env}


def site_packages(python: str, env: Mapping[str, str]) -> str:
    out = process.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], error=ServeError,
                      what=f"asking {python} for its site-packages", env=env, timeout=60)
    return out.stdout.strip()


def create(root: Path, build_python: str, env: Mapping[str, str]) -> str:
    """A virtualenv at `root` that sees the build environment's packages (torch) after its own."""
    if not (root / "bin" / "python").exists():
        # Created with the build environment's base interpreter: the same Python ABI as the wheel.
        base = process.run([build_python, "-c", "import sys; print(sys._base_executable)"], error=ServeError,
                           what="finding the build environment's base interpreter", env=env, timeout=60).stdout.strip()
        if Path(base).resolve() == Path(sys.executable).resolve():
            venv.create(root, with_pip=True)
        else:
            process.run([base, "-m", "venv", root], error=ServeError, what=f"creating the serve environment {root}",
                        env=env, timeout=600)
    python = str(root / "bin" / "python")
    (Path(site_packages(python, env)) / "_build_kernel_build_env.pth").write_text(site_packages(build_python, env) + "\n")
    return python


def inspect(python: str, module: str, env: Mapping[str, str], *, error: type[BuildKernelError] = ServeError,
            what: str = "serve interpreter",
            missing_hint: str = "make it with `build-kernel serve --install --recipe R`, or set [serve] python"
            ) -> Installed:
    """What `python` has installed, read without importing `module` (nor torch, nor sglang); a missing
    interpreter is an `error` that says how to make one."""
    if not Path(python).exists():
        raise error(f"no {what} at {python}", hint=missing_hint)
    proc = process.run([python, "-c", _INSPECT, module], error=error, what=f"inspecting {python}", env=env,
                       timeout=120)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        raise error(f"{python} printed no inventory", hint="run it by hand: is it a working Python 3?")
    data = json.loads(line[len(_MARK):])
    return Installed(data["python"], data["sglang"], data["torch"], data["module_origin"], data["dists"],
                     tuple(data.get("sglang_requires", [])), data.get("sglang_root"), data.get("torch_root"))
