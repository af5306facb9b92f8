"""`make clean` removes what the targets made and keeps `.venv`; `make distclean` removes `.venv` too
(issue 66 item 5). The real make runs the repository's Makefile in a throw-away copy of the tree's outputs
(these targets depend on nothing: no venv is made)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

MADE = ["wheels/demo-0.1.0+cu130-cp311-cp311-linux_x86_64.whl",
        "wheels/demo-0.1.0+cu130-cp311-cp311-linux_x86_64.whl.verify.json",
        "wheels/demo-0.1.0+cu130-cp311-cp311-linux_x86_64.whl.verify.sm_100a.json",
        "wheels/demo-0.1.0+cu130-cp311-cp311-linux_x86_64.whl.tests.json",
        "wheels/simple/index.html", "wheels/simple/demo/index.html",
        "wheels/published/demo-0.1.0+cu130-cp311-cp311-linux_x86_64.whl", "wheels/published/simple/index.html",
        "build/lib/x.py", "dist/x.tar.gz"]
KEPT = ["wheels/README.md", ".venv/bin/python", ".venv/.installed", "build_kernel.egg-info/PKG-INFO",
        "recipes/demo.toml"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.fail("make is not installed: the Makefile is how README's commands run")
    shutil.copy2(REPO_ROOT / "Makefile", tmp_path / "Makefile")
    for rel in MADE + KEPT:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    return tmp_path


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "Makefile"}


def test_make_clean_keeps_the_venv(tree: Path) -> None:
    proc = subprocess.run(["make", "clean"], check=False, cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert files(tree) == set(KEPT)
    assert not (tree / "wheels/published").exists() and not (tree / "wheels/simple").exists()
    again = subprocess.run(["make", "clean"], check=False, cwd=tree, capture_output=True, text=True)  # nothing left: still fine
    assert again.returncode == 0, again.stderr


def test_make_distclean_removes_the_venv_too(tree: Path) -> None:
    proc = subprocess.run(["make", "distclean"], check=False, cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert files(tree) == {"wheels/README.md", "recipes/demo.toml"}
    assert not (tree / ".venv").exists()
