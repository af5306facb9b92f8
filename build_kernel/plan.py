"""Resolve a recipe into the one plan every stage reads.

Precedence, lowest first (after cibuildwheel's OptionsReader): built-in default <
recipe < environment (`ARCH`, `MAX_JOBS`, `BUILD_KERNEL_CACHE_DIR`, `BUILD_KERNEL_OUTPUT_DIR`)
< command line. The archs: `--arch` > `ARCH` > `TORCH_CUDA_ARCH_LIST` (read as PyTorch's
cpp_extension reads it) > the recipe, and the plan says which one won.
Stage code never reads os.environ itself: it gets this plan.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import Any

from build_kernel import fa3_variants, targets
from build_kernel import mirrors as mirrors_config
from build_kernel.archs import Arch, ArchSpellingError, parse_arch_list, torch_arch_list
from build_kernel.errors import RecipeError
from build_kernel.recipe import Recipe
from build_kernel.resources import JobPlan, Resources, given_jobs, plan_jobs, probe
from build_kernel.series import Series, load_series


def environment() -> dict[str, str]:
    """A snapshot of the process environment: the one read of os.environ, by the CLI."""
    return dict(os.environ)


def recipe_search_path(env: Mapping[str, str]) -> tuple[Path, ...]:
    """Folders of a site's own recipes (BUILD_KERNEL_RECIPE_PATH, `:`-separated), for names in
    `--recipe` and `extends`, after the project's recipes/."""
    from build_kernel.recipe.load import SEARCH_ENV

    return tuple(Path(p).expanduser() for p in env.get(SEARCH_ENV, "").split(os.pathsep) if p)


def default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "build-kernel"


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    archs: tuple[Arch, ...]
    arch_source: str
    jobs: JobPlan
    series: Series
    cache_dir: Path
    output_dir: Path
    resources: Resources
    mirrors: mirrors_config.Mirrors = mirrors_config.Mirrors()
    # The FA3 kernels a 9.0a build compiles ([build] fa3*), resolved once: defines, plan and cache key agree.
    fa3: fa3_variants.Variants = fa3_variants.ALL
    # Which archs exist, as the toolkit the build would find lists them (or CUDA 13.0's list without one).
    toolkit: targets.Toolkit | None = None
    # A nightly's date (`20261207`, build-kernel nightly): the version gets `.dev20261207` (builder/devrelease.py).
    version_dev: str = ""
    # The environment the plan was resolved in: the base of every child's environment.
    # Stage code reads this, never os.environ.
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def remotes(self) -> list[mirrors_config.Rewrite]:
        """Every repository the plan fetches, with the rewrite in force for it (if any)."""
        urls = [self.recipe.source.repo] + [d.repo for d in self.recipe.deps if d.repo]
        return [self.mirrors.rewrite(u) for u in urls if mirrors_config.is_url(u)]

    @property
    def arch_list(self) -> str:
        return torch_arch_list(self.archs)

    @property
    def package_arch_list(self) -> str:
        """The arch list as the recipe's `arch_env` spells it (`80;90` for arch_format = "digits")."""
        if self.recipe.build.arch_format == "digits":
            return ";".join(f"{a.major}{a.minor}{a.suffix}" for a in self.archs)
        return self.arch_list

    def jobs_env(self, jobs: int) -> dict[str, str]:
        """Every variable a job count goes by: MAX_JOBS (torch's cpp_extension, setup.py rules), CMake's, the
        recipe's own; set, so no package's own guess (flash-attn's free-GB/9) ever runs."""
        names = ("MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", *([self.recipe.build.jobs_env] if self.recipe.build.jobs_env else []))
        return dict.fromkeys(names, str(jobs))

    def build_env(self) -> dict[str, str]:
        """Environment the build stage adds (recipe env last: it may override)."""
        b = self.recipe.build
        return {
            "TORCH_CUDA_ARCH_LIST": self.arch_list,
            **({b.arch_env: self.package_arch_list} if b.arch_env else {}),
            **({b.threads_env: str(b.nvcc_threads)} if b.threads_env else {}),
            **self.jobs_env(self.jobs.jobs),
            **b.env,
        }

    def to_dict(self) -> dict[str, Any]:
        r = self.recipe
        rows = targets.arch_rows(self.archs, r.verify, r.build.defines)  # what each asked arch gets, by verify's rules
        return {
            "recipe": {"name": r.name, "path": str(r.path), "digest": r.digest, "extends": r.extends or None},
            "origins": dict(r.origins),
            "source": {"repo": r.source.repo, "commit": r.source.commit, "ref": r.source.ref, "subdir": r.source.subdir},
            "patches": {
                "series": r.patches.series,
                "version": r.patches.version,
                "directory": str(self.series.directory),
                "digest": self.series.digest,
                "applies_to_commits": list(self.series.applies_to_commits),
                "patches": [
                    {"name": p.name, "sha256": p.sha256, "description": p.description} for p in self.series.patches
                ],
            },
            "toolchain": dict(vars(r.toolchain)),
            "archs": {"list": [a.torch for a in self.archs], "sm": [a.sm for a in self.archs],
                      "TORCH_CUDA_ARCH_LIST": self.arch_list, "source": self.arch_source, "fp4": r.build.fp4,
                      "toolkit": self.toolkit.source if self.toolkit else None,
                      "fp4_archs": targets.fp4_archs(rows), "per_arch": [asdict(row) for row in rows]},
            "jobs": self.jobs.to_dict(),
            "nvcc_threads": r.build.nvcc_threads,
            "backend": r.build.backend,
            "defines": dict(r.build.defines),
            "fa3": self.fa3.to_dict(),
            "env": self.build_env(),
            "deps": [{**vars(d), "paths": list(d.paths), "submodules": list(d.submodules)} for d in r.deps],
            "mirrors": {"config": str(self.mirrors.config_file) if self.mirrors.config_file else None,
                        "rewrites": [rw.to_dict() for rw in self.remotes() if rw.rewritten]},
            "verify": {k: [asdict(x) if is_dataclass(x) and not isinstance(x, type) else x for x in v]
                       if isinstance(v, tuple) else v
                       for k, v in vars(r.verify).items()},
            "serve": {"model": r.serve.model, "args": list(r.serve.args), "host": r.serve.host, "port": r.serve.port},
            "publish": {"target": r.publish.target, "targets": dict(r.publish.targets)},
            "cache_dir": str(self.cache_dir),
            "output_dir": str(self.output_dir),
            "resources": {"cpus": self.resources.cpus, "cpus_why": self.resources.cpus_why,
                          "memory_gb": round(self.resources.memory_gb, 2), "memory_why": self.resources.memory_why},
        }


# CPU architecture names a build system may export as ARCH (Debian, kernel and Yocto builds do).
_CPU_ARCH = re.compile(r"^(x86_64|x86|amd64|i[3-6]86|aarch64|arm64|arm\w*|ppc64\w*|powerpc\w*|s390x?|riscv\w*|mips\w*|"
                       r"loongarch\w*|sparc\w*|ia64)$", re.I)


def recipe_arg(recipe: Recipe) -> str:
    """How a hint names the recipe on a command line so that it works as written: its name when it
    is a shipped recipe (`recipes/NAME.toml`), else its path."""
    from build_kernel.recipe import recipes_dir

    return recipe.name if recipe.path == recipes_dir() / f"{recipe.name}.toml" else str(recipe.path)


TORCH_LIST = "TORCH_CUDA_ARCH_LIST"
# Where the archs may come from, strongest first: `--arch`, then these variables, then the recipe.
_ARCH_VARIABLES = ("ARCH", TORCH_LIST)


def _pick_archs(cli: str | None, env: Mapping[str, str]) -> tuple[str | None, str, str | None]:
    """(the arch list asked, who asked it, the variable it came from): `--arch` > ARCH > TORCH_CUDA_ARCH_LIST
    (every PyTorch extension build reads it; as there, an empty one is unset) > the recipe (None)."""
    if cli is not None:
        return cli, "command line", None
    for name in _ARCH_VARIABLES:
        if env.get(name, "").strip():
            return env[name], f"environment {name}", name
    return None, "recipe", None


def _same(text: str, archs: tuple[Arch, ...]) -> bool:
    """Whether an arch list, however spelled (`9.0a 12.0a`, `9.0a;12.0a`), asks for `archs` (make passes its ARCH both
    as --arch and in the environment)."""
    try:
        return parse_arch_list(text) == archs
    except ArchSpellingError:
        return False


def _unused(winner: str | None, cli: str | None, env: Mapping[str, str], archs: tuple[Arch, ...]) -> str:
    """A word on the weaker arch settings that were given but lost (`environment TORCH_CUDA_ARCH_LIST=9.0a not
    used: --arch wins`), so a plan read later says why the wheel is not for them; "" when none asks otherwise."""
    names: tuple[str, ...] = _ARCH_VARIABLES
    if cli is None:
        names = _ARCH_VARIABLES[_ARCH_VARIABLES.index(winner) + 1:] if winner else ()
    lost = [f"{name}={env[name].strip()}" for name in names if env.get(name, "").strip() and not _same(env[name], archs)]
    if not lost:
        return ""
    won = "--arch" if cli is not None else winner
    return f"; environment {', '.join(lost)} not used: {won} wins"


def _pick(cli: Any, env: Mapping[str, str], env_key: str, recipe_value: Any) -> tuple[Any, str]:
    if cli is not None:
        return cli, "command line"
    if env.get(env_key):
        return env[env_key], f"environment {env_key}"
    return recipe_value, "recipe"


def resolve(
    recipe: Recipe,
    *,
    env: Mapping[str, str] | None = None,
    arch: str | None = None,
    jobs: int | None = None,
    cache_dir: Path | None = None,
    output_dir: Path | None = None,
    resources: Resources | None = None,
) -> Plan:
    env = os.environ if env is None else env
    arch_value, arch_source, variable = _pick_archs(arch, env)
    # TORCH_CUDA_ARCH_LIST is a leftover as often as a choice (containers export one for torch's own builds, NGC's
    # "5.2 ... 9.0+PTX"): its refusal says how to set it aside.
    aside = f" (unset {TORCH_LIST}, or pass --arch 12.0a to override it)" if variable == TORCH_LIST else ""
    if arch_value is None:
        archs = recipe.build.arch
        where = f"recipe {recipe.name} build.arch ({recipe.origins.get('build.arch', recipe.path)})"
    else:
        try:
            resolved = targets.native(str(arch_value))
            archs = parse_arch_list(resolved)
        except ArchSpellingError as exc:
            # Build systems often export ARCH as the CPU (x86_64, aarch64): say where it came from and how to stop it.
            cpu = variable == "ARCH" and _CPU_ARCH.match(str(arch_value).strip())
            fix = (f" (ARCH={arch_value} names a CPU, as build systems often set it, not a CUDA arch: unset ARCH, or "
                   "pass --arch 12.0a to override it)" if cpu else aside)
            raise RecipeError([f"{arch_source}: arch: {exc}{fix}"]) from None
        # `native` says what it became, so a plan read later still tells which GPUs it was made on.
        where = arch_source if resolved == str(arch_value) else \
            f"{arch_source}: {arch_value} = {resolved}, the GPUs the driver reports"
    kit = targets.toolkit(env)
    b = recipe.build
    problems = [f"{where}: arch: {msg}{aside}" for msg in targets.problems(
        archs, kit, min_arch=b.min_arch, min_arch_reason=b.min_arch_reason, source=f"recipe {recipe.name}")]
    if arch_value is not None and (fp4 := targets.fp4_problem(archs, b.fp4, recipe.name)):
        problems.append(f"{arch_source}: arch: {fp4}{aside}")
    if problems:
        raise RecipeError(problems)
    res = resources or probe()
    jobs_value, jobs_source = _pick(jobs, env, "MAX_JOBS", recipe.build.jobs)
    if jobs_value == "auto":
        job_plan = plan_jobs(res, job_memory_gb=b.job_memory_gb, nvcc_threads=b.nvcc_threads,
                             n_archs=len(archs), reserve_gb=b.reserve_gb)
    else:
        try:
            n = int(jobs_value)
            if n < 1:
                raise ValueError
        except ValueError:
            fix = ("pass --jobs N with N >= 1, or leave it out for the recipe's" if jobs_source == "command line"
                   else f"e.g. {jobs_source.split()[-1]}=8 or {jobs_source.split()[-1]}=auto" if jobs_source.startswith("environment")
                   else 'e.g. jobs = 8 or jobs = "auto"')
            raise RecipeError([f"{jobs_source}: jobs: {jobs_value} is not a positive number ({fix})"]) from None
        job_plan = given_jobs(n, jobs_source, res, job_memory_gb=b.job_memory_gb, nvcc_threads=b.nvcc_threads,
                              n_archs=len(archs), reserve_gb=b.reserve_gb)
    cache, _ = _pick(cache_dir, env, "BUILD_KERNEL_CACHE_DIR", None)
    output, _ = _pick(output_dir, env, "BUILD_KERNEL_OUTPUT_DIR", None)
    series = load_series(recipe.series_dir)
    return Plan(
        recipe=recipe,
        archs=archs,
        arch_source=(where if arch_value is not None else "recipe") + _unused(variable, arch, env, archs),
        jobs=job_plan,
        series=series,
        # Absolute: git runs in other folders (`git -C <worktree>`), so a relative cache would miss.
        cache_dir=Path(cache).absolute() if cache else default_cache_dir(env),
        output_dir=Path(output).absolute() if output else recipe.root / "wheels",
        resources=res,
        mirrors=mirrors_config.load(env),
        fa3=_fa3(recipe, archs, series, env),
        toolkit=kit,
        env=dict(env),
    )


def _fa3(recipe: Recipe, archs: tuple[Arch, ...], series: Series, env: Mapping[str, str]) -> fa3_variants.Variants:
    b = recipe.build
    if b.fa3 == "all":
        return fa3_variants.ALL
    if not any(a.major == 9 for a in archs):
        # sgl-kernel compiles FA3 for 9.0a only: nothing to choose, and no model config to look for.
        return replace(fa3_variants.ALL, why=f"fa3 = \"{b.fa3}\" not read: FA3 is compiled for 9.0a only, and none is asked")
    if not fa3_variants.series_reads_choice([p.path for p in series.patches]):
        raise RecipeError([f"build.fa3 = \"{b.fa3}\": series {recipe.patches.series}/{recipe.patches.version} has no "
                           f"patch that reads {fa3_variants.SERIES_MARK}, so every FA3 kernel would compile anyway; "
                           "use series sm120 v8 or later, or set fa3 = \"all\""])
    return fa3_variants.resolve(b.fa3, head_dims=b.fa3_head_dims, dtypes=b.fa3_dtypes, softcap=b.fa3_softcap,
                                model=recipe.serve.model, serve_args=recipe.serve.args, env=env)
