"""Matched pairs: a kernel served with the sglang of its own commit, built by the serve stage.

A local SGLang-shaped repository made here, at two commits: a "release" (the kernel still
has `awq_marlin_repack`, sglang imports it) and a "snapshot" (both dropped it), like sglang
0.5.9 against the kernel at SGLang main 6ffc74ef. Its `python/` is a real setuptools-scm
project, built by pip (setuptools and setuptools-scm from PyPI, hence `network`); the
kernel is a real pure-Python wheel (no CUDA is needed to check names).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import git
import pytest

from build_kernel import plan as planmod
from build_kernel import recipe
from build_kernel.errors import ServeError
from build_kernel.stages.serve import api, environment, install, sglang_dist
from tests.conftest import DEMO_COMMIT, REPO_ROOT, commit_files, copy_series, demo_recipe_text, run_cli, write_recipe

KERNEL_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "sgl-kernel"
version = "0.3.21"
[tool.setuptools]
packages = ["sgl_kernel"]
"""
# As upstream's python/pyproject.toml at 6ffc74ef: a dynamic version from setuptools-scm rooted at
# the repository, README and LICENSE named but kept at the top (the release workflow copies them).
SGLANG_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "wheel"]
build-backend = "setuptools.build_meta"
[project]
name = "sglang"
dynamic = ["version"]
readme = "README.md"
license = { file = "LICENSE" }
requires-python = ">=3.10"
dependencies = ["packaging", "sgl-kernel==0.3.21", "torch==2.9.1"@EXTRA@]
[tool.setuptools.packages.find]
include = ["sglang*"]
[tool.setuptools_scm]
root = ".."
version_file = "sglang/_version.py"
fallback_version = "0.0.0.dev0"
"""
RELEASE = {
    "README.md": "# sglang-shaped\n", "LICENSE": "Apache-2.0 (test)\n",
    "sgl-kernel/pyproject.toml": KERNEL_PYPROJECT,
    "sgl-kernel/sgl_kernel/__init__.py": "def rmsnorm(x): ...\ndef awq_marlin_repack(x): ...\n",
    "python/pyproject.toml": SGLANG_PYPROJECT,
    "python/sglang/__init__.py": "",
    "python/sglang/srt/__init__.py": "",
    "python/sglang/srt/layers.py": "_is_cuda = True\nif _is_cuda:\n    from sgl_kernel import awq_marlin_repack, rmsnorm\n",
}
SNAPSHOT = {
    "sgl-kernel/sgl_kernel/__init__.py": "def rmsnorm(x): ...\n",
    "python/sglang/srt/layers.py": "_is_cuda = True\nif _is_cuda:\n    from sgl_kernel import rmsnorm\n",
}


class Upstream:
    def __init__(self, root: Path, *, deps: tuple[str, ...] = ()) -> None:
        self.repo = root / "sglang"
        extra = "".join(f', "{d}"' for d in deps)
        files = {**RELEASE, "python/pyproject.toml": SGLANG_PYPROJECT.replace("@EXTRA@", extra)}
        self.release = commit_files(self.repo, files, "release")
        self.release_tree = root / "release-tree"
        shutil.copytree(self.repo, self.release_tree, ignore=shutil.ignore_patterns(".git"))
        self.snapshot = commit_files(self.repo, SNAPSHOT, "snapshot")
        # What GitHub allows: partial clone filters and any commit by SHA.
        with git.Repo(self.repo).config_writer() as cfg:
            cfg.set_value("uploadpack", "allowFilter", "true")
            cfg.set_value("uploadpack", "allowAnySHA1InWant", "true")
        self.url = f"file://{self.repo}"

    def kernel_wheel(self, tree: Path, out: Path) -> Path:
        """The kernel of `tree` as a real wheel (setuptools of this environment, no download)."""
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(out), str(tree / "sgl-kernel")], check=True, capture_output=True)
        [wheel] = out.glob("*.whl")
        return wheel


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return Upstream(tmp_path_factory.mktemp("upstream"))


def source_recipe(project: Path, up: Upstream, commit: str, *, serve: str = 'sglang = "source"\n',
                  toolchain: str = "") -> Path:
    if not (project / "patches" / "minikernel" / "v1").is_dir():
        copy_series(project, ["0001-cmake-guard-policies.patch"], "v1")
    text = demo_recipe_text("v1").replace('repo = "example:minikernel"', f'repo = "{up.url}"')
    text = text.replace(f'commit = "{DEMO_COMMIT}"', f'commit = "{commit}"')
    text = text.replace("[toolchain]\n", f"[toolchain]\n{toolchain}", 1)
    return write_recipe(project, "pair", text + f'\n[serve]\nmodel = "m"\n{serve}')


def _plan(path: Path, cache: Path) -> planmod.Plan:
    return planmod.resolve(recipe.load(str(path)), cache_dir=cache)


@pytest.mark.network  # pip fetches setuptools-scm from PyPI for the isolated build
def test_source_sglang_is_built_from_the_kernels_commit_sparse_with_it_in_the_version(
        upstream: Upstream, project: Path, tmp_path: Path) -> None:
    plan = _plan(source_recipe(project, upstream, upstream.snapshot), tmp_path / "cache")
    wheel = sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log")
    assert wheel.name == f"sglang-0.0.0.dev0+g{upstream.snapshot[:12]}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("sglang/srt/layers.py").decode() == SNAPSHOT["python/sglang/srt/layers.py"]
        meta = zf.read(f"sglang-0.0.0.dev0+g{upstream.snapshot[:12]}.dist-info/METADATA").decode()
    assert "# sglang-shaped" in meta  # the top-level README, copied into python/ as upstream's release does
    # Sparse: the kernel's files at that commit were never fetched into the mirror.
    from build_kernel.stages.fetch import mirror

    mirror_repo = git.Repo(mirror.path_for(plan.cache_dir, upstream.url))
    kernel_blob = git.Repo(upstream.repo).git.rev_parse(f"{upstream.snapshot}:sgl-kernel/sgl_kernel/__init__.py")
    listing = mirror.local(mirror_repo, "rev-list", "--objects", "--missing=print", "--no-walk", upstream.snapshot)
    assert f"?{kernel_blob}" in listing.split()
    # Cached by commit: a second call builds nothing.
    mtime = wheel.stat().st_mtime_ns
    again = sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log", offline=True)
    assert again == wheel and again.stat().st_mtime_ns == mtime


def _sglang_wheel(tmp_path: Path, version: str) -> Path:
    """A real wheel named sglang of `version` (setuptools of this environment, no download)."""
    src = tmp_path / f"sglang-src-{version}"
    (src / "sglang").mkdir(parents=True)
    (src / "sglang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (src / "pyproject.toml").write_text(f'[project]\nname = "sglang"\nversion = "{version}"\n'
                                        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    out = tmp_path / "wheelhouse"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(src)], check=True, capture_output=True)
    return next(out.glob(f"sglang-{version.replace('+', '*')}-*.whl"))


def test_a_wheelhouse_with_this_commits_sglang_build_serves_it_offline_and_another_commits_does_not(
        upstream: Upstream, project: Path, tmp_path: Path) -> None:
    """The GPU host case: no network, the partial mirror holds the kernel's files only, and the carried wheelhouse
    holds sglang built from python/ of the same commit elsewhere."""
    plan = _plan(source_recipe(project, upstream, upstream.snapshot), tmp_path / "cache")
    other = _sglang_wheel(tmp_path, f"0.0.0.dev0+g{upstream.release[:12]}")
    with pytest.raises(ServeError, match="--offline forbids fetching") as info:
        sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log", offline=True,
                          wheelhouse=other.parent)
    assert "python/" in info.value.message
    ours = _sglang_wheel(tmp_path, f"0.0.0.dev0+g{upstream.snapshot[:12]}")
    wheel = sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log", offline=True,
                              wheelhouse=ours.parent)
    assert wheel.name == ours.name and wheel.read_bytes() == ours.read_bytes()
    assert wheel.is_relative_to(plan.cache_dir)  # cached: later builds of this commit need no wheelhouse
    assert sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log", offline=True) == wheel


@pytest.mark.network
def test_matched_pairs_pass_the_api_check_and_the_snapshot_with_the_release_is_refused(
        upstream: Upstream, project: Path, tmp_path: Path) -> None:
    plan = _plan(source_recipe(project, upstream, upstream.snapshot), tmp_path / "cache")
    snapshot_kernel = upstream.kernel_wheel(upstream.repo, tmp_path / "k-snapshot")
    release_kernel = upstream.kernel_wheel(upstream.release_tree, tmp_path / "k-release")
    # The serve environment as `serve --install` makes it: the kernel, then sglang of the same commit.
    python = install.install(plan, sys.executable, snapshot_kernel)
    installed = environment.inspect(python, "sgl_kernel", dict(plan.env))
    choice = sglang_dist.choose(plan)
    assert installed.sglang == choice.version == f"0.0.0.dev0+g{upstream.snapshot[:12]}"
    assert choice.admits(installed.sglang) and not sglang_dist.Choice("release", "0.5.9").admits(installed.sglang)
    assert installed.sglang_root is not None
    assert api.missing(snapshot_kernel, "sgl_kernel", Path(installed.sglang_root)) == {}
    release_sglang = upstream.release_tree / "python" / "sglang"
    assert api.missing(release_kernel, "sgl_kernel", release_sglang) == {}
    assert api.missing(snapshot_kernel, "sgl_kernel", release_sglang) == {"awq_marlin_repack": ["srt/layers.py"]}


def test_source_sglang_and_a_release_pin_together_are_a_recipe_error(upstream: Upstream, project: Path) -> None:
    both = source_recipe(project, upstream, upstream.snapshot, toolchain='sglang = "0.5.9"\n')
    proc = run_cli("plan", "--recipe", str(both))
    assert proc.returncode == 2
    assert ("serve.sglang: \"source\" builds sglang from [source] commit, but [toolchain] sglang = '0.5.9' names a "
            "release: remove one of them") in proc.stderr
    bad = source_recipe(project, upstream, upstream.snapshot, serve='sglang = "main"\n')
    proc = run_cli("plan", "--recipe", str(bad))
    assert proc.returncode == 2 and "serve.sglang: 'main' is neither 'release' nor 'source'" in proc.stderr


@pytest.mark.parametrize(("name", "origin", "version"), [
    ("nightly-cu130", "source", "0.0.0.dev0+g6ffc74efd7d2"), ("sgl-kernel-0.3.21", "release", "0.5.9")])
def test_plan_shows_which_sglang_serves_and_where_it_comes_from(name: str, origin: str, version: str) -> None:
    proc = run_cli("--json", "plan", "--recipe", name)
    assert proc.returncode == 0, proc.stderr
    sglang = json.loads(proc.stdout)["serve"]["sglang"]
    assert (sglang["from"], sglang["version"]) == (origin, version)
    if origin == "source":
        assert sglang["repo"] == "https://github.com/sgl-project/sglang.git"
        assert sglang["commit"] == "6ffc74efd7d23627c0245efb61af7f62cde4a970"
    human = run_cli("plan", "--recipe", str(REPO_ROOT / "recipes" / f"{name}.toml"))
    assert f"with sglang {version}" in " ".join(human.stdout.split())


# As upstream's python/pyproject.toml from 1d1972139 (2026-05-18, in 0753182b's tree): a PyO3 extension built
# from a crate outside python/, by setuptools-rust.
RUST_TABLE = """
[[tool.setuptools-rust.ext-modules]]
target = "sglang.srt.grpc._core"
path = "../rust/sglang-grpc/Cargo.toml"
binding = "PyO3"
"""


@pytest.mark.network  # pip fetches setuptools-scm and setuptools-rust from PyPI for the isolated build
def test_a_rust_extension_nothing_imports_is_left_out_and_the_wheel_stays_pure(
        project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sglang at 0753182b: pip's build of python/ failed on "can't find manifest for Rust extension
    `sglang.srt.grpc._core` at path `../rust/sglang-grpc/Cargo.toml`"; marked optional instead, the wheel came out
    cp311-linux, which a Python 3.12 host refuses."""
    up = Upstream(tmp_path / "up")
    pyproject = SGLANG_PYPROJECT.replace("@EXTRA@", "").replace(
        '"setuptools-scm>=8.0",', '"setuptools-scm>=8.0", "setuptools-rust>=1.10",') + RUST_TABLE
    grpc = commit_files(up.repo, {"python/pyproject.toml": pyproject,
                                  "python/sglang/srt/grpc/__init__.py": "# SGLang gRPC module\n"}, "grpc crate")
    plan = _plan(source_recipe(project, up, grpc), tmp_path / "cache")
    wheel = sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log")
    assert wheel.name == f"sglang-0.0.0.dev0+g{grpc[:12]}-py3-none-any.whl"
    assert "sglang.srt.grpc._core left out" in capsys.readouterr().err
    # Upstream's file is the mirror's, untouched: only the build copy lost the table.
    assert RUST_TABLE.strip() in git.Repo(up.repo).git.show(f"{grpc}:python/pyproject.toml")
    # A commit where a module imports it: leaving it out would break the server, so one line names the importer.
    uses = commit_files(up.repo, {"python/sglang/srt/grpc/server.py": "import os\nfrom . import _core\n"}, "use it")
    plan = _plan(source_recipe(project, up, uses), tmp_path / "cache2")
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, dict(plan.env), log_path=tmp_path / "log")
    assert "sglang/srt/grpc/server.py:2 imports the Rust extension sglang.srt.grpc._core" in info.value.message
    assert 'sglang = "release"' in (info.value.hint or "")
    assert not list((tmp_path / "cache2" / "serve" / "sglang").glob("*/*.whl"))  # nothing half-written


@pytest.mark.parametrize(("path", "text", "line"), [
    ("sglang/srt/grpc/server.py", "x = 1\nfrom sglang.srt.grpc import (\n    _core,\n)\n", 2),
    ("sglang/srt/grpc/server.py", "from . import (\n    other,\n)\nfrom sglang.srt.grpc import util\n", None),
    ("sglang/srt/grpc/server.py", "x = 1\nfrom sglang.srt.grpc import _core, other\n", 2),
    ("sglang/srt/entry.py", "import sglang.srt.grpc._core as core\n", 1),
    ("sglang/srt/entry.py", "m = importlib.import_module('sglang.srt.grpc._core')\n", 1),
    ("sglang/srt/grpc/server.py", "from ._core import serve\n", 1),
    ("sglang/srt/other/server.py", "from . import _core\n", None),  # another package's _core
    ("sglang/srt/entry.py", "# sglang.srt.grpc._core is built by setuptools-rust\n", None),
])
def test_importer_finds_what_imports_an_extension(tmp_path: Path, path: str, text: str, line: int | None) -> None:
    from build_kernel.stages.serve import rust_extensions

    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(text)
    found = rust_extensions.importer(tmp_path, "sglang.srt.grpc._core")
    assert found == (f"{path}:{line}" if line else None)
