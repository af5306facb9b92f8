"""User-facing errors of configuration: the CLI's usage errors, recipes, the plan's overrides,
the user config, patch series and the toolchain preflight (bench/code_health/results/error_sites.json's
sites that no fast test reached).

Each error is asserted as the user sees it: the exact line (what failed, where, the fix), its
kind's exit code, no traceback, and nothing left behind where the command would write.
Everything runs the real CLI in a subprocess, except where the CLI cannot reach a site
without a compile (said at the test). Fast: no compiles, no network (fetches are --offline).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from build_kernel import examples, process, toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.errors import BuildError
from tests.conftest import copy_series, demo_recipe_text, run_cli, write_recipe, write_series

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SHA = "40ef116f011cf1599811af1089ddf00971092bcf"
MINIKERNEL = ["0001-cmake-guard-policies.patch", "0002-cuda13-cccl-include.patch", "0003-cxx20-for-torch-2.14.patch",
              "0004-fa3-fallback.patch", "0005-honour-torch-cuda-arch-list.patch"]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """Where a command would write: it must still not exist after a refusal."""
    return tmp_path / "cache"


@pytest.fixture
def env(tmp_path: Path, cache: Path) -> dict[str, str]:
    """The caller's ARCH, MAX_JOBS and mirrors config out of the way; cache and wheels in tmp."""
    return {"ARCH": "", "MAX_JOBS": "", "BUILD_KERNEL_CONFIG": str(tmp_path / "no-config.toml"),
            "BUILD_KERNEL_CACHE_DIR": str(cache), "BUILD_KERNEL_OUTPUT_DIR": str(tmp_path / "wheels")}


def refused(*args: str, env: dict[str, str], code: int) -> list[str]:
    """Run the CLI, expect exit `code` without a traceback; the lines of stderr."""
    proc = run_cli(*args, env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()


# --- cli/options.py, cli/stages.py: click usage errors (exit 2, one line "error: ...") ------------

NO_RECIPE = "error: no recipe given: pass --recipe NAME (see `build-kernel recipes list`)"


@pytest.mark.parametrize("command", [["plan"], ["fetch", "--offline"], ["build", "--offline"], ["verify"],
                                     ["patch", "check", "--offline"], ["patch", "health", "--offline"]], ids=" ".join)
def test_a_command_without_recipe_is_a_usage_error(command: list[str], env: dict[str, str], cache: Path) -> None:
    lines = refused(*command, env=env, code=2)
    assert lines[-1] == NO_RECIPE
    assert not cache.exists()


@pytest.mark.parametrize("command", ["verify", "publish"])
def test_no_wheel_in_the_output_folder_is_a_usage_error(command: str, env: dict[str, str], cache: Path,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "no-wheels"
    lines = refused(command, "--recipe", "demo", "--output-dir", str(out), env=env, code=2)
    assert lines[-1] == (f"error: no wheel in {out}: build one first (build-kernel build --recipe demo)"
                         " or pass WHEEL")
    assert not out.exists() and not cache.exists()


def test_publish_without_wheels_or_recipe_is_a_usage_error(env: dict[str, str], cache: Path) -> None:
    lines = refused("publish", env=env, code=2)
    assert lines[-1] == "error: nothing to publish: pass WHEEL… or --recipe NAME"
    assert not cache.exists()


# --- examples.py: an `example:NAME` with no bundled folder (exit 4) ------------------------------

def test_unknown_bundled_example_is_a_fetch_error(project: Path, env: dict[str, str], cache: Path) -> None:
    copy_series(project, MINIKERNEL, "v1")
    path = write_recipe(project, "demo", demo_recipe_text().replace('"example:minikernel"', '"example:nosuch"'))
    lines = refused("fetch", "--recipe", str(path), env=env, code=4)
    known = ", ".join(sorted(p.name for p in examples.EXAMPLES.iterdir()))
    assert lines[-1] == f"error: example:nosuch: no folder {examples.EXAMPLES / 'nosuch'} (bundled examples: {known})"
    assert not cache.exists()  # no examples/nosuch repo, no mirror, no tree


# --- mirrors.py: the user config is not TOML (exit 4) --------------------------------------------

def test_invalid_user_config_toml(tmp_path: Path, env: dict[str, str], cache: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[mirrors]\n"https://github.com/" =\n')
    with pytest.raises(tomllib.TOMLDecodeError) as info:
        tomllib.loads(config.read_text())
    lines = refused("fetch", "--offline", "--recipe", "demo", env={**env, "BUILD_KERNEL_CONFIG": str(config)}, code=4)
    assert lines == [f"error: {config}: invalid TOML: {info.value} (fix the syntax of the user config file {config})"]
    assert not cache.exists()


# --- plan.py: --arch / ARCH and --jobs / MAX_JOBS overrides (exit 2) -----------------------------

@pytest.mark.parametrize("override,where,message", [
    (["--arch", "12.0x"], "command line", "unknown arch '12.0x': write it as 12.0a, sm_120a, 120a or 8.6+PTX"),
    (["--arch", "8.0a"], "command line", "arch '8.0a' has no 'a' variant: drop the suffix"),
    (["--arch", ","], "command line", "empty arch list: name at least one arch, e.g. 12.0a"),
    ({"ARCH": "sm_120x"}, "environment ARCH", "unknown arch 'sm_120x': write it as 12.0a, sm_120a, 120a or 8.6+PTX"),
    ({"ARCH": "12.0a;12.0f"}, "environment ARCH",
     "12.0a and 12.0f both target compute capability 12.0: keep one (12.0a: this GPU's own instructions; "
     "12.0f: the 12.x family)"),
], ids=["cli-spelling", "cli-no-a-variant", "cli-empty", "env-spelling", "env-twins"])
def test_bad_arch_override_refuses_the_plan(override: list[str] | dict[str, str], where: str, message: str,
                                            env: dict[str, str], cache: Path) -> None:
    args = override if isinstance(override, list) else []
    extra = override if isinstance(override, dict) else {}
    lines = refused("fetch", "--offline", "--recipe", "demo", *args, env={**env, **extra}, code=2)
    assert lines == [f"error: {where}: arch: {message}"]
    assert not cache.exists()


def test_arch_the_toolkit_does_not_list_names_its_list(env: dict[str, str], cache: Path) -> None:
    """The archs that exist are the toolkit's (`nvcc --list-gpu-arch`), not a hand list."""
    [line] = refused("fetch", "--offline", "--recipe", "demo", env={**env, "ARCH": "13.0a"}, code=2)
    assert line.startswith("error: environment ARCH: arch: 13.0a: not an arch this toolkit can target (nvcc --list-gpu-arch (")
    assert line.endswith("7.5, 8.0, 8.6, 8.7, 8.8, 8.9, 9.0, 10.0, 10.3, 11.0, 12.0, 12.1); name one of those, or install a "
                         "CUDA toolkit that knows it")
    assert not cache.exists()


@pytest.mark.parametrize("override,where,shown", [
    (["--jobs", "0"], "command line", "0 is not a positive number (pass --jobs N with N >= 1, or leave it out for the recipe's)"),
    (["--jobs", "-2"], "command line", "-2 is not a positive number (pass --jobs N with N >= 1, or leave it out for the recipe's)"),
    ({"MAX_JOBS": "abc"}, "environment MAX_JOBS", "abc is not a positive number (e.g. MAX_JOBS=8 or MAX_JOBS=auto)"),
    ({"MAX_JOBS": "0"}, "environment MAX_JOBS", "0 is not a positive number (e.g. MAX_JOBS=8 or MAX_JOBS=auto)"),
], ids=["cli-zero", "cli-negative", "env-word", "env-zero"])
def test_bad_job_count_override_refuses_the_plan(override: list[str] | dict[str, str], where: str, shown: str,
                                                 env: dict[str, str], cache: Path) -> None:
    args = override if isinstance(override, list) else []
    extra = override if isinstance(override, dict) else {}
    lines = refused("fetch", "--offline", "--recipe", "demo", *args, env={**env, **extra}, code=2)
    assert lines == [f"error: {where}: jobs: {shown}"]
    assert not cache.exists()


# --- process.py: `stream` of a program that is not there (the build's error kind, 6) -------------
# Called directly: the CLI streams only the build frontend, with the build environment's own
# python (it exists once the build environment does), so reaching this needs a fetched tree
# and a build environment, i.e. the slow path. The call mirrors stages/builder/runner.py's.

@pytest.mark.parametrize("fix,hint", [
    ("install the build frontend (`build`) in the build environment",
     "install the build frontend (`build`) in the build environment"),
    (None, "install no-such-frontend or put it on PATH"),
], ids=["runner-fix", "default-fix"])
def test_stream_of_a_missing_program(tmp_path: Path, fix: str | None, hint: str) -> None:
    program = tmp_path / "bin" / "no-such-frontend"
    log = tmp_path / "logs" / "build.log"
    seen: list[str] = []
    with pytest.raises(BuildError) as info:
        process.stream([program, "-m", "build"], on_line=seen.append, error=BuildError, what="building the wheel",
                       fix=fix, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, log=log)
    assert info.value.render() == f"building the wheel: {program} not found ({hint})"
    assert info.value.exit_code == 6 and seen == []
    # The log holds the attempt and nothing else; no child was left running.
    assert log.read_text().startswith(f"$ {shlex.join([str(program), '-m', 'build'])}\n[not started: ")


def test_stream_in_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "no-such-build-dir"
    with pytest.raises(BuildError) as info:
        process.stream([sys.executable, "-c", "pass"], on_line=lambda _: None, error=BuildError,
                       what="building the wheel", cwd=folder, log=tmp_path / "build.log")
    assert str(folder) in info.value.render()


# --- recipe/: every problem one line `file:line: key: message (fix)`, exit 2 --------------------

BASE = f"""\
description = "error sites"
[source]
repo = "https://example.invalid/x.git"
commit = "{SHA}"
[patches]
series = "s"
version = "v1"
[build]
arch = ["12.0a"]
jobs = "auto"
[toolchain]
cuda = "13.0"
"""
DEP = 'repo = "https://example.invalid/dep.git"\n'
LINE_NOT_FOUND = 1  # a key that is absent is reported at the file's first line


def _without(line: str) -> str:
    assert line + "\n" in BASE
    return BASE.replace(line + "\n", "")


RECIPE_PROBLEMS = [
    # recipe/convert.py: a section that is not a table
    ("serve-not-a-table", 'serve = "x"\n' + BASE, 1,
     'serve: must be a table, not "x" (write [serve] and key = value lines below it)'),
    ("publish-not-a-table", "publish = 3\n" + BASE, 1,
     "publish: must be a table, not 3 (write [publish] and key = value lines below it)"),
    ("verify-not-a-table", 'verify = ["m"]\n' + BASE, 1,
     'verify: must be a table, not ["m"] (write [verify] and key = value lines below it)'),
    # recipe/load.py: extends that is not a name; verify.libraries that are not tables
    ("extends-not-a-string", "extends = 3\n" + BASE, 1, "extends: must be a recipe name string (e.g. extends = \"nightly-cu130\", or a .toml path)"),
    ("libraries-not-tables", BASE + "[verify]\nlibraries = 3\n", 14,
     'verify.libraries: must be tables, not 3 (write [verify.libraries."GLOB"] and key = value lines below it)'),
    # recipe/rules.py
    ("libraries-default", BASE + '[verify]\nlibraries_default = "all"\n', 14,
     "verify.libraries_default: 'all' is not one of asked, any (e.g. libraries_default = \"asked\")"),
    ("library-rule-archs", BASE + '[verify.libraries."lib*.so"]\narchs = ["asked", "12.0x"]\n', 14,
     'verify.libraries."lib*.so".archs: unknown arch \'12.0x\': write it as 12.0a, sm_120a, 120a or 8.6+PTX'
     ' (arch names, or "asked")'),
    ("library-rule-when-asked", BASE + '[verify.libraries."lib*.so"]\nwhen_asked = ["asked"]\n', 14,
     'verify.libraries."lib*.so".when_asked: unknown arch \'asked\': write it as 12.0a, sm_120a, 120a or 8.6+PTX'
     ' (arch names, e.g. ["9.0a"])'),
    ("source-repo-missing", _without('repo = "https://example.invalid/x.git"'), LINE_NOT_FOUND,
     "source.repo: missing (set the git URL or path to build from)"),
    ("patches-series-missing", _without('series = "s"'), 5,
     'patches: series and version are required (e.g. series = "sm120", version = "v1")'),
    ("patches-version-missing", _without('version = "v1"'), 5,
     'patches: series and version are required (e.g. series = "sm120", version = "v1")'),
    ("build-arch-missing", _without('arch = ["12.0a"]'), LINE_NOT_FOUND,
     'build.arch: missing (name the archs to build, e.g. ["12.0a"])'),
    ("build-jobs-zero", BASE.replace('jobs = "auto"', "jobs = 0"), 10,
     'build.jobs: 0 is neither "auto" nor a positive number (e.g. jobs = "auto" or jobs = 8)'),
    ("build-jobs-negative", BASE.replace('jobs = "auto"', "jobs = -3"), 10,
     'build.jobs: -3 is neither "auto" nor a positive number (e.g. jobs = "auto" or jobs = 8)'),
    ("build-jobs-word", BASE.replace('jobs = "auto"', 'jobs = "many"'), 10,
     "build.jobs: 'many' is neither \"auto\" nor a positive number (e.g. jobs = \"auto\" or jobs = 8)"),
    ("cuda-source", BASE + 'cuda_source = "conda"\n', 13,
     "toolchain.cuda_source: 'conda' is not one of auto, system, wheels (e.g. cuda_source = \"auto\")"),
    ("dep-neither-repo-nor-path", BASE + "[deps.extra]\n", 13, "deps.extra: give either repo + commit (or tag) or path"),
    ("dep-both-repo-and-path", BASE + f'[deps.extra]\n{DEP}commit = "{SHA}"\npath = "/src/dep"\n', 13,
     "deps.extra: give either repo + commit (or tag) or path"),
    ("dep-commit-short", BASE + f'[deps.extra]\n{DEP}commit = "abc123"\n', 15,
     'deps.extra.commit: must be a full 40-hex SHA (or give tag = "vX.Y.Z")'),
    ("dep-commit-uppercase", BASE + f'[deps.extra]\n{DEP}commit = "{SHA.upper()}"\n', 15,
     f"deps.extra.commit: '{SHA.upper()}' is a full SHA in uppercase: write it in lowercase, as git prints it "
     f"('{SHA}')"),
    ("dep-commit-missing", BASE + f"[deps.extra]\n{DEP}", LINE_NOT_FOUND,
     'deps.extra.commit: must be a full 40-hex SHA (or give tag = "vX.Y.Z")'),
]


@pytest.fixture
def recipes(project: Path) -> Path:
    """A project whose series s/v1 exists (empty), for recipes shaped like BASE."""
    write_series(project, "s", "v1", {})
    return project


@pytest.mark.parametrize("text,line,message", [c[1:] for c in RECIPE_PROBLEMS], ids=[c[0] for c in RECIPE_PROBLEMS])
def test_recipe_problem_is_one_line_with_file_line_and_fix(recipes: Path, text: str, line: int, message: str,
                                                          env: dict[str, str], cache: Path) -> None:
    path = write_recipe(recipes, "bad", text).resolve()
    assert tomllib.loads(path.read_text())  # the file itself is valid TOML: the model refuses it
    lines = refused("fetch", "--offline", "--recipe", str(path), env=env, code=2)
    assert lines == [f"error: {path}:{line}: {message}"]
    assert not cache.exists()


@pytest.mark.parametrize("given", ["recipes/no-such-recipe.toml", "/nonexistent/site/overlay.toml", "site/overlay"])
def test_recipe_path_that_does_not_exist(given: str, env: dict[str, str], cache: Path) -> None:
    lines = refused("fetch", "--offline", "--recipe", given, env=env, code=2)
    assert lines == [f"error: {given}: no such recipe file (check the path)"]
    assert not cache.exists()


def test_build_that_is_not_a_table_is_a_recipe_problem(recipes: Path, env: dict[str, str]) -> None:
    start, end = BASE.index("[build]"), BASE.index("[toolchain]")
    path = write_recipe(recipes, "bad", "build = 1\n" + BASE[:start] + BASE[end:]).resolve()
    lines = refused("plan", "--recipe", str(path), env=env, code=2)
    assert lines[0] == f"error: {path}:1: build: must be a table, not 1 (write [build] and key = value lines below it)"


def test_section_not_a_table_is_reported_at_its_own_line(recipes: Path, env: dict[str, str]) -> None:
    text = BASE.replace('description = "error sites"\n', 'description = "error sites"\nserve = "x"\n')
    path = write_recipe(recipes, "bad", text).resolve()
    lines = refused("plan", "--recipe", str(path), env=env, code=2)
    assert lines == [f'error: {path}:2: serve: must be a table, not "x" (write [serve] and key = value lines below it)']


# --- series.py: a tampered or incomplete patch series (exit 5) ----------------------------------

def _drop_from_lock(directory: Path, name: str) -> None:
    lock = directory / "series.lock"
    lock.write_text("".join(line + "\n" for line in lock.read_text().splitlines() if not line.endswith(name)))


SERIES_PROBLEMS = {
    "lock-missing": (lambda d: (d / "series.lock").unlink(),
                     "{d}/series.lock is missing (run `build-kernel patch lock {d}` after reviewing the patches)"),
    "listed-patch-missing": (lambda d: (d / MINIKERNEL[2]).unlink(),
                             "{d}/series lists " + MINIKERNEL[2] + ", but the file is missing (restore it or remove the line)"),
    "patch-not-in-lock": (lambda d: _drop_from_lock(d, MINIKERNEL[3]),
                          "{d}/" + MINIKERNEL[3] + ": not in series.lock (run `build-kernel patch lock {d}` after reviewing it)"),
}


@pytest.mark.parametrize("case", list(SERIES_PROBLEMS))
def test_broken_series_refuses_the_plan(case: str, project: Path, env: dict[str, str], cache: Path) -> None:
    edit, expected = SERIES_PROBLEMS[case]
    directory = copy_series(project, MINIKERNEL, "v2").resolve()
    edit(directory)
    path = write_recipe(project, "demo", demo_recipe_text("v2"))
    lines = refused("fetch", "--offline", "--recipe", str(path), env=env, code=5)
    assert lines == ["error: " + expected.format(d=directory)]
    assert not cache.exists()


@pytest.mark.parametrize("case", ["no-series-file", "listed-patch-missing"])
def test_patch_lock_refuses_a_broken_series(case: str, project: Path, env: dict[str, str]) -> None:
    directory = copy_series(project, MINIKERNEL, "v2").resolve()
    lock = directory / "series.lock"
    if case == "no-series-file":
        (directory / "series").unlink()
        lock.unlink()
        expected = f"no series file in {directory} (create it: one patch file name per line, in order)"
    else:
        (directory / MINIKERNEL[2]).unlink()
        expected = f"{directory}/series lists {MINIKERNEL[2]}, but the file is missing (restore it or remove the line)"
    before = lock.read_bytes() if lock.exists() else None
    lines = refused("patch", "lock", str(directory), env=env, code=5)
    assert lines == [f"error: {expected}"]
    # The lock is neither written nor touched; no temporary file is left beside it.
    assert (lock.read_bytes() if lock.exists() else None) == before
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith((".", "series.lock."))) == []


# --- toolchain.py preflight and cli/info.py doctor (exit 3) -------------------------------------

FAKE_NVCC = """#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release 11.8, V11.8.89";;
  --list-gpu-arch) for a in 75 80 86 89 90 100 120; do echo compute_$a; done;;
esac
exit 0
"""
FAKE_TOOL = '#!/bin/sh\necho "{name} version 3.28.4"\n'


class Doctor:
    def __init__(self, proc: subprocess.CompletedProcess[str], nvcc: Path, cache: Path) -> None:
        self.proc, self.nvcc, self.cache = proc, nvcc, cache
        self.data = json.loads(proc.stdout)


@pytest.fixture(scope="module")
def doctor(tmp_path_factory: pytest.TempPathFactory) -> Doctor:
    """`doctor --recipe` on a machine whose nvcc is CUDA 11.8 (a recorded fake: no compile), for a
    recipe asking CUDA 13.0, `cuda_source = "system"` and a cmake pin that is no specifier."""
    base = tmp_path_factory.mktemp("doctor")
    cuda_bin = base / "cuda-11.8" / "bin"
    cuda_bin.mkdir(parents=True)
    (cuda_bin / "nvcc").write_text(FAKE_NVCC)
    (cuda_bin / "nvcc").chmod(0o755)
    # cmake and ninja for a machine without them (the build env's own, next to python, come first).
    tools = base / "tools"
    tools.mkdir()
    for name in ("cmake", "ninja"):
        (tools / name).write_text(FAKE_TOOL.format(name=name) if name == "cmake" else "#!/bin/sh\necho 1.13.2\n")
        (tools / name).chmod(0o755)
    root = base / "proj"
    (root / "recipes").mkdir(parents=True)
    (root / "patches").mkdir()
    copy_series(root, MINIKERNEL, "v1")
    text = demo_recipe_text()
    path = write_recipe(root, "doc", text.replace("[toolchain]\n", '[toolchain]\ncuda_source = "system"\n'))
    cache = base / "cache"
    env = {"ARCH": "", "MAX_JOBS": "", "BUILD_KERNEL_CONFIG": str(base / "no-config.toml"),
           "CUDA_HOME": str(cuda_bin.parent), "CUDA_PATH": "", "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = run_cli("--json", "doctor", "--recipe", str(path), "--cache-dir", str(cache), env=env)
    return Doctor(proc, cuda_bin / "nvcc", cache)


def test_doctor_exits_3_with_its_problems_and_writes_nothing(doctor: Doctor) -> None:
    assert doctor.proc.returncode == 3, doctor.proc.stdout + doctor.proc.stderr
    assert "Traceback" not in doctor.proc.stderr
    assert doctor.data["tools"]["nvcc"] == str(doctor.nvcc) and doctor.data["tools"]["nvcc_version"] == "11.8"
    assert not doctor.cache.exists()


def test_doctor_says_nvcc_cuda_differs_from_the_recipe(doctor: Doctor) -> None:
    assert "nvcc is CUDA 11.8 but the recipe asks CUDA 13.0: point CUDA_HOME at a 13.0 toolkit" in doctor.data["problems"]


def test_a_cmake_pin_that_is_no_specifier_is_a_recipe_problem(project: Path, env: dict[str, str]) -> None:
    # Refused when the recipe loads (exit 2), before any preflight: the toolchain's preflight
    # message for it stays for Facts given directly (below).
    copy_series(project, MINIKERNEL, "v1")
    path = write_recipe(project, "r", demo_recipe_text().replace('cmake = ">=3.26"', 'cmake = "3.26"')).resolve()
    lines = refused("doctor", "--recipe", str(path), env=env, code=2)
    assert lines == [f"error: {path}:18: toolchain.cmake: '3.26' is not a version specifier (e.g. cmake = \">=3.26\")"]


def test_doctor_appends_why_no_cuda_toolkit_fits(doctor: Doctor) -> None:
    # cli/info.py: `cuda_source = "system"` and the system nvcc is not torch's CUDA -> no toolkit.
    toolkit = doctor.data["cuda_toolkit"]
    torch_cuda = doctor.data["tools"]["torch_cuda"] or "13.0"  # no torch: the recipe's CUDA stands in
    want = ".".join(torch_cuda.split(".")[:2])
    why = (f'cuda_source = "system" but system nvcc is CUDA 11.8 ({doctor.nvcc}), torch is built for CUDA {want}'
           f' (install CUDA {want} and set CUDA_HOME, or use cuda_source = "auto" / "wheels")')
    assert toolkit == {"source": "none", "why": why, "cached": None}
    assert doctor.data["problems"][-1] == why


# The same two preflight lines on recorded facts (a healthy CUDA 13.0 machine, one fact changed):
# what `build` and `doctor` print, independent of this machine's tools.
RECORDED = toolchain.Facts(
    python="/opt/env/bin/python", python_version="3.11.7", git="/usr/bin/git",
    cmake="/opt/env/bin/cmake", cmake_version="3.28.4", ninja="/opt/env/bin/ninja", ninja_version="1.13.2",
    gcc="/usr/bin/g++", gcc_version="12.2.0", nvcc="/usr/local/cuda-13.0/bin/nvcc", nvcc_version="13.0",
    nvcc_archs=("75", "80", "86", "87", "88", "89", "90", "100", "110", "103", "120", "121"),
    cuda_home="/usr/local/cuda-13.0", torch_version="2.14.1+cu130", torch_cuda="13.0")
CU128 = replace(RECORDED, nvcc="/usr/local/cuda-12.8/bin/nvcc", nvcc_version="12.8", cuda_home="/usr/local/cuda-12.8",
                nvcc_archs=("75", "80", "86", "87", "89", "90", "100", "120"), torch_version="2.9.1+cu128", torch_cuda="12.8")


@pytest.mark.parametrize("facts,cmake_spec,want_cuda,expected", [
    (CU128, ">=3.26", "13.0", ["nvcc is CUDA 12.8 but the recipe asks CUDA 13.0: point CUDA_HOME at a 13.0 toolkit"]),
    (RECORDED, "3.26", "13.0", ["[toolchain] cmake = '3.26' is not a version specifier: write e.g. \">=3.26\""]),
    (RECORDED, "=>3.26", "13.0", ["[toolchain] cmake = '=>3.26' is not a version specifier: write e.g. \">=3.26\""]),
], ids=["nvcc-cuda-differs", "cmake-bare-version", "cmake-reversed-operator"])
def test_preflight_problem_is_one_line_with_its_fix(facts: toolchain.Facts, cmake_spec: str, want_cuda: str,
                                                    expected: list[str]) -> None:
    assert toolchain.preflight(facts, parse_arch_list("12.0a"), cmake_spec=cmake_spec, want_cuda=want_cuda) == expected
