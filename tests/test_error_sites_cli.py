"""Usage errors of the CLI no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

Options that only make sense together, two recipes, --offline where the command must ask the network:
each is one line `error: ...` naming the problem and the fix, exit 2, before any work. Through the real
CLI in this process (click's CliRunner drives the root group's own `main`, the one exit of the tool).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from build_kernel.cli import cli


def refused(*args: str, tmp_path: Path) -> str:
    cache = tmp_path / "cache"
    runner = CliRunner(env={"NO_COLOR": "1", "COLUMNS": "1000", "BUILD_KERNEL_CACHE_DIR": str(cache),
                            "BUILD_KERNEL_CONFIG": str(tmp_path / "none.toml")})
    result = runner.invoke(cli, list(args), prog_name="build-kernel", catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not cache.exists()
    [line] = result.output.strip().splitlines()
    return line


USAGE = [
    (["recipes", "show", "demo", "--recipe", "nightly-cu130"],
     "two recipes given: demo and --recipe nightly-cu130; give one"),
    (["recipes", "show"], "no recipe given: pass NAME or --recipe NAME (see `build-kernel recipes list`)"),
    (["doctor", "--python", "/usr/bin/python3"], "--python goes with --installed"),
    (["--offline", "lock", "--recipe", "demo"], "lock asks the indexes and servers what the pins name: drop --offline"),
    (["serve", "--recipe", "demo", "--flags-only"], "--flags-only goes with --install"),
    (["serve", "--recipe", "demo", "--wheelhouse", "."], "--wheelhouse goes with --install"),
    (["serve", "--recipe", "demo", "--check", "curl localhost"],
     "--check goes with --launch or --bench (it needs a live server)"),
    (["nightly", "--recipe", "demo", "--night", "2026/12/07"],
     "--night '2026/12/07' is not a date: write YYYY-MM-DD, e.g. --night 2026-12-07"),
    (["nightly", "--cron"], "no recipe given: pass --recipe NAME (see `build-kernel recipes list`)"),
    (["--dry-run"], "no recipe given: pass --recipe NAME (see `build-kernel recipes list`)"),
    (["nightly", "--recipe", "demo", "--built", "."], "--built goes with --replay A..B (the nights it merges are the "
                                                       "replay's)"),
    (["verify", "--rebuild", "--recipe", "demo"],
     "verify --rebuild needs the WHEEL to rebuild: build-kernel verify --rebuild PATH.whl"),
    (["jit-prewarm", "--recipe", "demo"],
     'the recipe demo has no [serve] jit_prewarm (e.g. jit_prewarm = ["sglang.jit_kernel.nvfp4"])'),
]


@pytest.mark.parametrize("args,message", USAGE, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(USAGE)])
def test_usage_error_is_one_line_with_its_fix(args: list[str], message: str, tmp_path: Path) -> None:
    assert refused(*args, tmp_path=tmp_path) == f"error: {message}"
