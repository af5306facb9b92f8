"""Every compiler that links the libraries is probed before configure (issue 42 item 1).

Seen on the H200 host: `CXX=CUDAHOSTCXX=/opt/gcc/bin/g++`, a GCC 13.3 with only libstdc++.a; CMake links
every CUDA library with CUDAHOSTCXX, so each carried its own libstdc++ and one of sgl-kernel's own tests
died with SIGSEGV. Here the static compiler is a real g++ behind a wrapper that adds -static-libstdc++ to
every shared link (as a specs file or a libstdc++.a-only install does); nvcc is the machine's real one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from build_kernel import host_compiler, toolchain
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe

GXX = shutil.which("g++") or "g++"
SHARED = "/usr/bin/g++"  # the distribution's compiler: libstdc++ shared


@pytest.fixture
def static_gxx(tmp_path: Path) -> Path:
    fake = tmp_path / "opt-gcc" / "g++"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" -shared "*) exec {GXX} "$@" -static-libstdc++;; esac\nexec {GXX} "$@"\n')
    fake.chmod(0o755)
    return fake


@pytest.fixture
def nvcc() -> str:
    found = toolchain.find_nvcc(os.environ)
    if not found:
        pytest.skip("no nvcc on this machine")
    return found


def test_auto_replaces_a_static_cuda_host_compiler(static_gxx: Path, nvcc: str) -> None:
    env = {**os.environ, "CXX": SHARED, "CUDAHOSTCXX": str(static_gxx)}
    res = host_compiler.resolve("auto", env, {}, nvcc)
    assert res.problems == [] and res.chosen == SHARED
    assert res.env["CUDAHOSTCXX"] == SHARED and res.env["CXX"] == SHARED
    assert res.defines == {"CMAKE_CUDA_HOST_COMPILER": SHARED}
    [why] = res.why
    assert why == (f"host compiler {SHARED}: CUDAHOSTCXX={static_gxx} (CUDA host compiler) links libstdc++ "
                   "statically, which would put a second libstdc++ in every library")


def test_environment_refuses_in_one_line_naming_the_variable_and_the_fix(static_gxx: Path, nvcc: str) -> None:
    env = {**os.environ, "CXX": str(static_gxx), "CUDAHOSTCXX": str(static_gxx)}
    res = host_compiler.resolve("environment", env, {}, nvcc)
    [problem] = res.problems
    assert problem.startswith(f"CXX={static_gxx} (C++ compiler) links libstdc++ into shared libraries")
    assert problem.endswith(f"; set CXX={SHARED} CUDAHOSTCXX={SHARED} (or [toolchain] host_compiler = \"auto\" "
                            "picks it)")
    assert "\n" not in problem and res.chosen is None and res.env == {}


@pytest.mark.parametrize("where", ["define", "NVCC_CCBIN"])
def test_the_cuda_host_compiler_as_cmake_resolves_it(static_gxx: Path, nvcc: str, where: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "CUDAHOSTCXX", "NVCC_CCBIN")}
    defines = {"CMAKE_CUDA_HOST_COMPILER": str(static_gxx)} if where == "define" else {}
    if where == "NVCC_CCBIN":
        env["NVCC_CCBIN"] = str(static_gxx)
    [cxx, cuda] = host_compiler.linkers(env, defines)
    assert cxx.role == host_compiler.CXX_ROLE
    assert cuda.path == str(static_gxx)
    assert cuda.source == ("CMAKE_CUDA_HOST_COMPILER define" if where == "define" else "NVCC_CCBIN")
    res = host_compiler.resolve("auto", env, defines, nvcc)
    assert res.chosen == SHARED and res.defines["CMAKE_CUDA_HOST_COMPILER"] == SHARED
    refused = host_compiler.resolve("environment", env, defines, nvcc)
    assert refused.problems and refused.problems[0].startswith(f"{cuda.source}={static_gxx} (CUDA host compiler)")
    if where == "define":
        assert "set CXX=" in refused.problems[0] and "CMAKE_CUDA_HOST_COMPILER=" in refused.problems[0]


def test_working_compilers_are_kept_and_a_path_is_probed(static_gxx: Path, nvcc: str) -> None:
    env = {**os.environ, "CXX": SHARED, "CUDAHOSTCXX": SHARED}
    kept = host_compiler.resolve("auto", env, {}, nvcc)
    assert (kept.problems, kept.chosen, kept.env) == ([], None, {})
    bad = host_compiler.resolve(str(static_gxx), env, {}, nvcc)
    assert bad.problems and "set [toolchain] host_compiler to a compiler that links libstdc++ shared" in bad.problems[0]
    good = host_compiler.resolve(SHARED, {**env, "CUDAHOSTCXX": str(static_gxx)}, {}, nvcc)
    assert good.chosen == SHARED and good.why == [f"host compiler {SHARED}: [toolchain] host_compiler"]
    # Flags that link libstdc++ in are no compiler's fault: no other compiler is offered.
    flags = host_compiler.resolve("auto", {**env, "LDFLAGS": "-static-libstdc++"}, {}, nvcc)
    assert flags.problems and flags.problems[0].startswith("LDFLAGS has -static-libstdc++") and flags.chosen is None


def _project(project: Path, setting: str) -> Path:
    copy_series(project, (REPO_ROOT / "patches/minikernel/v1/series").read_text().split(), "v1")
    text = demo_recipe_text().replace('torch = "existing"', f'torch = "existing"\nhost_compiler = "{setting}"')
    return write_recipe(project, "hc", text)


def test_doctor_names_the_compiler_the_build_will_use(static_gxx: Path, nvcc: str, project: Path,
                                                      tmp_path: Path) -> None:
    env = {"CXX": SHARED, "CUDAHOSTCXX": str(static_gxx)}
    auto = run_cli("--cache-dir", str(tmp_path / "c"), "--json", "doctor", "--recipe", str(_project(project, "auto")),
                   env=env)
    data = json.loads(auto.stdout)
    assert data["host_compiler"]["chosen"] == SHARED
    assert not any("libstdc++" in p for p in data["problems"]), data["problems"]


def test_build_stops_before_configure_on_a_static_cuda_host_compiler(static_gxx: Path, nvcc: str, project: Path,
                                                                     tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done = run_cli("--cache-dir", str(cache), "--output-dir", str(tmp_path / "out"), "build", "--recipe",
                   str(_project(project, "environment")), env={"CXX": SHARED, "CUDAHOSTCXX": str(static_gxx)})
    assert done.returncode == 3, done.stdout + done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith(f"error: CUDAHOSTCXX={static_gxx} (CUDA host compiler) links libstdc++ into shared")
    assert f"set CXX={SHARED} CUDAHOSTCXX={SHARED}" in line
    assert not list((cache / "build").glob("*/cmake/CMakeCache.txt")) and not list((tmp_path / "out").glob("*.whl"))


def test_one_compiler_in_both_roles_is_probed_once(static_gxx: Path, tmp_path: Path) -> None:
    """`c++` and `g++` are often one binary: its probe (a real <sstream> compile and link) runs once, and
    both roles get its verdict."""
    calls = tmp_path / "calls.txt"
    counting = tmp_path / "bin" / "g++-counted"
    counting.parent.mkdir()
    counting.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {static_gxx} "$@"\n')
    counting.chmod(0o755)
    alias = tmp_path / "bin" / "c++"
    alias.symlink_to(counting)
    env = {**os.environ, "CXX": str(alias), "CUDAHOSTCXX": str(counting)}
    res = host_compiler.resolve("auto", env, {}, None)
    shared_links = [line for line in calls.read_text().splitlines() if "-shared" in line]
    assert len(shared_links) == 1, shared_links
    # Both roles are replaced, each named with the variable that set it.
    assert res.chosen and res.chosen != str(counting) and not res.problems, res
    assert f"CXX={alias} (C++ compiler)" in res.why[0] and f"CUDAHOSTCXX={counting} (CUDA host compiler)" in res.why[0]
