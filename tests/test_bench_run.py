"""bench/miniature/side_by_side.py's projects: each series it builds applies to the miniature (`make bench` at HEAD could
not apply 0006-prune-arch-dispatch.patch to its no-arch copy)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT, run_cli

PATCHES = sorted(p.name for p in (REPO_ROOT / "patches/minikernel/v1").glob("*.patch"))


def _bench_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run", REPO_ROOT / "bench" / "miniature" / "side_by_side.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["v1", "noarch"])
def test_every_bench_series_applies_to_the_miniature(tmp_path: Path, version: str) -> None:
    bench = _bench_run()
    patches = PATCHES if version == "v1" else bench.upstream_arch_patches(PATCHES)
    proj = bench.project_with(tmp_path, patches, version)
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--json", "patch", "check",
                   "--recipe", str(proj / "recipes" / "demo.toml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows] == patches and all(r["state"].startswith("applies") for r in rows), rows
    if version == "noarch":  # upstream's own arch list: nothing that reads TORCH_CUDA_ARCH_LIST
        assert not [p for p in patches if "arch" in p or "fa3" in p], patches
    assert sys.modules.get("bench_run") is None  # loaded by path, not left importable
