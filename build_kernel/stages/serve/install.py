"""Install the wheel and sglang (a release, or built from the kernel's commit: sglang_dist) into the serve interpreter without letting pip swap either one.

sglang 0.5.9 pins `torch==2.9.1` and `sgl-kernel==0.3.21`: a plain install downgrades
torch (breaking the built wheel's ABI) or replaces our wheel with PyPI's. So: our wheel
`--no-deps`, sglang `--no-deps`, then sglang's own requirements minus torch and the kernel,
under a constraint that pins the torch the serve interpreter already has. Packages built
for one torch (torchvision, torchaudio, ...) lose their version pin so that constraint
chooses them; flashinfer follows the recipe's `flashinfer_python`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from build_kernel import atomic, log, process
from build_kernel.errors import ServeError
from build_kernel.plan import Plan
from build_kernel.stages.serve import environment, sglang_dist, wheelhouse

# What `from sglang.srt.server_args import ServerArgs` imports (sglang 0.5.9, seen on a CPU
# machine): enough to validate flags with sglang's own parser, not to serve.
PARSER_NEEDS = frozenset(canonicalize_name(n) for n in (
    "numpy", "tqdm", "pybase64", "requests", "ipython", "pydantic", "aiohttp", "safetensors", "orjson", "pyzmq",
    "packaging", "pillow", "starlette", "openai", "partial_json_parser", "huggingface_hub", "transformers",
    "torchvision", "dill", "sentencepiece"))
# Built against one torch release each: their pins follow sglang's torch, not ours.
TORCH_BOUND = frozenset(canonicalize_name(n) for n in (
    "torchvision", "torchaudio", "torchao", "torchcodec", "torch_memory_saver"))
FLASHINFER = frozenset(canonicalize_name(n) for n in ("flashinfer_python", "flashinfer_cubin"))
NEVER = frozenset({"torch", *environment.KERNEL_DISTRIBUTIONS})


def requirements(sglang_requires: Iterable[str], *, flashinfer: str = "", only: frozenset[str] | None = None,
                 extra_needs: Iterable[str] = ()) -> list[str]:
    """sglang's requirements as we install them (markers kept: pip evaluates them for the target)."""
    out: list[str] = []
    for text in sglang_requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue  # an optional extra of sglang's, not asked for
        name = canonicalize_name(req.name)
        if name in NEVER or (only is not None and name not in only):
            continue
        if name in TORCH_BOUND:
            req.specifier = type(req.specifier)("")
        elif name in FLASHINFER and flashinfer:
            req.specifier = type(req.specifier)(f"=={flashinfer}")
        out.append(str(req))
    have = {canonicalize_name(Requirement(r).name) for r in out}
    out += [n for n in extra_needs if canonicalize_name(n) not in have and (only is None or canonicalize_name(n) in only)]
    return out


def pip_install(python: str, args: Sequence[str | Path], *, what: str, env: Mapping[str, str], log_path: Path,
         folder: Path | None) -> None:
    # --no-compile: bytecode for the modules a server imports is written when it imports them; compiling every
    # file of sglang's requirements up front doubled pip's CPU time (measured on torch: 42 vs 23 CPU s).
    process.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                 *wheelhouse.index_args(folder), *args], error=ServeError, what=what, env=env, log=log_path,
                timeout=3600, fix=f"see {log_path}; " + (f"the wheelhouse {folder} must hold these versions" if folder
                                                         else "a package index with these versions must be reachable "
                                                              "(or pass --wheelhouse DIR, a folder of wheels)"))


def _needs(plan: Plan, sglang_requires: Iterable[str], flags_only: bool) -> list[str]:
    return requirements(sglang_requires, flashinfer=plan.recipe.toolchain.flashinfer_python,
                        only=PARSER_NEEDS if flags_only else None, extra_needs=sorted(PARSER_NEEDS) if flags_only else ())


def _release_wheel(folder: Path, pin: str, tgt: wheelhouse.Target) -> Path:
    found = wheelhouse.best(wheelhouse.scan(folder), Requirement(f"sglang=={pin}"), tgt)
    if found is None or found.tags is None:
        raise ServeError(f"the wheelhouse {folder} lacks sglang=={pin} (a wheel)",
                         hint=f"add it: `pip download -d {folder} --no-deps sglang=={pin}` on a host with an index")
    return found.path


def install(plan: Plan, build_python: str, wheel: Path, *, flags_only: bool = False, offline: bool = False,
            folder: Path | None = None, python: str | None = None) -> str:
    """Make (or update) the serve interpreter (or `python`, an environment made by the caller): the wheel, the
    recipe's sglang, what it needs."""
    choice = sglang_dist.choose(plan)
    if not choice.version:
        raise ServeError("the recipe names no sglang", hint="set [toolchain] sglang = \"0.5.9\", or [serve] sglang = "
                         "\"source\" for the sglang of the kernel's own commit")
    env = environment.server_env(plan)
    log_path = plan.cache_dir / "logs" / f"serve-install-{plan.recipe.name}.log"
    python = python or plan.recipe.serve.python or environment.create(
        environment.default_root(plan, build_python), build_python, env)
    module = environment.kernel_module(plan)
    before = environment.inspect(python, module, env)
    if not before.torch:
        raise ServeError(f"{python} has no torch", hint="the serve interpreter must see the build environment's torch")
    constraints = Path(python).parent.parent / "build-kernel-constraints.txt"
    # The torch the wheel runs on stays; nothing may bring another sgl_kernel.
    atomic.write_text(constraints, f"torch=={before.torch}\n")
    ours = parse_wheel_filename(wheel.name)[0]
    others = [name for name in before.dists if canonicalize_name(name) != ours]
    with log.step(f"serve environment {python} ({choice.describe()}{', flag checks only' if flags_only else ''})"):
        sglang: str | Path = f"sglang=={choice.version}"
        if choice.origin == "source":
            sglang = sglang_dist.build(plan, python, env, log_path=log_path, offline=offline, wheelhouse=folder)
        if folder is not None:  # all that the folder lacks, before pip stops at the first
            tgt = wheelhouse.target(python, env)
            sglang = sglang if isinstance(sglang, Path) else _release_wheel(folder, choice.version, tgt)
            wheelhouse.require(folder, _needs(plan, wheelhouse.requires(sglang), flags_only), tgt,
                               what=f"sglang {choice.version}")
        if others:
            process.run([python, "-m", "pip", "uninstall", "-y", *others], error=ServeError, env=env, log=log_path,
                        what=f"removing {', '.join(others)} (another copy of {module})", timeout=600)
        pip_install(python, ["--no-deps", "--force-reinstall", wheel], what=f"installing {wheel.name}", env=env,
             log_path=log_path, folder=folder)
        pip_install(python, ["--no-deps", *(["--force-reinstall"] if isinstance(sglang, Path) else []), sglang],
             what=f"installing sglang {choice.version} (--no-deps)", env=env, log_path=log_path, folder=folder)
        after = environment.inspect(python, module, env)
        reqs = _needs(plan, after.sglang_requires, flags_only)
        if reqs:
            pip_install(python, ["-c", constraints, *reqs], env=env, log_path=log_path, folder=folder,
                 what=f"installing what sglang {choice.version} needs ({len(reqs)} requirements, torch "
                      f"{before.torch} kept)")
    return python
