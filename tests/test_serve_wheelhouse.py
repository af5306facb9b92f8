"""`serve --install --wheelhouse DIR`: an offline host installs from a folder of wheels, and a
folder that lacks something is refused in one line listing all it lacks, before pip runs.

Every wheel here is real: tiny projects built by pip with this environment's setuptools, the
SGLang-shaped source of test_serve_pairs, and (network) setuptools/setuptools-scm/wheel
downloaded from PyPI once, so that the source build itself runs from the folder.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_kernel.stages.serve import environment, install, sglang_dist, wheelhouse
from tests.conftest import run_cli
from tests.test_serve_pairs import Upstream, _plan, source_recipe


def tiny_wheel(out: Path, name: str, version: str, deps: list[str], work: Path) -> Path:
    """A real pure-Python wheel of a project with these requirements."""
    src = work / f"{name}-{version}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text("")
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "{version}"
        dependencies = {json.dumps(deps)}
        [tool.setuptools]
        packages = ["{name}"]
        """))
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir",
                    str(out), str(src)], check=True, capture_output=True)
    return next(out.glob(f"{name}-{version}-*.whl"))


def test_the_walk_lists_every_lack_with_who_needs_it_and_skips_what_is_there(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    tiny_wheel(folder, "alpha", "1.0", ["beta>=2", "delta; extra == 'x'", "winonly; sys_platform == 'win32'",
                                        "packaging"], tmp_path)
    tiny_wheel(folder, "beta", "1.0", [], tmp_path)  # too old for alpha
    tiny_wheel(folder, "epsilon", "1.0", ["zeta"], tmp_path)
    # A wheel for another platform is no wheel for this one.
    zeta = tiny_wheel(tmp_path / "other", "zeta", "1.0", [], tmp_path)
    shutil.copy(zeta, folder / "zeta-1.0-cp27-cp27m-win32.whl")
    tgt = wheelhouse.target(sys.executable, {})
    assert wheelhouse.lacking(folder, ["alpha[x]", "epsilon", "packaging"], tgt) == [
        "beta>=2 (for alpha 1.0)", "delta (for alpha 1.0)", "zeta (for epsilon 1.0)"]
    # packaging is installed here: no need, unless the install is an isolated build (an empty env).
    assert wheelhouse.lacking(folder, ["packaging"], tgt) == []
    assert wheelhouse.lacking(folder, ["packaging"], tgt, installed_count=False) == ["packaging"]
    with pytest.raises(Exception, match=r"^the wheelhouse .* lacks 1 distribution\(s\) for x: nope>=1 \(add their "):
        wheelhouse.require(folder, ["nope>=1"], tgt, what="x")


@pytest.fixture(scope="module")
def build_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """setuptools, setuptools-scm and wheel as wheels: what building sglang's python/ needs."""
    out = tmp_path_factory.mktemp("build-tools")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(out),
                    "setuptools>=61.0", "setuptools-scm>=8.0", "wheel"], check=True, capture_output=True)
    return out


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.network  # build_tools: from PyPI, once; everything after runs from the folder
def test_install_from_a_wheelhouse_says_all_it_lacks_then_installs_from_it_alone(
        build_tools: Path, project: Path, tmp_path: Path) -> None:
    up = Upstream(tmp_path / "up", deps=("alpha",))
    recipe = source_recipe(project, up, up.snapshot)
    kernel = up.kernel_wheel(up.repo, tmp_path / "kernel")
    folder = tmp_path / "wheelhouse"
    tiny_wheel(folder, "alpha", "1.0", ["beta>=2"], tmp_path)
    cache = tmp_path / "cache"

    def serve_install() -> subprocess.CompletedProcess[str]:
        return run_cli("serve", str(kernel), "--recipe", str(recipe), "--cache-dir", str(cache), "--install",
                       "--wheelhouse", str(folder))

    where = f"{up.url} @ {up.snapshot[:12]}"
    proc = serve_install()
    assert proc.returncode == 9
    assert _error(proc).startswith(f"error: the wheelhouse {folder} lacks 3 distribution(s) for building sglang from "
                                   f"{where}: setuptools>=61.0, setuptools-scm>=8.0, wheel (add their wheels for "
                                   "Python 3.")
    for w in build_tools.iterdir():
        shutil.copy(w, folder)
    proc = serve_install()
    assert proc.returncode == 9
    version = f"0.0.0.dev0+g{up.snapshot[:12]}"
    assert _error(proc).startswith(f"error: the wheelhouse {folder} lacks 1 distribution(s) for sglang {version}: "
                                   "beta>=2 (for alpha 1.0) (add their wheels")
    tiny_wheel(folder, "beta", "2.0", [], tmp_path)
    plan = _plan(recipe, cache)
    # No index at all: a reachable one would be used by mistake, this one cannot be.
    plan = dataclasses.replace(plan, env={**plan.env, "PIP_INDEX_URL": "http://127.0.0.1:9/simple"})
    python = install.install(plan, sys.executable, kernel, folder=folder)
    installed = environment.inspect(python, "sgl_kernel", dict(plan.env))
    assert installed.sglang == version and sglang_dist.choose(plan).admits(installed.sglang)
    have = wheelhouse.target(python, {}).have
    assert (have["alpha"], have["beta"], have["sgl-kernel"]) == ("1.0", "2.0", "0.3.21")
