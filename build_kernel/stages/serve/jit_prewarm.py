"""sglang's JIT kernels compiled ahead of time, into the tvm-ffi cache the server then reads.

From f88acf878 the NVFP4 kernels are not in the kernel wheel: sglang compiles them at first
use (`load_jit` → `tvm_ffi.cpp.load_inline` → nvcc through ninja) into
`$TVM_FFI_CACHE_DIR/<name>_<hash>/`. The hash covers the generated source (absolute paths of
sglang's `.cuh` files), the flags (the arch) and the include paths (flashinfer's CUTLASS,
absolute): so the cache is made by the serve interpreter itself, with sglang's own builders
(`jit_child.py`), for each asked arch. The server later finds the same entry and ninja has
nothing to do, provided its `build.ninja` comes out the same: same CUDA_HOME (nvcc's path is in
it), CXX and tvm-ffi; `jit_env` pins those, and the unit and the launch carry them.

Nothing half-written: tvm-ffi's layout is kept (its `build.ninja` names the entry's absolute
path, so an entry cannot be built elsewhere and renamed), and an entry a failed or interrupted
compile created is removed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from build_kernel import log, process, toolchain
from build_kernel.archs import Arch
from build_kernel.errors import ServeError
from build_kernel.plan import Plan, recipe_arg

CHILD = Path(__file__).with_name("jit_child.py")
CACHE_VAR = "TVM_FFI_CACHE_DIR"
_MARK = "@@JIT-PREWARM@@"
_FIX = {
    "module": "install that sglang into the serve environment, or fix [serve] jit_prewarm",
    "import": "the serve environment's sglang does not import: install what it needs (serve --install)",
    "builder": "name a `_jit_*_module` builder of that module in [serve] jit_prewarm",
    "arguments": "only builders without arguments can be prewarmed: drop it from [serve] jit_prewarm",
    "sglang": "this sglang predates override_jit_cuda_arch: remove [serve] jit_prewarm",
    "arch": "fix [serve] jit_archs",
}


@dataclass(frozen=True)
class Item:
    """One builder of one entry, for one arch."""

    entry: str
    builder: str
    arch: str

    def describe(self) -> str:
        return f"{self.entry.partition(':')[0]}:{self.builder} for {self.arch}"


def archs(plan: Plan) -> tuple[Arch, ...]:
    return plan.recipe.serve.jit_archs or plan.archs


def cache_dir(plan: Plan, python: str) -> Path:
    """The cache the prewarm fills and the server reads (beside the serve environment by default)."""
    given = plan.recipe.serve.jit_cache_dir
    return Path(given).expanduser() if given else Path(python).parent.parent / "tvm-ffi-cache"


def cuda_home(env: Mapping[str, str]) -> Path:
    """The toolkit tvm-ffi is pinned to (its own search, `_find_cuda_home`, takes nvcc-on-PATH's parent, which
    for a wrapper script such as /usr/local/bin/nvcc is /usr/local: no lib64/libcudart there): CUDA_HOME or
    CUDA_PATH as given, else where the nvcc found says its toolkit lives."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not home:
        nvcc = toolchain.find_nvcc(env)
        home = toolchain.cuda_home_of(nvcc, env) if nvcc else "/usr/local/cuda"
    return Path(home)


def jit_env(plan: Plan, python: str, env: Mapping[str, str]) -> dict[str, str]:
    """What the prewarm, the unit and the launch share so that the server finds the entries:
    the cache, the CUDA_HOME tvm-ffi writes into build.ninja, CXX, and a PATH with ninja.
    Empty when the recipe prewarms nothing."""
    if not plan.recipe.serve.jit_prewarm:
        return {}
    out = {CACHE_VAR: str(cache_dir(plan, python)), "CUDA_HOME": str(cuda_home(env))}
    if env.get("CXX"):
        out["CXX"] = env["CXX"]
    beside = Path(python).parent / "ninja"  # pip's ninja in the serve environment, off PATH under systemd
    if beside.is_file() and not process.which("ninja", env.get("PATH")):
        out["PATH"] = f"{beside.parent}:{env.get('PATH', os.defpath)}"
    return out


def _preflight(env: Mapping[str, str]) -> None:
    nvcc = cuda_home(env) / "bin" / "nvcc"
    if not os.access(nvcc, os.X_OK):
        raise ServeError(f"nvcc not found at {nvcc} (tvm-ffi compiles sglang's JIT kernels with CUDA_HOME/bin/nvcc)",
                         hint="install the CUDA toolkit and set CUDA_HOME in [serve] env (or put its bin on PATH)")
    if not process.which("ninja", env.get("PATH")):
        raise ServeError("ninja not found on the prewarm's PATH (tvm-ffi runs `ninja`)",
                         hint="pip install ninja into the serve environment")


def _child(python: str, mode: str, spec: dict[str, Any], env: Mapping[str, str], *, what: str,
           log_path: Path | None, timeout: float) -> Any:
    proc = process.run([python, CHILD, mode, json.dumps(spec)], error=ServeError, what=what, env=env, log=log_path,
                       timeout=timeout, check=False)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = ([ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()] or ["(no output)"])[-1]
        raise ServeError(f"{what}: {python} exited {proc.returncode} without an answer: {tail}",
                         hint=f"see {log_path}" if log_path else "run it without --dry-run to keep a log")
    data = json.loads(line[len(_MARK):])
    if "error" in data:
        raise ServeError(f"{what}: {data['detail']}", hint=_FIX.get(data["error"], f"see {log_path or 'its output'}"))
    return data["ok"]


def items(plan: Plan, python: str, env: Mapping[str, str], log_path: Path | None) -> list[Item]:
    """Every (builder, arch) the recipe asks, found by the serve interpreter; every bad entry named at once."""
    found = _child(python, "list", {"entries": list(plan.recipe.serve.jit_prewarm)}, env, log_path=log_path,
                   what="finding the [serve] jit_prewarm builders", timeout=600)
    bad = {entry: got for entry, got in found.items() if isinstance(got, dict)}
    if bad:
        kinds = {got["error"] for got in bad.values()}
        raise ServeError("[serve] jit_prewarm: " + "; ".join(got["detail"] for got in bad.values()),
                         hint=_FIX.get(next(iter(kinds)), "fix [serve] jit_prewarm") if len(kinds) == 1 else
                         "fix [serve] jit_prewarm, or install that sglang into the serve environment")
    return [Item(entry, builder, a.torch) for a in archs(plan) for entry in plan.recipe.serve.jit_prewarm
            for builder in found[entry]]


def _entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir() if p.is_dir()} if cache.is_dir() else set()


def build_item(python: str, item: Item, env: Mapping[str, str], cache: Path, log_path: Path) -> list[dict[str, Any]]:
    before = _entries(cache)
    ok = False
    try:
        built: list[dict[str, Any]] = _child(python, "build", asdict(item), env, what=f"compiling {item.describe()}",
                                             log_path=log_path, timeout=6 * 3600)
        ok = True
    finally:
        if not ok:  # an entry this compile made is not left half-built
            for name in _entries(cache) - before:
                shutil.rmtree(cache / name, ignore_errors=True)
    for b in built:
        so = Path(b["so"])
        b.update(entry=item.entry, builder=item.builder, arch=item.arch, dir=str(so.parent),
                 fresh=so.parent.name not in before, size=so.stat().st_size)
    return built


def prewarm(plan: Plan, python: str, env: Mapping[str, str], *, dry_run: bool = False) -> dict[str, Any]:
    """Compile the recipe's `[serve] jit_prewarm` builders for each asked arch into the cache (or, with
    `dry_run`, list them); returns {"cache", "env", "items": [...], "modules": [...]}."""
    jit = jit_env(plan, python, env)
    cache = Path(jit[CACHE_VAR])
    full = {**env, **jit}
    log_path = plan.cache_dir / "logs" / f"jit-prewarm-{plan.recipe.name}.log"
    result: dict[str, Any] = {"cache": str(cache), "env": jit, "dry_run": dry_run, "modules": []}
    if not dry_run:
        _preflight(full)
    elif not Path(python).exists():
        # Which builders an entry has only the serve interpreter knows; a dry run makes none.
        result["items"] = [asdict(Item(e, "", a.torch)) for a in archs(plan) for e in plan.recipe.serve.jit_prewarm]
        result["notes"] = [f"the serve interpreter {python} is not made yet (a dry run creates nothing): "
                           f"`build-kernel serve --install --recipe {recipe_arg(plan.recipe)}` makes it; then the dry run "
                           "names each builder"]
        return result
    # A dry run writes no log: the cache may be read-only, and it must stay as it was.
    todo = items(plan, python, full, None if dry_run else log_path)
    result["items"] = [asdict(i) for i in todo]
    if dry_run:
        for i in todo:
            log.info(f"would compile {i.describe()} into {cache}")
        return result
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / ".build-kernel-prewarm.lock")):
        for n, item in enumerate(todo, 1):
            with log.step(f"JIT {n}/{len(todo)}: {item.describe()}"):
                for b in build_item(python, item, full, cache, log_path):
                    log.info(f"{b['name']}: {b['size'] / 1e6:.1f} MB in {b['seconds']} s"
                             f"{'' if b['fresh'] else ' (entry was there: ninja brought it up to date)'}")
                    result["modules"].append(b)
    return result
