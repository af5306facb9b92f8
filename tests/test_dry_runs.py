"""Dry runs never create, install or download anything (issue 39, item 4).

Each `--dry-run` runs as a user would, with every network route closed (proxies pointing at a
closed port, pip's index too, git limited to local files) and the cache, the output folder, HOME
and the working directory snapshotted before and after: nothing may appear or change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_cli
from tests.test_publish import make_wheel

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once
NO_NETWORK = {
    "http_proxy": CLOSED, "https_proxy": CLOSED, "HTTP_PROXY": CLOSED, "HTTPS_PROXY": CLOSED,
    "ALL_PROXY": CLOSED, "all_proxy": CLOSED, "NO_PROXY": "", "no_proxy": "",
    "PIP_INDEX_URL": f"{CLOSED}/simple/", "PIP_RETRIES": "0", "PIP_DEFAULT_TIMEOUT": "2",
    "GIT_ALLOW_PROTOCOL": "file",
}


def _snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every path under `roots` with its size and mtime: any file or folder made or written shows."""
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            st = path.lstat()
            out[str(path)] = (st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[dict[str, Path]]:
    paths = {name: tmp_path / name for name in ("cache", "out", "home", "work")}
    for path in paths.values():
        path.mkdir()
    # A wheel where a command needs one to get as far as its own dry run.
    make_wheel(paths["out"], "sgl-kernel", "0.4.3", verified=False)
    for path in paths.values():
        path.chmod(0o555)  # read-only (root ignores it: the snapshot is what proves it)
    yield paths
    for path in paths.values():
        path.chmod(0o755)


def _dry(sandbox: dict[str, Path], *args: str) -> tuple[int, str]:
    env = {**NO_NETWORK, "HOME": str(sandbox["home"]), "XDG_CONFIG_HOME": str(sandbox["home"] / ".config"),
           "BUILD_KERNEL_CACHE_DIR": str(sandbox["cache"]), "BUILD_KERNEL_OUTPUT_DIR": str(sandbox["out"])}
    before = _snapshot(*sandbox.values())
    proc = run_cli(*args, env=env, cwd=sandbox["work"])
    assert _snapshot(*sandbox.values()) == before, f"{args} changed files: {proc.stdout}{proc.stderr}"
    return proc.returncode, proc.stdout + proc.stderr


RECIPE = str(REPO_ROOT / "recipes" / "nightly-0.4.toml")  # pins torch 2.11.0+cu130 (an env not made here)


def test_pipeline_dry_run_prints_the_resolved_plan_and_touches_nothing(sandbox: dict[str, Path]) -> None:
    code, out = _dry(sandbox, "--recipe", RECIPE, "--dry-run")
    assert code == 0, out
    # The plan, as `plan` prints it, before the stage table.
    assert "0753182b" in out and "12.0a: loads sgl_kernel/sm100/common_ops*" in out and "torch" in out
    assert "sm120/v12" in out
    assert "planned" in out
    # The answer first: the archs before the stage table, where values came from only on request.
    assert out.index("archs") < out.index("planned") and "TORCH_CUDA_ARCH_LIST=" not in out
    code, out = _dry(sandbox, "--recipe", RECIPE, "--dry-run", "--explain")
    assert code == 0 and "TORCH_CUDA_ARCH_LIST=12.0a" in out and "from  " not in out.split("archs")[0]


def test_jit_prewarm_dry_run_creates_no_environment(sandbox: dict[str, Path]) -> None:
    code, out = _dry(sandbox, "--recipe", RECIPE, "jit-prewarm", "--dry-run")
    assert code == 0, out
    assert "pip" not in out and "installing" not in out
    assert "sglang.jit_kernel.nvfp4" in out and "12.0a" in out
    assert "serve --install" in out  # the builders are named once the serve environment exists


def test_serve_dry_run_creates_no_environment(sandbox: dict[str, Path]) -> None:
    code, out = _dry(sandbox, "--recipe", RECIPE, "serve", "--dry-run")
    assert code == 9, out
    assert "installing" not in out and "build environment" in out and "not made" in out


def test_dry_run_without_a_recipe_is_a_usage_error(sandbox: dict[str, Path]) -> None:
    code, out = _dry(sandbox, "--dry-run")
    assert code == 2, out
    assert "no recipe given" in out and "Commands:" not in out


def _dry_run_commands() -> list[str]:
    """Every command with a --dry-run option ("" is the pipeline), read from the CLI itself."""
    from build_kernel.cli import cli

    return sorted(name for name, command in [("", cli), *cli.commands.items()]
                  if any("--dry-run" in getattr(p, "opts", []) for p in command.params))


def test_the_dry_runs_tested_here_are_all_there_are() -> None:
    # A new --dry-run is run by test_every_dry_run_changes_nothing at once; this names the ones known today.
    assert set(_dry_run_commands()) >= {"", "jit-prewarm", "serve"}


@pytest.mark.parametrize("command", _dry_run_commands())
def test_every_dry_run_changes_nothing(sandbox: dict[str, Path], command: str) -> None:
    # Whatever it answers (a listing, or an error saying what is missing), nothing may be made.
    _, out = _dry(sandbox, *([command] if command else []), "--recipe", RECIPE, "--dry-run")
    assert "Traceback" not in out and "installing torch" not in out, out
