"""The verdict in one line, and the fix: the recipe (and archs) that builds what this machine needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from build_kernel import recipe
from build_kernel.archs import Arch
from build_kernel.errors import BuildKernelError
from build_kernel.stages.serve.environment import KERNEL_DISTRIBUTIONS
from build_kernel.stages.serve.preflight import same_torch
from build_kernel.stages.verify.installed.torch_abi import TorchHere, pinned

# The recipe of the package doctor examines by default: the last SGLang main with the NVFP4 kernels in the
# prebuilt library (6ffc74ef).
DEFAULT_RECIPE = "nightly-cu130"


@dataclass(frozen=True)
class Problem:
    # "installed" | "record" | "cuda" | "torch" | "arch" | "fp4" | "api"
    kind: str
    text: str
    # None: the recipe's build command is the fix.
    fix: str | None = None


def kernel_pin(sglang_requires: Sequence[str]) -> str | None:
    """The kernel version sglang pins (`<kernel>==0.3.21`, serve's KERNEL_DISTRIBUTIONS), if it pins one exactly."""
    return pinned(sglang_requires, KERNEL_DISTRIBUTIONS)


def _release_recipe(public: str, module: str, available: Sequence[str]) -> str | None:
    """The recipe named `<anything>-<public>` that verifies `module` (`<package>-0.3.21` builds 0.3.21)."""
    for name in sorted(n for n in available if n.endswith(f"-{public}")):
        try:
            modules = recipe.load(name).verify.import_modules
        except BuildKernelError:
            continue
        if any(m.split(".")[0] == module for m in modules):
            return name
    return None


def choose_recipe(*, given: str | None, built_by: str | None, version: str | None, sglang_pin: str | None,
                  available: Sequence[str], module: str = "") -> tuple[str, str]:
    """(recipe, why): the one asked for; the one that built it; the release recipe of its version or of
    the version sglang pins (a recipe `*-<version>` that verifies `module`); else the default recipe."""
    if given:
        return given, "--recipe"
    if built_by and built_by in available:
        return built_by, "the recipe that built it"
    for v, why in ((version, "its version's release"), (sglang_pin, "the kernel the installed sglang pins")):
        try:
            public = Version(v).public if v else None
        except InvalidVersion:
            public = None
        if public and module and (found := _release_recipe(public, module, available)):
            return found, why
    return DEFAULT_RECIPE, "the default recipe (its [verify] package, built ahead of time with NVFP4: 6ffc74ef)"


def command(name: str, archs: Sequence[Arch]) -> str:
    """`build-kernel --recipe R --arch L` (the recipe's own archs when none is known here)."""
    arch_list = ",".join(a.torch for a in archs)
    if not arch_list:
        try:
            arch_list = ",".join(a.torch for a in recipe.load(name).build.arch)
        except BuildKernelError:
            return f"build-kernel --recipe {name}"
    return f"build-kernel --recipe {name} --arch {arch_list}"


def recipe_notes(name: str, torch: TorchHere) -> list[str]:
    """Where the recipe's build would not match this interpreter's torch (it builds against its own)."""
    try:
        t = recipe.load(name).toolchain
    except BuildKernelError:
        return []
    notes = []
    if t.torch != "existing" and torch.version and not same_torch(t.torch, torch.version):
        notes.append(f"recipe {name} builds against torch {t.torch} (its toolchain torch); this interpreter has "
                     f"{torch.version}: serve the build with that torch, or extend the recipe with "
                     "torch = \"existing\" and run build-kernel from this interpreter")
    if t.cuda and torch.cuda and t.cuda.split(".")[0] != torch.cuda.split(".")[0]:
        notes.append(f"recipe {name} builds for CUDA {t.cuda}; this torch is CUDA {torch.cuda}: install a "
                     f"cu{t.cuda.replace('.', '')} torch to use it")
    return notes


def line(label: str, problems: Sequence[Problem], fix: str, healthy: str) -> str:
    if not problems:
        return f"{label} is healthy here: {healthy}"
    first = problems[0]
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    return f"{label} {first.text}: {first.fix or fix}{more}"
