"""Shared fixtures: real git repos, a throw-away project root, and the CLI as a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import git
import pytest

# pytest-xdist: which tests share a worker (the hooks are found here, in conftest's namespace).
from tests.xdist_groups import (  # noqa: F401
    pytest_collection_finish,
    pytest_configure_node,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

# The suite starts thousands of Python children (the CLI, pip, sglang's flag parser, import checks). Where the
# environment says PYTHONDONTWRITEBYTECODE=1 (this project's machines do), each of them compiled every module
# it imported from source: sglang's server_args alone is ~3 s more CPU a parse. Bytecode is written, under one
# folder of its own, so no test folder (nor the tree) gets a __pycache__ a test did not make. Set before the
# xdist workers start, so they and every child inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / f"build-kernel-tests-pycache-{os.getuid()}"))
IDENTITY = {
    "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-02T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-02T00:00:00+00:00",
}


def load_bench_script(path: str, name: str) -> ModuleType:
    """A bench/ script (not a package) as module `name`, registered in sys.modules before it runs: dataclasses look
    their module up by name while the class is made."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def commit_files(repo_dir: Path, files: dict[str, str | None], message: str = "change") -> str:
    """Write (or delete, for None) files in a git repo and commit them; return the SHA."""
    repo = git.Repo.init(repo_dir, initial_branch="main") if not (repo_dir / ".git").exists() else git.Repo(repo_dir)
    for name, text in files.items():
        path = repo_dir / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    repo.git.add("--all")
    with repo.git.custom_environment(**IDENTITY):
        repo.git.commit("--quiet", "--no-gpg-sign", "--allow-empty", "-m", message)
    return repo.head.commit.hexsha


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    def make(name: str, files: dict[str, str | None]) -> tuple[Path, str]:
        return tmp_path / name, commit_files(tmp_path / name, files, f"{name}: initial")
    return make


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root with recipes/ and patches/ like the repo's, empty."""
    root = tmp_path / "proj"
    (root / "recipes").mkdir(parents=True)
    (root / "patches").mkdir()
    return root


def write_series(root: Path, series: str, version: str, patches: dict[str, str], info: str = "") -> Path:
    """A patch series folder with its series file and a fresh lock."""
    from build_kernel.series import write_lock

    directory = root / "patches" / series / version
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in patches.items():
        (directory / name).write_text(textwrap.dedent(text).lstrip("\n"))
    (directory / "series").write_text("".join(f"{n}\n" for n in patches))
    if info:
        (directory / "info.toml").write_text(textwrap.dedent(info))
    write_lock(directory)
    return directory


def write_recipe(root: Path, name: str, text: str) -> Path:
    path = root / "recipes" / f"{name}.toml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, as a user runs it."""
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "build_kernel", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or REPO_ROOT, check=False)


def copy_series(root: Path, names: list[str], version: str, edit: Callable[[str, str], str] | None = None) -> Path:
    """A variant of patches/minikernel/v1 in a test project: some patches, maybe edited."""
    from build_kernel.series import load_series, write_lock

    source = REPO_ROOT / "patches" / "minikernel" / "v1"
    target = root / "patches" / "minikernel" / version
    target.mkdir(parents=True)
    paths = {p.name: p.path for p in load_series(source).patches}  # the pool's files, found by their sha256
    for name in names:
        text = paths[name].read_text()
        (target / name).write_text(edit(name, text) if edit else text)
    (target / "series").write_text("".join(f"{n}\n" for n in names))
    (target / "info.toml").write_text((source / "info.toml").read_text())
    write_lock(target)
    return target


# The miniature's commit recipes/demo.toml pins (examples/minikernel, committed deterministically).
DEMO_COMMIT = re.findall(r'^commit = "([0-9a-f]{40})"', (REPO_ROOT / "recipes" / "demo.toml").read_text(), re.M)[0]


def demo_recipe_text(version: str = "v1", extra_build: str = "") -> str:
    """recipes/demo.toml, pointed at another series version, maybe with more [build] keys."""
    text = (REPO_ROOT / "recipes" / "demo.toml").read_text().replace('version = "v1"', f'version = "{version}"')
    text = text.replace('[publish]\ntarget = "wheels/published"\n', "")
    return text.replace("[build]\n", f"[build]\n{extra_build}", 1)


class DemoBuild:
    def __init__(self, cache: Path, out: Path, wheel: Path, seconds: float, output: str) -> None:
        self.cache, self.out, self.wheel, self.seconds, self.output = cache, out, wheel, seconds, output


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory: pytest.TempPathFactory) -> DemoBuild:
    """The patched miniature for 12.0a, built and verified once per session by the CLI."""
    import time

    cache, out = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("wheels")
    env = {"BUILD_KERNEL_CACHE_DIR": str(cache), "BUILD_KERNEL_OUTPUT_DIR": str(out)}
    start = time.monotonic()
    built = run_cli("build", "--recipe", "demo", "--arch", "12.0a", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    verified = run_cli("verify", "--recipe", "demo", "--arch", "12.0a", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    [wheel] = list(out.glob("*.whl"))
    output = built.stdout + built.stderr + verified.stdout + verified.stderr
    return DemoBuild(cache, out, wheel, time.monotonic() - start, output)


# Fixtures that download from PyPI: a test using one is a `network` test, whatever its file.
NETWORK_FIXTURES = {"toolkit_cache"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if NETWORK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.network)


@pytest.fixture(scope="session")
def unpruned_demo_build(demo_build: DemoBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same commit and archs as demo_build, without the arch-pruning patch (0006): what
    the prune proof compares the session wheel with. Shares demo_build's cache (one extra build)."""
    root = tmp_path_factory.mktemp("unpruned-proj")
    (root / "recipes").mkdir()
    names = [n for n in (REPO_ROOT / "patches/minikernel/v1/series").read_text().split() if "prune-arch" not in n]
    copy_series(root, names, "unpruned")
    write_recipe(root, "unpruned", demo_recipe_text("unpruned"))
    out = tmp_path_factory.mktemp("unpruned-wheels")
    built = run_cli("--cache-dir", str(demo_build.cache), "--output-dir", str(out), "--arch", "12.0a", "build",
                    "--recipe", str(root / "recipes/unpruned.toml"))
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = list(out.glob("*.whl"))
    return wheel


# A test-only patch over 0001-0003 (upstream's hard-coded gencode list still in place): the sm100 library's NVFP4
# define gated on a CUDA version read from a variable that is empty where it is read (upstream's failure mode:
# CUDA_VERSION before torch's FindCUDA ran; here a misspelt name, equally empty), so FP4 is compiled out.
FP4_GATE_PATCH = """\
Description: NVFP4 for the sm100 library gated on an empty CUDA version variable (test only)
Forwarded: not-needed
---
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -116,9 +116,14 @@
 )
\x20
 # =========================== Common SM100+ Build =========================== #
+# NVFP4 from CUDA 12.8 (the version read from a variable that is empty here: CUDA_VERSION before FindCUDA)
+set(MINIKERNEL_SM100_NVFP4 "")
+if("${MINIKERNEL_CUDA_VER}" VERSION_GREATER_EQUAL "12.8")
+    set(MINIKERNEL_SM100_NVFP4 "-DENABLE_NVFP4=1")
+endif()
 add_library(common_ops_sm100_build SHARED ${SOURCES})
 target_compile_options(common_ops_sm100_build PRIVATE
-    $<$<COMPILE_LANGUAGE:CUDA>:${MINIKERNEL_CUDA_FLAGS} -DENABLE_NVFP4=1>
+    $<$<COMPILE_LANGUAGE:CUDA>:${MINIKERNEL_CUDA_FLAGS} ${MINIKERNEL_SM100_NVFP4}>
 )
 set_target_properties(common_ops_sm100_build PROPERTIES
     OUTPUT_NAME "common_ops"
"""


class UpstreamArchsBuild:
    def __init__(self, wheel: Path, recipe: Path) -> None:
        self.wheel, self.recipe = wheel, recipe


@pytest.fixture(scope="session")
def upstream_archs_build(tmp_path_factory: pytest.TempPathFactory) -> UpstreamArchsBuild:
    """The miniature with the policy guards, the CCCL path and C++20 only (0001-0003: no arch patch, so upstream's
    hard-coded gencode list, every arch) and FP4_GATE_PATCH, built for 12.0a once per session: the wheel both
    test_build's arch-list test and test_verify's FP4-compiled-out test read (one build of the miniature for all
    five archs, ~130 CPU s, where each test built its own)."""
    from build_kernel.series import write_lock

    root = tmp_path_factory.mktemp("upstream-archs")
    (root / "recipes").mkdir()
    names = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())[:3]
    series = copy_series(root, names, "p3")
    (series / "0004-nvfp4-gated-on-an-empty-variable.patch").write_text(FP4_GATE_PATCH)
    (series / "series").write_text("".join(f"{n}\n" for n in [*names, "0004-nvfp4-gated-on-an-empty-variable.patch"]))
    write_lock(series)
    recipe = write_recipe(root, "r", demo_recipe_text("p3"))
    built = run_cli("--cache-dir", str(tmp_path_factory.mktemp("upstream-archs-cache")), "--output-dir",
                    str(root / "wheels"), "--jobs", "2", "--json", "build", "--recipe", str(recipe))
    assert built.returncode == 0, built.stdout + built.stderr
    return UpstreamArchsBuild(Path(json.loads(built.stdout)["wheel"]), recipe)


# A double of the CUDA driver, for `--arch native` on a host without a GPU (no GPU can run here): a real shared
# library named libcuda.so.1 with the four entry points gpus.present() calls, reporting one GPU per compute
# capability BK_TEST_GPUS lists ("12.0 8.6"), or CUDA_ERROR_NO_DEVICE from cuInit when it lists none.
_DRIVER_DOUBLE_C = r"""
#include <stdio.h>
#include <stdlib.h>
static int gpus(int cc[][2], int max) {
    const char *s = getenv("BK_TEST_GPUS");
    int n = 0, used = 0, major, minor;
    while (s && n < max && sscanf(s, " %d.%d%n", &major, &minor, &used) == 2) {
        cc[n][0] = major; cc[n][1] = minor; n++; s += used;
    }
    return n;
}
int cuInit(unsigned flags) { int cc[64][2]; (void)flags; return gpus(cc, 64) ? 0 : 100; }
int cuDeviceGetCount(int *count) { int cc[64][2]; *count = gpus(cc, 64); return 0; }
int cuDeviceGet(int *device, int ordinal) { int cc[64][2]; *device = ordinal; return ordinal < gpus(cc, 64) ? 0 : 101; }
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    int cc[64][2];
    if (device >= gpus(cc, 64) || (attribute != 75 && attribute != 76)) return 1;
    *value = cc[device][attribute == 75 ? 0 : 1];
    return 0;
}
"""


@pytest.fixture
def driver_double(tmp_path: Path) -> dict[str, str]:
    """The environment that makes a process load the driver double (compiled here by gcc) as libcuda.so.1;
    add BK_TEST_GPUS for the GPUs it reports."""
    folder = tmp_path / "driver-double"
    folder.mkdir()
    (folder / "libcuda.c").write_text(_DRIVER_DOUBLE_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "libcuda.c")], check=True, capture_output=True)
    return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(folder), os.environ.get("LD_LIBRARY_PATH")) if p)}


def wheel_with(template: Path, files: dict[str, Path], out: Path) -> Path:
    """A copy of a real wheel in `out` with `files` (member name: local file) replacing its members of the
    same name or added beside them; its other files kept."""
    out.mkdir(parents=True)
    target = out / template.name
    with zipfile.ZipFile(template) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, files[info.filename].read_bytes() if info.filename in files else src.read(info))
        for name in sorted(set(files) - set(src.namelist())):
            dst.write(files[name], name)
    return target
