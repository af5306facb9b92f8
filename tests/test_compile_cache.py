"""The compile-cache seam: a launcher on PATH becomes CMake's compiler launcher; an absent
one is a warning (the build compiles uncached); an unknown name is a recipe error."""

from __future__ import annotations

import os
from pathlib import Path

from build_kernel import compile_cache
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe


def test_a_launcher_on_path_is_used_for_every_language(tmp_path: Path) -> None:
    launcher = tmp_path / "bin" / "ccache"
    launcher.parent.mkdir()
    launcher.write_text('#!/bin/sh\nexec "$@"\n')
    launcher.chmod(0o755)
    env = {"PATH": f"{launcher.parent}{os.pathsep}/usr/bin"}
    cache = compile_cache.get("ccache")
    assert cache.missing(env) is None
    assert compile_cache.cmake_defines(cache, env) == {
        "CMAKE_CUDA_COMPILER_LAUNCHER": str(launcher), "CMAKE_CXX_COMPILER_LAUNCHER": str(launcher),
        "CMAKE_C_COMPILER_LAUNCHER": str(launcher)}


def test_an_absent_launcher_means_uncached_with_one_warning(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    cache = compile_cache.get("sccache")
    why = cache.missing(env)
    assert why is not None and why.startswith("compile cache sccache is not on PATH: building uncached (")
    assert compile_cache.cmake_defines(cache, env) == {}
    assert compile_cache.cmake_defines(compile_cache.get("none"), env) == {}


def test_an_unknown_cache_is_a_recipe_error(project: Path) -> None:
    copy_series(project, sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split()), "v1")
    path = write_recipe(project, "r", demo_recipe_text(extra_build='compile_cache = "distcc"\n'))
    proc = run_cli("plan", "--recipe", str(path))
    assert proc.returncode == 2
    assert "build.compile_cache: 'distcc' is not one of none, ccache, sccache" in proc.stderr
