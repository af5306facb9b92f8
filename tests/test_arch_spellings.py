"""The ecosystem's arch-list spellings (issue 66 item 4): `ARCH` through a real make with `;`, spaces or commas;
`TORCH_CUDA_ARCH_LIST` read as PyTorch's cpp_extension reads it; the order `--arch` > `ARCH` >
`TORCH_CUDA_ARCH_LIST` > the recipe, and the plan saying which one won.

Seen before: `make wheel RECIPE=demo ARCH="9.0a;12.0a"` printed the help and `/bin/sh: 1: 12.0a: not found`,
`ARCH="12.0a 9.0a"` gave `No such command '9.0a'`, and `TORCH_CUDA_ARCH_LIST=9.0a build-kernel build --recipe demo`
silently built 12.0a."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.archs import ArchSpellingError, parse_arch_list
from build_kernel.errors import RecipeError
from build_kernel.plan import resolve
from build_kernel.resources import Resources
from tests.conftest import REPO_ROOT, run_cli

RES = Resources(cpus=16, cpus_why="test", memory_bytes=64 * 1024**3, memory_why="test")
BIN = str(Path(sys.executable).parent)  # this interpreter's build-kernel, whatever .venv the checkout has
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this host")


def make(*args: str) -> subprocess.CompletedProcess[str]:
    """The real Makefile; `-o .venv/.installed`: never (re)install the environment, whatever its age."""
    return subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", f"BIN={BIN}", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False,
                          env={**_clean_env(), "NO_COLOR": "1", "COLUMNS": "200"})


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("ARCH", "TORCH_CUDA_ARCH_LIST", "MAKEFLAGS")}


@needs_make
@pytest.mark.parametrize("given", ["9.0a;12.0a", "9.0a 12.0a", "9.0a,12.0a", " 9.0a ; 12.0a, "])
def test_make_passes_any_spelling_as_one_quoted_word(given: str) -> None:
    proc = make("-n", "wheel", "RECIPE=demo", f"ARCH={given}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"{BIN}/build-kernel --arch '9.0a,12.0a' build --recipe demo" in lines
    assert f"{BIN}/build-kernel --arch '9.0a,12.0a' verify --recipe demo" in lines
    # No ARCH: no flag at all, the recipe's (or the environment's) archs.
    assert f"{BIN}/build-kernel  plan --recipe demo" in make("-n", "plan", "RECIPE=demo").stdout.splitlines()


@needs_make
def test_make_plan_with_a_spaced_arch_list_runs_for_real() -> None:
    proc = make("plan", "RECIPE=demo", "ARCH=9.0a 12.0a")
    assert proc.returncode == 0, proc.stderr
    assert "not found" not in proc.stderr and "No such command" not in proc.stderr
    [archs] = [line for line in proc.stdout.splitlines() if line.startswith("archs")]
    # make also exports ARCH to the command's environment: the same list, so not reported as overridden.
    assert archs.split(None, 1)[1].startswith("9.0a;12.0a (from command line; checked against ")


def _plan(env: dict[str, str], arch: str | None = None) -> tuple[str, str]:
    p = resolve(recipe.load("demo"), env=env, arch=arch, resources=RES)
    return p.arch_list, p.arch_source


def test_arch_then_environment_then_torch_list_then_recipe() -> None:
    assert _plan({}) == ("12.0a", "recipe")
    assert _plan({"TORCH_CUDA_ARCH_LIST": "9.0a"}) == ("9.0a", "environment TORCH_CUDA_ARCH_LIST")
    assert _plan({"TORCH_CUDA_ARCH_LIST": "9.0a", "ARCH": "12.0a"}) == (
        "12.0a", "environment ARCH; environment TORCH_CUDA_ARCH_LIST=9.0a not used: ARCH wins")
    assert _plan({"TORCH_CUDA_ARCH_LIST": "9.0a", "ARCH": "9.0a;12.0a"}, arch="12.0a") == (
        "12.0a", "command line; environment ARCH=9.0a;12.0a, TORCH_CUDA_ARCH_LIST=9.0a not used: --arch wins")
    # Empty is unset, as in torch; the same list however spelled is no conflict.
    assert _plan({"TORCH_CUDA_ARCH_LIST": "", "ARCH": " "}) == ("12.0a", "recipe")
    assert _plan({"TORCH_CUDA_ARCH_LIST": "12.0a"}, arch="12.0a") == ("12.0a", "command line")


def test_torch_list_spellings_as_cpp_extension_reads_them() -> None:
    # `;`, spaces, +PTX and torch's family names (torch.utils.cpp_extension's named_arches).
    assert _plan({"TORCH_CUDA_ARCH_LIST": "8.0 9.0a"})[0] == "8.0;9.0a"
    assert _plan({"TORCH_CUDA_ARCH_LIST": "8.0;9.0a;12.0a+PTX"})[0] == "8.0;9.0a;12.0a+PTX"
    assert _plan({"TORCH_CUDA_ARCH_LIST": "Ampere Hopper"})[0] == "8.0;8.6+PTX;9.0+PTX"
    assert [a.torch for a in parse_arch_list("Blackwell")] == ["10.0", "10.3", "12.0", "12.1+PTX"]
    with pytest.raises(ArchSpellingError, match="unknown arch 'Fermi'"):
        parse_arch_list("Fermi;9.0a")


def test_a_containers_old_torch_list_is_refused_with_the_way_out() -> None:
    with pytest.raises(RecipeError) as info:
        _plan({"TORCH_CUDA_ARCH_LIST": "5.2 9.0+PTX"})
    [line] = info.value.problems
    assert line.startswith("environment TORCH_CUDA_ARCH_LIST: arch: 5.2: not an arch this toolkit can target")
    assert line.endswith("(unset TORCH_CUDA_ARCH_LIST, or pass --arch 12.0a to override it)")
    with pytest.raises(RecipeError, match=r"^environment TORCH_CUDA_ARCH_LIST: arch: unknown arch 'sm_9x'.*"
                                          r"\(unset TORCH_CUDA_ARCH_LIST, or pass --arch 12.0a to override it\)$"):
        _plan({"TORCH_CUDA_ARCH_LIST": "sm_9x"})
    assert _plan({"TORCH_CUDA_ARCH_LIST": "5.2 9.0+PTX"}, arch="12.0a")[0] == "12.0a"  # --arch sets it aside


def test_plan_json_says_which_won_and_the_build_gets_that_list() -> None:
    proc = run_cli("--json", "plan", "--recipe", "demo", env={"TORCH_CUDA_ARCH_LIST": "9.0a 12.0a", "ARCH": ""})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["archs"]["list"] == ["9.0a", "12.0a"] and data["archs"]["source"] == "environment TORCH_CUDA_ARCH_LIST"
    assert data["env"]["TORCH_CUDA_ARCH_LIST"] == "9.0a;12.0a"  # what the compile is given, in torch's own spelling
    # --arch takes the same spellings (quoted, as a shell needs `;` and spaces to be).
    for given in ("9.0a;12.0a", "9.0a 12.0a", "9.0a,12.0a"):
        proc = run_cli("--json", "--arch", given, "plan", "--recipe", "demo",
                       env={"TORCH_CUDA_ARCH_LIST": "8.0", "ARCH": ""})
        archs = json.loads(proc.stdout)["archs"]
        assert (archs["list"], archs["source"]) == (["9.0a", "12.0a"], "command line; environment "
                                                    "TORCH_CUDA_ARCH_LIST=8.0 not used: --arch wins"), proc.stderr
    bad = run_cli("--json", "plan", "--recipe", "demo", env={"TORCH_CUDA_ARCH_LIST": "5.2", "ARCH": ""})
    assert bad.returncode == 2
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith("error: environment TORCH_CUDA_ARCH_LIST: arch: 5.2:") and "unset TORCH_CUDA_ARCH_LIST" in line
