"""The house's own rules, counted by bench/code_health/code_metrics.py on the package itself: one runner of
programs (build_kernel/process.py imports `subprocess`, nothing else does) and one reader of the
environment (plan, mirrors, process: configuration; stage code gets the plan's)."""

from __future__ import annotations

import importlib.util
from typing import Any

from tests.conftest import REPO_ROOT


def _metrics() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("code_metrics", REPO_ROOT / "bench" / "code_health" / "code_metrics.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result: dict[str, Any] = module.metrics(REPO_ROOT / "build_kernel")
    return result


def test_one_runner_of_programs() -> None:
    assert _metrics()["subprocess_imports_outside_process"] == []


def test_one_reader_of_the_environment() -> None:
    assert _metrics()["os_environ_reads_outside_configuration"] == []



def test_no_package_folder_is_named_like_build_output() -> None:
    """Tools that skip `build/` and `dist/` (and people skimming a tree) must still see every stage."""
    root = REPO_ROOT / "build_kernel"
    named = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_dir() and p.name in ("build", "dist", "out", "_build") and "__pycache__" not in p.parts)
    assert named == []
