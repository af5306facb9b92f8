"""The build environment per toolchain spec: a real venv, cached, holding exactly that torch.

The torch it installs is the one `make venv` installed here (the Makefile's `TORCH`, e.g.
torch==2.14.1), by its exact installed version: pip finds it again wherever make got it
(a local wheel folder or index in pip's configuration, or the package index). That costs
a second copy of torch (GBs, minutes) and may download: slow and network.
(The preflight's answer to a CPU build of torch is a unit test in test_toolchain.py.)
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from build_kernel import recipe, toolchain
from build_kernel.plan import resolve
from build_kernel.stages.builder import buildenv
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, write_recipe

pytestmark = [pytest.mark.slow, pytest.mark.network]


def installed_torch() -> str:
    """The exact version of the torch in this environment (the one `make venv` installed)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"no torch installed in {sys.prefix}: run `make venv` (it installs the Makefile's TORCH)")


def test_env_per_torch_spec_is_made_once_and_pins_torch(project: Path, tmp_path: Path) -> None:
    version = installed_torch()
    copy_series(project, sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split()), "v1")
    write_recipe(project, "r", demo_recipe_text().replace('torch = "existing"', f'torch = "{version}"'))
    plan = resolve(recipe.load("r", project), env={}, cache_dir=tmp_path / "cache")
    python = buildenv.python_for(plan)
    root = Path(python).parent.parent
    assert root.parent == tmp_path / "cache" / "envs" and root.name == buildenv.env_key(plan)
    # The env holds exactly that torch, the same build as this environment's (same CUDA).
    metadata = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert metadata == version
    here, there = toolchain.detect(sys.executable, os.environ), toolchain.detect(python, os.environ)
    assert (there.torch_version, there.torch_cuda) == (here.torch_version, here.torch_cuda), there
    assert Path(there.torch_cmake_prefix or "").is_relative_to(root)
    # Every later install there is constrained to it.
    assert (root / "constraints.txt").read_text() == f"torch=={version}\n"
    # A second resolution reuses it: same path, nothing installed.
    marker = root / ".complete"
    before = marker.stat().st_mtime
    assert buildenv.python_for(plan) == python and marker.stat().st_mtime == before
    # Another torch spec is another env (only resolved here, nothing installed); `existing` is this python.
    write_recipe(project, "other", demo_recipe_text().replace('torch = "existing"', 'torch = "2.13.0"'))
    other = resolve(recipe.load("other", project), env={}, cache_dir=tmp_path / "cache")
    other_python = buildenv.python_for(other, dry_run=True)
    assert other_python != python and Path(other_python).parent.parent.parent == root.parent
    assert not Path(other_python).exists()
    write_recipe(project, "here", demo_recipe_text())
    here_plan = resolve(recipe.load("here", project), env={}, cache_dir=tmp_path / "cache")
    assert buildenv.python_for(here_plan) == sys.executable

