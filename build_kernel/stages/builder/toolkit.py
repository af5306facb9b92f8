"""The one place the CUDA toolkit is chosen: the system's, or one assembled from PyPI wheels.

`choose` (cudawheels) decides from facts alone; `select` acts on it for a build (assembling
the wheel toolkit when needed), `describe` says what a build would take without
installing anything (for `plan` and `doctor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from build_kernel import log, toolchain
from build_kernel.errors import BuildKernelError
from build_kernel.plan import Plan
from build_kernel.stages.builder import cudawheels


@dataclass(frozen=True)
class Selected:
    facts: toolchain.Facts
    toolkit: cudawheels.Toolkit | None
    why: str

    @property
    def source(self) -> str:
        return "wheels" if self.toolkit else "system"

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        return self.toolkit.environ(base) if self.toolkit else dict(base)


def select(plan: Plan, python: str, *, offline: bool = False) -> Selected:
    """The toolkit this build compiles with, ready to use."""
    facts = toolchain.detect(python, plan.env)
    t = plan.recipe.toolchain
    cuda = facts.torch_cuda or t.cuda
    source, why = cudawheels.choose(t.cuda_source, facts, cuda, plan.archs)
    log.info(f"CUDA toolkit: {why}")
    if source == "system":
        return Selected(facts, None, why)
    with log.step(f"CUDA {cuda} toolkit from PyPI wheels"):
        tk = cudawheels.ensure_toolkit(plan.cache_dir, cuda, python=python, offline=offline, env=plan.env)
    return Selected(toolchain.detect(python, tk.environ(plan.env)), tk, why)


def describe(plan: Plan, facts: toolchain.Facts, *, python_exists: bool = True) -> dict[str, str | None]:
    """{"source", "why", "cached"}: what a build would take, installing nothing."""
    # Before its build env exists, the recipe's CUDA stands in for torch's.
    cuda = (facts.torch_cuda if python_exists else None) or plan.recipe.toolchain.cuda
    try:
        source, why = cudawheels.choose(plan.recipe.toolchain.cuda_source, facts, cuda, plan.archs)
    except BuildKernelError as exc:
        return {"source": "none", "why": exc.render(), "cached": None}
    cached = cudawheels.find_cached(plan.cache_dir, cuda, python=facts.python) if source == "wheels" else None
    return {"source": source, "why": why, "cached": str(cached.root) if cached else None}


def roots(selected: Selected) -> list[Path]:
    """The toolkit root(s) the build compiles and links with."""
    if selected.toolkit:
        return [selected.toolkit.root]
    return [Path(selected.facts.cuda_home)] if selected.facts.cuda_home else []


def cmake_defines(selected: Selected) -> dict[str, str]:
    """Torch's CMake config and the toolkit view it needs (nvrtc, cuBLAS headers...)."""
    facts = selected.facts
    defines: dict[str, str] = {}
    if facts.torch_cmake_prefix:
        defines["Torch_DIR"] = str(Path(facts.torch_cmake_prefix) / "Torch")
    defines.update(selected.toolkit.defines if selected.toolkit else toolchain.cmake_defines(facts))
    return defines
