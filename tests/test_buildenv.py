"""The build environment per toolchain spec: a real venv, cached, holding exactly that torch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from build_kernel import recipe, toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.plan import resolve
from build_kernel.stages.build import buildenv
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, write_recipe

pytestmark = [pytest.mark.slow, pytest.mark.network]


def test_env_per_torch_spec_is_made_once_and_pins_torch(project: Path, tmp_path: Path) -> None:
    # torch 2.13.0, a CPU build: from the local wheel folder where pip is configured with one, else PyPI.
    copy_series(project, sorted(p.name for p in (REPO_ROOT / "patches/minikernel/v1").glob("*.patch")), "v1")
    write_recipe(project, "r", demo_recipe_text().replace('torch = "existing"', 'torch = "2.13.0"'))
    plan = resolve(recipe.load("r", project), env={}, cache_dir=tmp_path / "cache")
    python = buildenv.python_for(plan)
    assert Path(python).is_relative_to(tmp_path / "cache" / "envs")
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert version.startswith("2.13.0")
    constraint = Path(python).parent.parent / "constraints.txt"
    assert constraint.read_text() == "torch==2.13.0\n"
    # A second resolution reuses it: same path, nothing installed.
    marker = Path(python).parent.parent / ".complete"
    before = marker.stat().st_mtime
    assert buildenv.python_for(plan) == python and marker.stat().st_mtime == before
    # The preflight then reads that env's torch: a CPU build cannot build CUDA kernels.
    facts = toolchain.detect(python, os.environ)
    problems = toolchain.preflight(facts, parse_arch_list("12.0a"), cmake_spec=">=3.26", want_cuda="13.0")
    assert any("torch 2.13.0+cpu is a CPU build: install a CUDA build of torch" in p for p in problems)
