"""The toolchain a recipe's build will use, as `doctor --recipe` and `plan` judge it.

A build runs in its own environment (one virtualenv per torch pin, `stages/builder/buildenv.py`), so the
torch that matters is that environment's, not the one running build-kernel. When that environment is
built, its interpreter is asked (torch, its CUDA and C++ standard; cmake and ninja beside it). When it
is not, nothing is installed to find out: this host's tools are asked, and torch is taken from the
recipe's pin (`2.12.0.dev20260307+cu130`: version, and CUDA 13.0 from its local label).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from build_kernel import toolchain
from build_kernel.plan import Plan, recipe_arg


@dataclass(frozen=True)
class Stack:
    facts: toolchain.Facts
    python: str
    """The build environment's interpreter (it may not exist yet)."""
    built: bool
    note: str | None = None
    """Said when the facts come from the recipe's pins rather than the environment itself."""

    def to_dict(self) -> dict[str, Any]:
        return {"python": self.python, "built": self.built, "note": self.note}


def cuda_of(torch: str) -> str | None:
    """CUDA major.minor from a torch version's local label: `+cu130` is 13.0, `+cu128` 12.8 (None: no label)."""
    m = re.search(r"\+cu(\d{2,3})$", torch)
    return f"{m.group(1)[:-1]}.{m.group(1)[-1]}" if m else None


def resolve(plan: Plan) -> Stack:
    """The recipe's stack, installing nothing."""
    from build_kernel.stages.builder import buildenv

    python = buildenv.python_for(plan, dry_run=True)
    if Path(python).exists():
        return Stack(toolchain.detect(python, plan.env), python, True)
    from build_kernel.stages.builder import wheelpins

    pinned = wheelpins.of(plan)  # `nightly` is the version the lock holds for it, when it does
    pin = (wheelpins.version(plan, pinned[0]) if pinned else None) or plan.recipe.toolchain.torch
    here = toolchain.detect(sys.executable, plan.env)
    # Only the pin's version and CUDA are known: nothing read from this interpreter's torch may stand in
    # for them (its headers' C++ standard included).
    facts = replace(here, torch_version=pin, torch_cuda=cuda_of(pin) or plan.recipe.toolchain.cuda or None,
                    torch_cmake_prefix=None, torch_nvidia_dir=None, torch_cxx_standard=None)
    note = (f"the recipe's build environment (torch {pin}) is not built yet ({python}): judged from the recipe's "
            f"pins and this host's tools; `build-kernel build --recipe {recipe_arg(plan.recipe)}` makes it")
    return Stack(facts, python, False, note)


def series_warning(plan: Plan) -> str | None:
    """The recipe pairs its series with a commit the series does not list (its info.toml)."""
    s, commit = plan.series, plan.recipe.source.commit
    if not s.applies_to_commits or commit in s.applies_to_commits:
        return None
    return (f"series {s.name} does not list commit {commit[:12]} in {s.directory / 'info.toml'} (applies_to_commits): "
            f"check it with `build-kernel patch check --recipe {recipe_arg(plan.recipe)}`, then add the commit there")
