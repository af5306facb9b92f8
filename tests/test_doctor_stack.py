"""doctor --recipe judges the recipe's own stack, and advises only series that apply (issue 39, item 3).

Real recipe and series files in a project under tmp_path, the real CLI. The recipes pin a torch whose
build environment is not built here, so doctor must judge from the pin (and say so), not from the torch of
the interpreter running build-kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli, write_recipe, write_series

A, B, C = "a" * 40, "b" * 40, "c" * 40


def _series(project: Path) -> None:
    write_series(project, "s", "v17", {}, info=f'cxx_standard = 17\napplies_to_commits = ["{A}", "{B}"]\n')
    write_series(project, "s", "v8", {}, info=f'cxx_standard = "torch"\napplies_to_commits = ["{B}"]\n')
    write_series(project, "s", "v9", {}, info=f'cxx_standard = "torch"\napplies_to_commits = ["{A}"]\n')


def _recipe(project: Path, *, commit: str, torch: str, version: str = "v17") -> Path:
    return write_recipe(project, "r", f"""
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{commit}"
        [patches]
        series = "s"
        version = "{version}"
        [toolchain]
        cuda = "13.0"
        torch = "{torch}"
        torch_index = "https://download.pytorch.org/whl/cu130"
        [build]
        arch = ["12.0a"]
        """)


def _doctor(recipe: Path, tmp_path: Path) -> tuple[int, dict[str, object], str]:
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_cli("doctor", "--recipe", str(recipe), "--json", env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "cache" / "envs").exists()  # doctor installs nothing
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _own_torch() -> str | None:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip() or None


def test_doctor_judges_the_recipes_torch_pin_not_its_own(project: Path, tmp_path: Path) -> None:
    _series(project)
    pin = "2.12.0.dev20260307+cu130"
    _, data, _ = _doctor(_recipe(project, commit=A, torch=pin), tmp_path)
    tools = data["tools"]
    assert isinstance(tools, dict)
    assert tools["torch_version"] == pin and tools["torch_cuda"] == "13.0"
    stack = data["stack"]
    assert isinstance(stack, dict) and not stack["built"] and "not built yet" in str(stack["note"])
    problems = data["problems"]
    assert isinstance(problems, list)
    # Whatever torch runs build-kernel (2.14 here needs C++20), the recipe's 2.12 accepts the series' C++17.
    assert not [p for p in problems if "C++" in p], problems
    if _own_torch() and _own_torch() != pin:
        assert _own_torch() not in json.dumps(problems)


def test_doctor_advises_only_a_series_that_applies_to_the_commit(project: Path, tmp_path: Path) -> None:
    _series(project)
    for commit, advised, not_advised in ((A, "v9", "v8"), (B, "v8", "v9")):
        code, data, _ = _doctor(_recipe(project, commit=commit, torch="2.14.1+cu130"), tmp_path)
        assert code == 3
        [cxx] = [p for p in data["problems"] if "C++20" in p]  # type: ignore[union-attr]
        assert cxx.startswith("torch 2.14.1+cu130 needs C++20") and f'"{advised}"' in cxx and not_advised not in cxx


def test_doctor_advises_no_series_when_none_applies(project: Path, tmp_path: Path) -> None:
    _series(project)
    # v17 itself does not list C: plan and doctor say so; no sibling lists it either: none is advised.
    code, data, _ = _doctor(_recipe(project, commit=C, torch="2.14.1+cu130"), tmp_path)
    assert code == 3
    [cxx] = [p for p in data["problems"] if "C++20" in p]  # type: ignore[union-attr]
    assert "v8" not in cxx and "v9" not in cxx and "add a patch" in cxx


def test_plan_warns_when_the_series_does_not_list_the_commit(project: Path, tmp_path: Path) -> None:
    _series(project)
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    # torch "existing": a pin from PyTorch's index, unreachable here, would make plan exit 3 (issue 66 item 1).
    proc = run_cli("plan", "--recipe", str(_recipe(project, commit=A, torch="existing", version="v8")), env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"series s/v8 does not list commit {A[:12]}" in proc.stderr
    assert "patch check" in proc.stderr
    ok = run_cli("plan", "--recipe", str(_recipe(project, commit=B, torch="existing", version="v8")), env=env)
    assert ok.returncode == 0 and "does not list" not in ok.stderr


@pytest.mark.parametrize("torch", ["existing"])
def test_doctor_with_torch_existing_judges_this_interpreter(project: Path, tmp_path: Path, torch: str) -> None:
    _series(project)
    _, data, _ = _doctor(_recipe(project, commit=A, torch=torch), tmp_path)
    stack = data["stack"]
    assert isinstance(stack, dict) and stack["built"] and stack["python"] == sys.executable
