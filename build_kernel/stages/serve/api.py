"""Names sglang imports from the kernel package that our wheel does not define, read statically.

A kernel snapshot and an sglang release drift apart: sgl-kernel at SGLang main 6ffc74ef no
longer exports `awq_marlin_moe_repack`, which sglang 0.5.9 imports at start on CUDA, so
the server dies with an ImportError after minutes of loading. Both sides are read as
source (no import, so no GPU): sglang's imports at module level or under an `if` whose test
names cuda (its `if _is_cuda:` idiom; ROCm/NPU branches, try blocks and modules named for
another platform, `hardware_backend/xpu/`, `xpu_backend.py`, are not counted);
the wheel's names from every branch of its package's top-level code, following
`from .x import *`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

from build_kernel import atomic


def _cuda_imports(body: list[ast.stmt], module: str) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module == module and node.level == 0:
            yield from (a.name for a in node.names if a.name != "*")
        elif isinstance(node, ast.If) and "cuda" in ast.unparse(node.test).lower():
            yield from _cuda_imports(node.body, module)


# Modules of another platform (sglang 0.5.23: srt/hardware_backend/xpu/..., layers/attention/xpu_backend.py
# import sgl-kernel-xpu's names at module level); a CUDA server never imports them.
OTHER_PLATFORMS = frozenset({"xpu", "npu", "hip", "rocm", "musa", "hpu", "mlu", "ascend", "metal", "mps"})


def _other_platform(rel: Path) -> bool:
    return any(token in OTHER_PLATFORMS for part in (*rel.parts[:-1], rel.stem) for token in part.split("_"))


def imported_by(package_root: Path, module: str) -> dict[str, list[str]]:
    """name -> files of `package_root` that import it from `module` at start on CUDA."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_root.rglob("*.py")):
        rel = path.relative_to(package_root)
        if {"test", "tests", "benchmark", "bench"} & set(rel.parts[:-1]) or _other_platform(rel):
            continue
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for name in _cuda_imports(tree.body, module):
            found.setdefault(name, []).append(str(path.relative_to(package_root)))
    return found


def _defined(body: list[ast.stmt], star: list[str]) -> Iterator[str]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*" and isinstance(node, ast.ImportFrom):
                    star.append(("." * node.level) + (node.module or ""))
                else:
                    yield a.asname or a.name.split(".")[0]
        elif isinstance(node, ast.Assign):
            yield from (t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            yield node.target.id
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for part in ("body", "orelse", "finalbody", "handlers"):
                for sub in getattr(node, part, []):
                    yield from _defined(sub.body if isinstance(sub, ast.ExceptHandler) else [sub], star)


def defined_by_wheel(wheel: Path, module: str) -> set[str] | None:
    """Top-level names of `module` as the wheel ships it; None when the wheel has no such package."""
    with zipfile.ZipFile(wheel) as zf:
        sources = {n: zf.read(n).decode(errors="replace") for n in zf.namelist()
                   if n.startswith(module + "/") and n.endswith(".py")}
    return defined(sources, module)


def defined_installed(root: Path, module: str) -> set[str] | None:
    """Top-level names of `module` as installed under `root` (site-packages); None without the package."""
    sources = {p.relative_to(root).as_posix(): p.read_text(errors="replace") for p in (root / module).rglob("*.py")}
    return defined(sources, module)


def defined(sources: dict[str, str], module: str) -> set[str] | None:
    """Top-level names of `module` from its sources ({"pkg/x.py": text}), following `from .x import *`."""
    if f"{module}/__init__.py" not in sources:
        return None
    names: set[str] = set()
    todo, seen = [f"{module}/__init__.py"], set()
    while todo:
        path = todo.pop()
        if path in seen or path not in sources:
            continue
        seen.add(path)
        star: list[str] = []
        try:
            names |= set(_defined(ast.parse(sources[path]).body, star))
        except SyntaxError:
            continue
        for target in star:
            dots = len(target) - len(target.lstrip("."))
            base = Path(path).parent if dots else Path()
            for _ in range(max(dots - 1, 0)):
                base = base.parent
            rel = (base / target.lstrip(".").replace(".", "/")).as_posix()
            todo += [f"{rel}.py", f"{rel}/__init__.py"]
    return names


def missing(wheel: Path, module: str, sglang_root: Path, *, cache_dir: Path | None = None) -> dict[str, list[str]]:
    """What sglang imports from `module` on CUDA that the wheel does not define (cached: reading
    sglang's ~1,000 files takes seconds)."""
    st = wheel.stat()
    key = hashlib.sha256(json.dumps([str(sglang_root.resolve()), sglang_root.stat().st_mtime_ns, wheel.name,
                                     st.st_size, st.st_mtime_ns, module]).encode()).hexdigest()[:20]
    cached = cache_dir / f"{key}.json" if cache_dir else None
    if cached is not None and cached.is_file():
        result: dict[str, list[str]] = json.loads(cached.read_text())
        return result
    have = defined_by_wheel(wheel, module)
    result = {} if have is None else {
        name: files for name, files in imported_by(sglang_root, module).items() if name not in have}
    if cached is not None:
        atomic.write_text(cached, json.dumps(result))
    return result
