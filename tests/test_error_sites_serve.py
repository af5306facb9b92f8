"""Serve errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The serve stage's own parts, called as `serve` calls them, on real interpreters, real git repos and real
recipes in tmp_path: an interpreter that is not there or answers nothing (/bin/true: it runs and prints
nothing, as a broken wrapper script would), an interpreter without torch, a recipe without sglang, and
`[serve] sglang = "source"` on a tree that is no SGLang tree. Each error is one line naming the problem and
the fix, a ServeError (exit 9). No sglang is installed: none of these gets that far.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from build_kernel import plan as plan_mod
from build_kernel.errors import ServeError
from build_kernel.recipe.load import load
from build_kernel.resources import Resources
from build_kernel.stages.serve import environment, install, sglang_dist, wheelhouse
from tests.conftest import write_recipe, write_series

RES = Resources(cpus=2, cpus_why="test", memory_bytes=8 * 1024**3, memory_why="test")
TRUE = shutil.which("true") or "/bin/true"


def serve_plan(project: Path, tmp_path: Path, repo: str, commit: str, serve: str, toolchain: str = "") -> plan_mod.Plan:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "srv", f"""\
        [source]
        repo = "{repo}"
        commit = "{commit}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        [toolchain]
        {toolchain}
        [serve]
        model = "org/model"
        {serve}
        """)
    return plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path)}, cache_dir=tmp_path / "cache",
                            output_dir=tmp_path / "out", resources=RES)


def test_an_interpreter_that_is_not_there_or_prints_nothing(tmp_path: Path) -> None:
    missing = str(tmp_path / "env" / "bin" / "python")
    with pytest.raises(ServeError) as info:
        environment.inspect(missing, "sgl_kernel", dict(os.environ))
    assert info.value.exit_code == 9
    assert info.value.render() == (f"no serve interpreter at {missing} (make it with `build-kernel serve --install "
                                   "--recipe R`, or set [serve] python)")
    with pytest.raises(ServeError) as info:
        environment.inspect(TRUE, "sgl_kernel", dict(os.environ))
    assert info.value.render() == f"{TRUE} printed no inventory (run it by hand: is it a working Python 3?)"
    with pytest.raises(ServeError) as info:
        wheelhouse.target(TRUE, dict(os.environ))
    assert info.value.render() == f"{TRUE} printed no wheel tags (its pip must be importable (python -m ensurepip))"


def test_install_without_sglang_or_without_torch(project: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "minikernel-0.1.0-py3-none-any.whl"
    bare = serve_plan(project, tmp_path, "https://example.invalid/x.git", "40ef116f011cf1599811af1089ddf00971092bcf", "")
    with pytest.raises(ServeError) as info:
        install.install(bare, sys.executable, wheel)
    assert info.value.render() == ("the recipe names no sglang (set [toolchain] sglang = \"0.5.9\", or [serve] sglang = "
                                   "\"source\" for the sglang of the kernel's own commit)")
    # An interpreter without torch: a venv of the base Python, no packages.
    venv = tmp_path / "no-torch"
    (venv / "bin").mkdir(parents=True)
    base = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    (venv / "bin" / "python").symlink_to(base if base.exists() else Path(sys.executable).resolve())
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.base_prefix) / 'bin'}\ninclude-system-site-packages = false\n")
    pinned = serve_plan(project, tmp_path, "https://example.invalid/x.git", "40ef116f011cf1599811af1089ddf00971092bcf",
                        "", 'sglang = "0.5.9"')
    python = str(venv / "bin" / "python")
    with pytest.raises(ServeError) as info:
        install.install(pinned, sys.executable, wheel, python=python)
    assert info.value.render() == f"{python} has no torch (the serve interpreter must see the build environment's torch)"


def test_sglang_from_source_on_a_tree_that_is_not_sglang(project: Path, tmp_path: Path,
                                                         make_repo: Callable[..., tuple[Path, str]]) -> None:
    env = dict(os.environ)
    # No python/pyproject.toml at all
    repo, sha = make_repo("kernel", {"README.md": "a kernel\n"})
    plan = serve_plan(project, tmp_path, str(repo), sha, 'sglang = "source"')
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, env, log_path=tmp_path / "serve.log")
    assert info.value.render() == (f"{repo} @ {sha[:12]} has no python/pyproject.toml: not an SGLang tree (set [serve] "
                                   "sglang = \"release\" and [toolchain] sglang to a release)")
    # A python/pyproject.toml without a [project] name
    repo2, sha2 = make_repo("kernel2", {"python/pyproject.toml": "[build-system]\nrequires = []\n"})
    plan = serve_plan(project, tmp_path, str(repo2), sha2, 'sglang = "source"')
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, env, log_path=tmp_path / "serve.log")
    assert info.value.render() == (f"{repo2} @ {sha2[:12]}: python/pyproject.toml has no readable [project] name "
                                   "(KeyError) ([serve] sglang = \"source\" needs an SGLang tree; use \"release\" "
                                   "otherwise)")
    # A commit the repository does not have, offline: the fetch's reason, as the serve stage's error
    plan = serve_plan(project, tmp_path, str(repo2), "0" * 40, 'sglang = "source"')
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, env, log_path=tmp_path / "serve.log", offline=True)
    assert info.value.exit_code == 9
    assert info.value.message.startswith("fetching sglang's python/: ")
    assert not list((tmp_path / "cache" / "serve" / "sglang").glob("*/"))  # nothing half-made
