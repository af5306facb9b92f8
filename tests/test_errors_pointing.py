"""Errors that point the right way (issue 39, item 7): each names the real cause, where it is, and a fix.

Real recipe files in tmp_path (overlays with `extends = "<path>"`), real git repositories, real pip.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

from tests.conftest import REPO_ROOT, run_cli

DEMO = REPO_ROOT / "recipes" / "demo.toml"


def _errors(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, code: int = 2) -> list[str]:
    proc = run_cli(*args, env=env, cwd=cwd)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return [line.removeprefix("error: ") for line in proc.stderr.splitlines() if line.startswith("error: ")]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _overlay(tmp_path: Path, text: str, name: str = "overlay.toml") -> Path:
    return _write(tmp_path / "site" / name, f'extends = "{DEMO}"\n' + textwrap.dedent(text))


def test_an_unknown_table_is_reported_at_its_own_line(tmp_path: Path) -> None:
    recipe = _overlay(tmp_path, """
        [buidl]
        jobs = 4
        """)
    assert _errors("plan", "--recipe", str(recipe)) == [f"{recipe}:3: buidl: unknown key (did you mean 'build'?)"]


def test_an_inherited_key_is_blamed_on_the_file_that_set_it(tmp_path: Path) -> None:
    parent = _write(tmp_path / "site" / "parent.toml", DEMO.read_text().replace(
        'commit = "d4a68e142dc7f461c0f337fd67026ae6079605a5"', 'commit = "d4a68e14"'))
    line = next(n for n, text in enumerate(parent.read_text().splitlines(), 1) if text == 'commit = "d4a68e14"')
    overlay = _write(tmp_path / "site" / "overlay.toml", f"""
        extends = "{parent}"

        [deps.extra]
        repo = "https://example.invalid/extra.git"
        commit = "{'a' * 40}"
        """)
    errors = _errors("plan", "--recipe", str(overlay))
    assert f"{parent}:{line}: deps.minidep.commit: must be a full 40-hex SHA (or give tag = \"vX.Y.Z\")" in errors
    assert not [e for e in errors if e.startswith(f"{overlay}:1:")]


def test_every_bad_arch_is_reported_at_once_and_problems_in_line_order(tmp_path: Path) -> None:
    recipe = _overlay(tmp_path, """
        [build]
        jobs = "many"
        arch = ["12.0a", "bogus", "13.7x"]

        [source]
        commit = "not-a-sha"
        """)
    errors = _errors("plan", "--recipe", str(recipe))
    lines = [int(e.split(":")[1]) for e in errors if e.startswith(f"{recipe}:")]
    assert lines == sorted(lines), errors
    [arch] = [e for e in errors if "build.arch" in e]
    assert "'bogus'" in arch and "'13.7x'" in arch


def test_an_uppercase_sha_is_told_to_be_lowercase(tmp_path: Path) -> None:
    upper = "45AACFD8C22851CB8A07C2F9A22799388D75FEF0"
    recipe = _overlay(tmp_path, f"""
        [source]
        commit = "{upper}"
        """)
    [error] = _errors("plan", "--recipe", str(recipe))
    assert "not a full 40-hex SHA" not in error
    assert "uppercase" in error and upper.lower() in error


def test_a_folder_as_recipe_says_it_is_a_folder_and_names_its_recipes(tmp_path: Path) -> None:
    _overlay(tmp_path, "")
    [error] = _errors("plan", "--recipe", str(tmp_path / "site"))
    assert "no such recipe file" not in error
    assert "is a folder" in error and "overlay.toml" in error


def test_arch_from_the_environment_says_to_unset_it(tmp_path: Path) -> None:
    [error] = _errors("plan", "--recipe", "demo", env={"ARCH": "x86_64"})
    assert "x86_64" in error and "unset ARCH" in error and "--arch" in error


def _git_repo(tmp_path: Path, make_repo: Callable[..., tuple[Path, str]]) -> Path:
    repo, _ = make_repo("upstream", {"README": "x\n"})
    return repo


def test_an_abbreviated_sha_is_not_a_ref_problem(tmp_path: Path, make_repo: Callable[..., tuple[Path, str]]) -> None:
    repo, sha = make_repo("upstream", {"README": "x\n"})
    recipe = _overlay(tmp_path, f"""
        [source]
        repo = "{repo}"
        commit = "{sha[:10]}"
        allow_floating = true
        """)
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    [error] = _errors("fetch", "--recipe", str(recipe), env=env, code=4)
    assert "(check the ref)" not in error
    assert "abbreviated" in error and "full 40-hex" in error


def test_a_missing_mirror_is_named_not_the_ref(tmp_path: Path) -> None:
    config = _write(tmp_path / "config.toml", f"""
        [mirrors]
        "https://example.invalid/" = "{(tmp_path / 'no-such-mirror').as_uri()}/"
        """)
    recipe = _overlay(tmp_path, """
        [source]
        repo = "https://example.invalid/upstream.git"
        commit = "main"
        allow_floating = true
        """)
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache"), "BUILD_KERNEL_CONFIG": str(config)}
    [error] = _errors("fetch", "--recipe", str(recipe), env=env, code=4)
    assert "(check the ref)" not in error
    assert "no-such-mirror" in error and str(config) in error and "mirror" in error.split("(")[-1]


def test_pips_network_cause_is_not_hidden_behind_resolution_impossible(tmp_path: Path) -> None:
    from tests.test_publish import make_wheel

    # A pip config like the one this was seen under: a global constraint on torch, and indexes that cannot be
    # reached; pip warns about each unreachable index, then ends in ResolutionImpossible or "no matching distribution".
    (tmp_path / "constraints.txt").write_text("torch<=2.14.1\n")
    pip_conf = _write(tmp_path / "pip.conf", f"""
        [global]
        index-url = https://bk-no-such-host.invalid/simple
        constraint = {tmp_path / 'constraints.txt'}
        retries = 1
        timeout = 3
        """)
    recipe = _overlay(tmp_path, """
        [toolchain]
        torch = "2.11.0+cu130"
        torch_index = "https://bk-no-such-torch-index.invalid/whl/cu130"

        [verify]
        import_modules = ["bk_pip"]
        """)
    wheel = make_wheel(tmp_path / "w", "bk-pip", "1.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": str(pip_conf), "BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache"),
            "BUILD_KERNEL_INDEXES": str(tmp_path / "none.toml")}
    proc = run_cli("publish", str(wheel), "--recipe", str(recipe), "--to", str(tmp_path / "index"), env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert "ResolutionImpossible" not in error.split("(")[0]
    assert "Name or service not known" in error or "Temporary failure in name resolution" in error
    assert "bk-no-such-torch-index.invalid" in error
