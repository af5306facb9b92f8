"""Issue 29: torch >= 2.14's headers require C++20; a series that keeps upstream's C++17 is
refused before the build, with the series version to use instead.

Data, not code: a series says in info.toml which standard its patched tree compiles with
(`cxx_standard = 17`, `20`, or "torch": chosen from the torch found, as sm120 v3's 0006 does);
torch's requirement is read from its own headers' `__cplusplus` guard. No compile here.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from build_kernel import toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.errors import PatchError, ToolchainError
from build_kernel.series import load_series

ROOT = Path(__file__).resolve().parent.parent
ARCH = parse_arch_list("12.0a")
GUARD = "#if !defined(_MSC_VER) && __cplusplus < {value}L\n#error C++{std} or later compatible compiler is required to use PyTorch.\n#endif\n"

# A CUDA 13.0 machine with torch 2.14.1, as `detect` records one (its headers: C++20).
FACTS = toolchain.Facts(
    python="/opt/env/bin/python", python_version="3.11.7", git="/usr/bin/git",
    cmake="/opt/env/bin/cmake", cmake_version="3.28.4", ninja="/opt/env/bin/ninja", ninja_version="1.13.2",
    gcc="/usr/bin/g++", gcc_version="12.2.0", nvcc="/usr/local/cuda-13.0/bin/nvcc", nvcc_version="13.0",
    nvcc_archs=("80", "90", "100", "120"), cuda_home="/usr/local/cuda-13.0",
    torch_version="2.14.1+cu130", torch_cuda="13.0", torch_cxx_standard=20)
TORCH_211 = replace(FACTS, torch_version="2.11.0+cu130", torch_cxx_standard=17)


def make_series(root: Path, version: str, info: str) -> Path:
    folder = root / "sm120" / version
    folder.mkdir(parents=True)
    (folder / "series").write_text("")
    (folder / "info.toml").write_text(info)
    return folder


@pytest.fixture
def versions(tmp_path: Path) -> Path:
    """patches/sm120/{v1,v2: C++17; v3: from torch}."""
    for version in ("v1", "v2"):
        make_series(tmp_path, version, "cxx_standard = 17\n")
    make_series(tmp_path, "v3", 'cxx_standard = "torch"\n')
    return tmp_path


def problems(facts: toolchain.Facts, series_dir: Path) -> list[str]:
    return toolchain.preflight(facts, ARCH, cmake_spec=">=3.26", want_cuda="13.0",
                               series=load_series(series_dir, check_lock=False))


def test_series_keeping_cxx17_is_refused_against_torch_needing_cxx20(versions: Path) -> None:
    assert problems(FACTS, versions / "sm120" / "v2") == [
        'torch 2.14.1+cu130 needs C++20 and series sm120/v2 builds with C++17: use [patches] version = "v3"'
        " (it sets the standard from torch), or use a torch whose headers accept C++17"]
    with pytest.raises(ToolchainError) as refused:  # what build() raises: one line, exit 3
        toolchain.require(problems(FACTS, versions / "sm120" / "v1"))
    assert refused.value.render().count("\n") == 0 and 'version = "v3"' in refused.value.render()


def test_series_following_torch_or_new_enough_is_accepted(versions: Path, tmp_path: Path) -> None:
    assert problems(FACTS, versions / "sm120" / "v3") == []
    assert problems(FACTS, make_series(tmp_path / "other", "v1", "cxx_standard = 20\n")) == []
    assert problems(TORCH_211, versions / "sm120" / "v2") == []  # torch 2.11's headers ask C++17
    assert problems(FACTS, make_series(tmp_path / "quiet", "v1", "")) == []  # says nothing: not refused
    # Without a series (doctor without a recipe) nothing is said about the standard.
    assert toolchain.preflight(FACTS, ARCH, cmake_spec=">=3.26", want_cuda="13.0") == []


def test_the_fix_is_the_newest_fitting_version_else_a_patch(tmp_path: Path) -> None:
    make_series(tmp_path, "v2", "cxx_standard = 17\n")
    make_series(tmp_path, "v9", "cxx_standard = 20\n")
    make_series(tmp_path, "v10", 'cxx_standard = "torch"\n')
    make_series(tmp_path, "v11", "cxx_standard = 17\n")
    (tmp_path / "sm120" / "notes").mkdir()  # not a series (no `series` file)
    [line] = problems(FACTS, tmp_path / "sm120" / "v2")
    assert ': use [patches] version = "v10" (it sets the standard from torch), or' in line
    lone = make_series(tmp_path / "lone", "v1", "cxx_standard = 17\n")
    [line] = problems(FACTS, lone)
    assert line == ("torch 2.14.1+cu130 needs C++20 and series sm120/v1 builds with C++17: add a patch that sets"
                    f" C++20 (and cxx_standard = 20 in {lone / 'info.toml'}), or use a torch whose headers accept C++17")


def test_unreadable_headers_fall_back_to_the_version() -> None:
    def need(version: str | None) -> int | None:
        return toolchain.torch_cxx_standard(replace(FACTS, torch_version=version, torch_cxx_standard=None))
    assert need("2.14.1+cu130") == 20
    assert need("2.14.0.dev20261101+cu130") == 20  # a nightly of 2.14 already has the C++20 headers
    assert need("2.11.0+cu130") is None and need(None) is None and need("not-a-version") is None


def test_bad_cxx_standard_is_refused_with_the_series(tmp_path: Path) -> None:
    folder = make_series(tmp_path, "v1", 'cxx_standard = "c++20"\n')
    with pytest.raises(PatchError, match=r"cxx_standard = 'c\+\+20' is not a C\+\+ standard"):
        load_series(folder, check_lock=False)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"torch/csrc/api/include/torch/all.h": GUARD.format(value=202002, std=20),
      "ATen/ATen.h": GUARD.format(value=202002, std=20)}, 20),                   # torch 2.14
    ({"torch/csrc/api/include/torch/all.h": GUARD.format(value=201703, std=17)}, 17),  # torch <= 2.13
    ({}, None),                                                                  # no headers
])
def test_detect_reads_the_standard_from_torchs_headers(tmp_path: Path, headers: dict[str, str],
                                                       expected: int | None) -> None:
    torch = tmp_path / "site" / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text("raise SystemExit('the probe must not import torch')\n")
    (torch / "version.py").write_text('__version__ = "2.14.1+cu130"\ncuda = "13.0"\n')
    for name, text in headers.items():
        (torch / "include" / name).parent.mkdir(parents=True, exist_ok=True)
        (torch / "include" / name).write_text(text)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path / "site")}
    found = toolchain.detect(sys.executable, env, cuda_roots=())
    assert (found.torch_version, found.torch_cxx_standard) == ("2.14.1+cu130", expected)


def test_the_repository_series_say_their_standard() -> None:
    assert load_series(ROOT / "patches" / "sm120" / "v1").cxx_standard == 17
    assert load_series(ROOT / "patches" / "sm120" / "v2").cxx_standard == 17
    assert load_series(ROOT / "patches" / "minikernel" / "v1").cxx_standard == 20  # its 0003 sets C++20
    [line] = problems(FACTS, ROOT / "patches" / "sm120" / "v2")
    assert line.startswith("torch 2.14.1+cu130 needs C++20 and series sm120/v2 builds with C++17: ")
