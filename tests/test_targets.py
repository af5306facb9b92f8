"""Every GPU a user has, from the shipped recipe: the archs the toolkit lists, FP4 per arch, `native`, `+PTX`, what
each library carries per arch, and one line for each arch that cannot be built (fast: nothing compiles)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from build_kernel import gpus, recipe, targets
from build_kernel.archs import Arch
from build_kernel.errors import RecipeError
from build_kernel.plan import resolve
from build_kernel.resources import Resources
from tests.conftest import REPO_ROOT, run_cli, write_recipe, write_series

FAKE_RES = Resources(cpus=16, cpus_why="test", memory_bytes=64 * 1024**3, memory_why="test")
SHIPPED = "nightly-cu130"
YES, NO = True, False

# arch -> (libraries loaded, FP4, sparse FA, FA3): what the shipped recipe's rules say each GPU gets.
TABLE = {
    "8.0": ("sm100", NO, YES, NO), "8.6": ("sm100", NO, YES, NO), "8.7": ("sm100", NO, YES, NO),
    "8.9": ("sm100", NO, YES, NO), "9.0": ("sm90", NO, YES, NO), "9.0a": ("sm90", NO, YES, YES),
    "10.0": ("sm100", NO, NO, NO), "10.0a": ("sm100", YES, NO, NO), "10.0f": ("sm100", YES, NO, NO),
    "10.3": ("sm100", NO, NO, NO), "10.3a": ("sm100", YES, NO, NO), "10.3f": ("sm100", YES, NO, NO),
    "11.0": ("sm100", NO, NO, NO), "11.0a": ("sm100", YES, NO, NO), "11.0f": ("sm100", YES, NO, NO),
    "12.0": ("sm100", NO, NO, NO), "12.0a": ("sm100", YES, NO, NO), "12.0f": ("sm100", YES, NO, NO),
    "12.1": ("sm100", NO, NO, NO), "12.1a": ("sm100", YES, NO, NO), "12.1f": ("sm100", YES, NO, NO),
    "8.6+PTX": ("sm100", NO, YES, NO), "12.0a+PTX": ("sm100", YES, NO, NO),
}


@pytest.mark.parametrize("arch", list(TABLE))
def test_every_arch_cuda_13_knows_plans_from_the_shipped_recipe(arch: str) -> None:
    plan = resolve(recipe.load(SHIPPED), env={}, arch=arch, resources=FAKE_RES)
    data = plan.to_dict()["archs"]
    [row] = data["per_arch"]
    library, fp4, sparse, fa3 = TABLE[arch]
    assert data["TORCH_CUDA_ARCH_LIST"] == arch and row["arch"] == arch
    assert f"sgl_kernel/{library}/common_ops*" in row["libraries"]
    assert row["fp4"].startswith("yes" if fp4 else "no") and (arch in data["fp4_archs"]) is fp4
    assert row["parts"] == {"sparse FA": sparse, "FA3": fa3, "FlashMLA": arch in ("9.0a", "10.0a", "10.3a")}


def test_a_multi_arch_list_gets_each_library_its_own_archs() -> None:
    data = resolve(recipe.load(SHIPPED), env={}, arch="9.0a;12.0a", resources=FAKE_RES).to_dict()["archs"]
    hopper, blackwell = data["per_arch"]
    assert "sgl_kernel/flash_ops*" in hopper["libraries"] and "sgl_kernel/flash_ops*" not in blackwell["libraries"]
    assert hopper["fp4"].startswith("no (9.0 has no FP4") and blackwell["fp4"] == "yes"
    assert data["fp4_archs"] == ["12.0a"]


def test_a_list_without_an_fp4_arch_plans_without_fp4_and_says_so() -> None:
    proc = run_cli("plan", "--recipe", SHIPPED, "--arch", "9.0a")
    assert proc.returncode == 0, proc.stderr
    assert "none of the asked archs runs FP4 kernels: this wheel is built without them" in proc.stdout
    assert "9.0a: loads sgl_kernel/sm90/common_ops*" in proc.stdout and "FA3 yes" in proc.stdout


def test_a_define_that_leaves_fa3_out_makes_the_plan_say_so(tmp_path: Path) -> None:
    """SGL_KERNEL_FA3 false as CMake reads it (series 0003 then builds no flash_ops): 9.0a gets no FA3, and the
    plan names the define; the shipped recipe without it keeps FA3."""
    overlay = tmp_path / "nofa3.toml"
    overlay.write_text(f'extends = "{REPO_ROOT / "recipes" / "nightly-cu130.toml"}"\n'
                       '[build.defines]\nSGL_KERNEL_FA3 = "0"\n')
    [row] = resolve(recipe.load(str(overlay)), env={}, arch="9.0a", resources=FAKE_RES).to_dict()["archs"]["per_arch"]
    assert row["parts"]["FA3"] is False and row["left_out"] == {"FA3": "SGL_KERNEL_FA3=0"}
    assert "sgl_kernel/flash_ops*" not in row["libraries"] and row["parts"]["sparse FA"] is True
    proc = run_cli("plan", "--recipe", str(overlay), "--arch", "9.0a")
    assert proc.returncode == 0, proc.stderr
    assert "FA3 no (SGL_KERNEL_FA3=0 in [build.defines])" in proc.stdout
    [shipped] = resolve(recipe.load(SHIPPED), env={}, arch="9.0a", resources=FAKE_RES).to_dict()["archs"]["per_arch"]
    assert shipped["parts"]["FA3"] is True and shipped["left_out"] == {}


def test_a_left_out_by_that_is_no_setting_is_a_recipe_problem(project: Path) -> None:
    write_series(project, "s", "v1", {})
    write_recipe(project, "bad", _recipe(extra='[verify.libraries."x/flash_ops*"]\nleft_out_by = ["SGL_KERNEL_FA3"]\n'))
    with pytest.raises(RecipeError, match=r"left_out_by: 'SGL_KERNEL_FA3' is not a define setting: write NAME=VALUE"):
        recipe.load("bad", project)


def test_an_arch_the_source_cannot_build_is_one_line_citing_the_source() -> None:
    proc = run_cli("plan", "--recipe", SHIPPED, "--arch", "7.5")
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: command line: arch: 7.5: the source cannot build it (sgl-kernel's CMakeLists.txt "
                           "compiles compute_80 and newer only")
    assert line.endswith('ask 8.0 or newer (recipe nightly-cu130 sets min_arch = "8.0")')


def test_a_bad_min_arch_is_a_recipe_problem(project: Path) -> None:
    write_series(project, "s", "v1", {})
    write_recipe(project, "floor", _recipe(extra='min_arch = "eight"\n'))
    with pytest.raises(RecipeError, match=r"floor.toml:\d+: build.min_arch: unknown arch 'eight'"):
        recipe.load("floor", project)


def _fake_nvcc(folder: Path, archs: str) -> Path:
    """A stand-in for an older CUDA toolkit (only CUDA 13.0 is installed here): an `nvcc` that lists `archs`."""
    nvcc = folder / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\nfor a in {archs}; do echo compute_$a; done\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    return folder


def test_the_arch_table_is_the_toolkits_own(tmp_path: Path) -> None:
    """An older toolkit that lists no 12.x: 12.0a is refused naming that toolkit's list; 9.0a plans."""
    home = _fake_nvcc(tmp_path / "cuda-12.4", "80 86 89 90")
    env = {"CUDA_HOME": str(home)}
    with pytest.raises(RecipeError) as info:
        resolve(recipe.load(SHIPPED), env=env, arch="12.0a", resources=FAKE_RES)
    [line] = info.value.problems
    assert line == (f"command line: arch: 12.0a: not an arch this toolkit can target (nvcc --list-gpu-arch "
                    f"({home}/bin/nvcc): 8.0, 8.6, 8.9, 9.0); name one of those, or install a CUDA toolkit that knows it")
    plan = resolve(recipe.load(SHIPPED), env=env, arch="9.0a", resources=FAKE_RES)
    assert plan.to_dict()["archs"]["toolkit"] == f"nvcc --list-gpu-arch ({home}/bin/nvcc)"


def test_without_nvcc_the_table_is_cuda_13s_and_the_plan_says_so(tmp_path: Path) -> None:
    kit = targets.toolkit({"PATH": str(tmp_path)}, roots=(str(tmp_path),))
    assert "no nvcc found" in kit.source and kit.knows(Arch(12, 1, "a")) and not kit.knows(Arch(13, 0))


NATIVE_FIX = ("name the archs of the GPUs that will run the wheel instead, e.g. --arch 12.0a (RTX 5090, RTX PRO 6000), "
              "12.1a (GB10), 10.0a (B200), 9.0a (H100, H200), 8.9 (L40S, RTX 4090), 8.6 (RTX 3090, A10)")


def test_native_without_a_driver_names_what_to_pass() -> None:
    """This host has no NVIDIA driver: the one line saying so and naming what to pass, exit 2."""
    if gpus.present() is not None:
        pytest.skip("this host has a CUDA driver: `native` asks it (the driver double below runs everywhere)")
    proc = run_cli("plan", "--recipe", SHIPPED, "--arch", "native")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: command line: arch: arch 'native': no NVIDIA driver (libcuda) on this host; {NATIVE_FIX}\n"


def _plan_json(env: dict[str, str], arch: str) -> dict[str, object]:
    proc = run_cli("plan", "--json", "--recipe", SHIPPED, "--arch", arch, env=env)
    assert proc.returncode == 0, proc.stderr
    archs: dict[str, object] = json.loads(proc.stdout)["archs"]
    return archs


def test_native_is_the_gpus_the_driver_reports(driver_double: dict[str, str]) -> None:
    """`native` asks the CUDA driver (libcuda.so.1: cuInit, cuDeviceGetCount, cuDeviceGet, the compute capability
    attributes). No GPU can run here, so the driver is a double (tests/conftest.py): a real libcuda.so.1 on
    LD_LIBRARY_PATH reporting the GPUs BK_TEST_GPUS lists. The rest is the real path, run as a user runs it: the
    CLI loads that library by its soname, one arch per GPU model (`a` from 9.0), the plan's list and its source."""
    three = {**driver_double, "BK_TEST_GPUS": "12.0 8.6 12.0"}  # two RTX 5090s and an RTX 3090
    archs = _plan_json(three, "native")
    assert archs["list"] == ["12.0a", "8.6"] and archs["fp4_archs"] == ["12.0a"]
    assert archs["source"] == "command line: native = 12.0a;8.6, the GPUs the driver reports"
    # An H100 (its own 9.0a) and an RTX 5090 among asked archs: in place, the 12.0a asked twice kept once.
    archs = _plan_json({**driver_double, "BK_TEST_GPUS": "9.0 12.0"}, "8.9;native;12.0a")
    assert archs["list"] == ["8.9", "9.0a", "12.0a"]
    assert archs["source"] == "command line: 8.9;native;12.0a = 8.9;9.0a;12.0a;12.0a, the GPUs the driver reports"
    # A driver that reports no GPU (cuInit: CUDA_ERROR_NO_DEVICE): its own one line, exit 2, nothing planned.
    none = run_cli("plan", "--recipe", SHIPPED, "--arch", "native", env={**driver_double, "BK_TEST_GPUS": ""})
    assert (none.returncode, none.stdout) == (2, "")
    assert none.stderr == f"error: command line: arch: arch 'native': the driver reports no GPU; {NATIVE_FIX}\n"


def test_native_in_a_recipe_is_refused_with_the_flag(project: Path) -> None:
    write_series(project, "s", "v1", {})
    write_recipe(project, "nat", _recipe(arch='["native"]'))
    with pytest.raises(RecipeError, match=r"build.arch: arch 'native' is for the command line \(--arch native"):
        recipe.load("nat", project)


@pytest.mark.parametrize("archs,kept", [("12.0a;12.0f", "12.0f: the 12.x family"), ("9.0;9.0a", "9.0: generic"),
                                        ("10.0f,10.0a", "10.0a: this GPU's own instructions")])
def test_two_targets_for_one_gpu_are_refused(archs: str, kept: str) -> None:
    proc = run_cli("plan", "--recipe", SHIPPED, "--arch", archs)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "both target compute capability" in line and "keep one" in line and kept in line


def test_f_and_a_of_different_gpus_mix() -> None:
    plan = resolve(recipe.load(SHIPPED), env={}, arch="10.0f;12.0a;12.1f", resources=FAKE_RES)
    assert plan.arch_list == "10.0f;12.0a;12.1f"


def test_ptx_is_kept_in_the_arch_list_and_merges_with_the_same_target() -> None:
    plan = resolve(recipe.load(SHIPPED), env={}, arch="8.6;8.6+PTX;12.0a", resources=FAKE_RES)
    assert plan.arch_list == "8.6+PTX;12.0a" and plan.build_env()["TORCH_CUDA_ARCH_LIST"] == "8.6+PTX;12.0a"


def _recipe(arch: str = '["12.0a"]', fp4: str = "true", extra: str = "") -> str:
    return (f'[source]\nrepo = "https://example.invalid/x.git"\ncommit = "{"a" * 40}"\n[patches]\nseries = "s"\n'
            f'version = "v1"\n[build]\narch = {arch}\nfp4 = {fp4}\n{extra}')


def test_fp4_required_refuses_a_list_without_fp4_naming_both_fixes(project: Path) -> None:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "must", _recipe(fp4='"required"'))
    proc = run_cli("plan", "--recipe", str(path), "--arch", "8.9")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert 'recipe must sets fp4 = "required"' in line and '--arch "8.9;12.0a"' in line and "fp4 = true" in line
    assert resolve(recipe.load("must", project), env={}, arch="12.1a", resources=FAKE_RES).arch_list == "12.1a"


def test_plan_answers_in_a_screen_and_explains_on_request() -> None:
    proc = run_cli("plan", "--recipe", SHIPPED)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 60
    keys = [line.split()[0] for line in lines if line and not line.startswith(" ")]
    for key in ("recipe", "source", "series", "archs", "toolchain", "jobs", "compile", "cache", "stages"):
        assert key in keys, f"{key} missing from plan: {proc.stdout}"
    assert keys.index("archs") < keys.index("toolchain") and "from" not in keys
    explained = run_cli("plan", "--explain", "--recipe", SHIPPED).stdout
    assert "from  " in explained and "sha256:" in explained and "TORCH_CUDA_ARCH_LIST=12.0a" in explained
    data = json.loads(run_cli("--json", "plan", "--recipe", SHIPPED).stdout)
    assert data["origins"]["patches.version"].startswith(f"{REPO_ROOT / 'recipes' / 'nightly-cu130.toml'}:")


def test_the_cards_default_is_the_best_path() -> None:
    """`make wheel ARCH=12.0a` builds recipe nightly-cu130: its dry run shows series v8 or later."""
    proc = run_cli("--recipe", SHIPPED, "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    version = json.loads(proc.stdout)["plan"]["patches"]["version"]
    assert version.startswith("v") and int(version[1:].split("-")[0]) >= 8 and "unpruned" not in version
    reference = recipe.load("nightly-cu130-unpruned")
    assert reference.patches.version == "v7-unpruned" and reference.build.fa3 == "all"


def test_omitted_patches_are_checked_and_shown(project: Path) -> None:
    write_series(project, "s", "v1", {"0001-a.patch": "--- a/x\n+++ b/x\n"})
    write_series(project, "s", "v2", {"0001-a.patch": "--- a/x\n+++ b/x\n", "0002-b.patch": "--- a/y\n+++ b/y\n"})
    write_recipe(project, "old", _recipe().replace('version = "v1"', 'version = "v1"\n[patches.omitted]\n'
                                                    '"0002-b" = "upstream has it"\n'))
    r = recipe.load("old", project)
    assert r.patches.omitted == {"0002-b": "upstream has it"}
    for bad, needle in (('"0002-c" = "x"', "no patch of that name in the pool (did you mean '0002-b'?)"),
                        ('"0001-a" = "x"', "0001-a is in s/v1's series: remove it from omitted")):
        write_recipe(project, "bad", _recipe().replace('version = "v1"', f'version = "v1"\n[patches.omitted]\n{bad}\n'))
        with pytest.raises(RecipeError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
            recipe.load("bad", project)
    proc = run_cli("plan", "--recipe", str(project / "recipes" / "old.toml"))
    assert proc.returncode == 0, proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("left out")]
    assert row.split(None, 2)[2] == "0002-b: upstream has it"
    # An overlay that switches to a version applying the patch drops the parent's reason (it explained v1), and only
    # that one; a reason the overlay gives itself for a patch its version applies is still an error.
    write_recipe(project, "newer", 'extends = "old"\n[patches]\nversion = "v2"\n')
    assert recipe.load("newer", project).patches.omitted == {}
    write_recipe(project, "wrong", 'extends = "old"\n[patches]\nversion = "v2"\n[patches.omitted]\n"0001-a" = "x"\n')
    with pytest.raises(RecipeError, match="0001-a is in s/v2's series: remove it from omitted"):
        recipe.load("wrong", project)


def test_an_environment_torch_arch_list_is_read_as_torch_reads_it() -> None:
    # Issue 66: every PyTorch extension build reads TORCH_CUDA_ARCH_LIST, so this tool does too (below ARCH and
    # --arch; tests/test_arch_spellings.py has the whole order). A container's old list (NGC: "5.2 ... 9.0+PTX")
    # is then refused with the way to set it aside.
    shipped = recipe.load(SHIPPED)
    plan = resolve(shipped, env={"TORCH_CUDA_ARCH_LIST": "8.6;9.0+PTX"}, resources=FAKE_RES)
    assert plan.arch_list == "8.6;9.0+PTX" and plan.arch_source == "environment TORCH_CUDA_ARCH_LIST"
    assert resolve(shipped, env={"TORCH_CUDA_ARCH_LIST": "9.0a"}, arch="9.0a", resources=FAKE_RES).arch_source == \
        "command line"
