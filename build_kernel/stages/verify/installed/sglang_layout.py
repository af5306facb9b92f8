"""Where an installed sglang keeps its kernels, read from its files (nothing imported).

Two layouts are known:
- `sglang/jit_kernel/` (from f88acf878, 2026-03-07): the JIT of NVFP4 is `jit_kernel/nvfp4.py`,
  defining `scaled_fp4_quant` & co, with its CUDA sources under `jit_kernel/csrc/`.
- `sglang/kernels/` (RFC #29630; seen in the PyPI wheel of sglang 0.5.23, which has no
  `jit_kernel/` any more): op wrappers in `kernels/ops/<group>/<op>.py`, the JIT infrastructure in
  `kernels/jit/` with the CUDA sources in `kernels/jit/csrc/`; each JIT op calls
  `load_jit(cuda_files=[...])` on paths relative to that folder (0.5.23's NVFP4 one:
  `kernels/ops/gemm/sm120_nvfp4_moe.py` loads `gemm/sm120_nvfp4_moe_mtp_mma.cuh`). The ahead-of-time
  kernels are still the `sgl_kernel` package of the `sglang-kernel` distribution it pins
  (`Requires-Dist: sglang-kernel==0.4.10`); their source tree, `kernels/aot/`, is in a checkout of the
  repository but not in the wheel (kernels/README.md says so). So doctor keeps reading `sgl_kernel`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

OLD_JIT_MODULE = "jit_kernel/nvfp4.py"
OLD_JIT_SOURCES = "jit_kernel/csrc"
KERNELS = "kernels"
OPS = "kernels/ops"
JIT_SOURCES = "kernels/jit/csrc"
AOT = "kernels/aot"


@dataclass(frozen=True)
class Layout:
    # "sglang.kernels" | "sglang.jit_kernel" | "" (neither: an sglang from before the JIT)
    name: str
    aot_tree: bool  # kernels/aot/ is there: a checkout, whose sgl_kernel source is not what Python imports

    def describe(self, kernel_pin: str | None) -> str:
        if self.name == "sglang.kernels":
            aot = (f"sglang/{AOT}/ holds the source of sgl_kernel (not imported)" if self.aot_tree
                   else "ahead-of-time kernels from sgl_kernel")
            pin = f" (pins sglang-kernel=={kernel_pin})" if kernel_pin else ""
            return f"sglang.kernels: ops in sglang/{OPS}/, JIT sources in sglang/{JIT_SOURCES}/; {aot}{pin}"
        if self.name == "sglang.jit_kernel":
            return "sglang.jit_kernel: JIT sources in sglang/jit_kernel/csrc/; ahead-of-time kernels from sgl_kernel"
        return "no JIT kernels: every kernel from sgl_kernel"


def of(sglang_root: str | Path) -> Layout:
    root = Path(sglang_root)
    if (root / KERNELS / "__init__.py").is_file() and (root / JIT_SOURCES).is_dir():
        return Layout("sglang.kernels", (root / AOT).is_dir())
    if (root / "jit_kernel").is_dir():
        return Layout("sglang.jit_kernel", False)
    return Layout("", False)


def _old_nvfp4_jit(root: Path, names: tuple[str, ...]) -> str | None:
    module = root / OLD_JIT_MODULE
    if not module.is_file():
        return None
    try:
        tree = ast.parse(module.read_text(errors="replace"))
    except SyntaxError:
        return None
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    sources = [p for p in (root / OLD_JIT_SOURCES).rglob("*") if "nvfp4" in p.name and p.suffix in (".cuh", ".cu")]
    if not (defined & set(names)) or not sources:
        return None
    return f"{module} ({len(sources)} nvfp4 CUDA sources under {OLD_JIT_SOURCES}/)"


def _loaded_sources(tree: ast.AST) -> list[str]:
    """The `cuda_files` of every `load_jit(...)` call in a module (string constants only)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name != "load_jit":
            continue
        for kw in node.keywords:
            if kw.arg == "cuda_files" and isinstance(kw.value, (ast.List, ast.Tuple)):
                found += [e.value for e in kw.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return found


def _new_nvfp4_jit(root: Path) -> str | None:
    """The ops that JIT-compile NVFP4 sources sglang ships: a source named in a `load_jit` that exists."""
    modules: list[str] = []
    sources: set[str] = set()
    for path in sorted((root / OPS).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue
        here = [s for s in _loaded_sources(tree) if "nvfp4" in s and (root / JIT_SOURCES / s).is_file()]
        if here:
            modules.append(str(path))
            sources.update(here)
    if not modules:
        return None
    return f"{', '.join(modules)} ({len(sources)} nvfp4 CUDA sources under {JIT_SOURCES}/)"


def nvfp4_jit(sglang_root: str | None, names: tuple[str, ...]) -> str | None:
    """Where this sglang JIT-compiles NVFP4 (its module(s) and sources), in either layout; None if nowhere.
    `names`: the FP4 functions the old layout's module defines (the recipe's FP4 ops)."""
    if not sglang_root:
        return None
    root = Path(sglang_root)
    layout = of(root)
    if layout.name == "sglang.kernels":
        return _new_nvfp4_jit(root)
    return _old_nvfp4_jit(root, names)
