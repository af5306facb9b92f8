"""Real builds of the miniature with make's CMake and torch and a CUDA 13 nvcc (the CI machine: CMake 3.28,
nvcc 13.0, torch 2.14.1+cu130). What the wheel is stamped with is read from the installed toolchain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from build_kernel import toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.stages.builder import cudawheels, ninja_order
from build_kernel.stages.builder import provenance as builder_provenance
from tests.conftest import (
    REPO_ROOT,
    DemoBuild,
    UpstreamArchsBuild,
    commit_files,
    copy_series,
    demo_recipe_text,
    run_cli,
    write_recipe,
)

pytestmark = pytest.mark.slow
PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())


def cli_build(project: Path, recipe: str, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("--cache-dir", str(cache), "--output-dir", str(project / "wheels"), *extra, "--json",
                   "build", "--recipe", str(project / "recipes" / f"{recipe}.toml"))


def expected_toolchain() -> tuple[str, str, str]:
    """(local label prefix, nvcc major.minor, cuda_source) the demo build gets from this machine's toolchain:
    `cu<torch's CUDA without the dot>.torch<torch major.minor>.sm120a.g`, and the nvcc `auto` picks
    (the system's `release X.Y` when it is torch's CUDA, else the PyPI wheels of torch's CUDA)."""
    facts = toolchain.detect(sys.executable, os.environ)
    assert facts.torch_version and facts.torch_cuda, f"make's torch is a CUDA build: {facts}"
    cuda = "{}.{}".format(*cudawheels.major_minor(facts.torch_cuda))
    torch_mm = ".".join(Version(facts.torch_version).base_version.split(".")[:2])
    source, _ = cudawheels.choose("auto", facts, cuda, parse_arch_list("12.0a"))
    nvcc = facts.nvcc_version if source == "system" else cuda
    assert nvcc
    return f"cu{cuda.replace('.', '')}.torch{torch_mm}.sm120a.g", nvcc, source


def test_make_wheel_builds_stamped_wheel_and_second_run_is_a_cache_hit(demo_build: DemoBuild, tmp_path: Path) -> None:
    label, nvcc, source = expected_toolchain()  # the CI machine: cu130.torch2.14.sm120a.g, nvcc 13.0, system
    name = demo_build.wheel.name
    assert name.startswith(f"minikernel-0.1.0+{label}") and name.endswith(".whl")
    with zipfile.ZipFile(demo_build.wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        version = next(l for l in zf.read(metadata).decode().splitlines() if l.startswith("Version: "))[9:]
    provenance = builder_provenance.read(demo_build.wheel)  # the wheel's record and the run's beside it (paths)
    assert provenance is not None
    assert version in name and f"+{label}" in version
    assert provenance["archs"] == ["12.0a"] and provenance["toolchain"]["nvcc_version"] == nvcc
    assert provenance["toolchain"]["cuda_source"] == source
    assert provenance["patches"] and all(len(v) == 64 for v in provenance["patches"].values())
    assert provenance["defines"]["FETCHCONTENT_SOURCE_DIR_MINIDEP"].startswith(str(demo_build.cache))
    # scikit-build-core's build folder was ordered: the CMAKE_MAKE_PROGRAM script ran the orderer there (and only
    # there), which listed the build's compiles (other tests' builds share this cache).
    edges = [json.loads(p.read_text())["sources"] for p in demo_build.cache.glob(f"build/*/bin/{ninja_order.EDGES}")]
    assert any("csrc/nvfp4_quant.cu" in sources for sources in edges), edges
    # pip installs it, and pip's view of the version carries the local label.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(demo_build.wheel)], check=True)
    shown = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; print(m.version('minikernel'))"],
                           env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == version
    # Same inputs: the cache answers, nothing is compiled.
    env = {**os.environ, "BUILD_KERNEL_CACHE_DIR": str(demo_build.cache), "BUILD_KERNEL_OUTPUT_DIR": str(demo_build.out)}
    again = subprocess.run(["make", "--no-print-directory", "wheel", "RECIPE=demo", "ARCH=12.0a"], cwd=REPO_ROOT,
                           env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and "cache hit" in again.stdout + again.stderr
    assert "ninja" not in again.stdout + again.stderr


def test_unpatched_miniature_fails_on_cmake_policies(project: Path, tmp_path: Path) -> None:
    copy_series(project, [], "none")
    write_recipe(project, "r", demo_recipe_text("none"))
    proc = cli_build(project, "r", tmp_path / "cache")
    assert proc.returncode == 6, proc.stderr
    assert 'Policy "CMP0169" is not known to this version of CMake' in proc.stderr
    assert "full log:" in proc.stderr


def test_policy_guard_alone_then_fails_on_cccl_include(project: Path, tmp_path: Path) -> None:
    copy_series(project, PATCHES[:1], "p1")
    write_recipe(project, "r", demo_recipe_text("p1"))
    proc = cli_build(project, "r", tmp_path / "cache")
    assert proc.returncode == 6, proc.stderr
    assert "cuda/std/array: No such file or directory" in proc.stderr


def test_without_arch_patches_12_0a_still_compiles_hopper_code(upstream_archs_build: UpstreamArchsBuild) -> None:
    # Policy guards, CCCL path and C++20: it builds, but TORCH_CUDA_ARCH_LIST=12.0a is ignored. (The session's
    # build of that series, conftest.upstream_archs_build; its FP4 gate is test_verify's.)
    wheel = upstream_archs_build.wheel
    verify = run_cli("--json", "verify", str(wheel), "--recipe", str(upstream_archs_build.recipe))
    report = json.loads(verify.stdout)
    libs = {lib["path"]: lib["archs"] for lib in report["libraries"]}
    assert {"sm_90", "sm_90a", "sm_120a"} <= set(libs["minikernel/sm100/common_ops.so"])
    assert "minikernel/sm90/common_ops.so" in libs and libs["minikernel/flash_ops.so"] == ["sm_90a"]
    assert any("was not asked for" in w for w in report["warnings"])


def test_dead_dependency_pin_fails_without_override(demo_build: DemoBuild, project: Path, tmp_path: Path) -> None:
    # A real minidep repo that lacks the pinned commit, like DeepGEMM after its force-push.
    dep_repo, _ = tmp_path / "minidep", commit_files(tmp_path / "minidep", {
        p.relative_to(REPO_ROOT / "examples/minidep").as_posix(): p.read_text()
        for p in (REPO_ROOT / "examples/minidep").rglob("*") if p.is_file()})
    copy_series(project, PATCHES, "v1")
    recipe = demo_recipe_text()
    without_override = recipe[:recipe.index("[deps.minidep]")] + recipe[recipe.index("[verify]"):]
    write_recipe(project, "r", without_override.replace(
        "[build.defines]\n", f'[build.defines]\nMINIKERNEL_MINIDEP_REPO = "{dep_repo}"\n'))
    proc = cli_build(project, "r", tmp_path / "cache")
    assert proc.returncode == 6, proc.stderr
    log = Path(proc.stderr.split("full log: ")[1].split(" ")[0].rstrip(";")).read_text()
    assert "reference is not a tree: 0d4c3b2a1f9e8d7c6b5a49382716f5e4d3c2b1a0" in log
    assert "Failed to checkout tag" in proc.stderr or "minidep" in proc.stderr
    # The recipe's [deps.minidep] override (the demo recipe as shipped) makes the same tree build: the session's
    # demo build is that build, for real; in its cache these inputs are its key, answered without a compile.
    write_recipe(project, "r", recipe)
    fixed = cli_build(project, "r", demo_build.cache)
    assert fixed.returncode == 0, fixed.stderr
    result = json.loads(fixed.stdout)
    assert result["cached"] is True and result["wheel"].endswith(demo_build.wheel.name), result
    assert result["provenance"]["defines"]["FETCHCONTENT_SOURCE_DIR_MINIDEP"]


# What a demo build keeps in its cache (no serve or test environments: the build needs none of them); the tests that
# build in a copy of the session's cache copy these (test_interrupt, test_kill_anywhere).
BUILD_CACHE = ("build", "deps", "driver-stub", "examples", "link", "logs", "mirrors", "src", "wheels", "profile.sqlite")
