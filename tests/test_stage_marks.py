"""A stage's closing mark tells its verdict: a verify that failed (a report, no exception: the CLI shows the
table first, then exits 7) closes with ✕, never ✓ (seen on the H200 and on the miniature with
`verify --arch 10.0a --recheck`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from build_kernel import recipe, stages
from build_kernel.plan import resolve
from build_kernel.stages import Context, Done
from tests.conftest import write_recipe, write_series
from tests.test_fetch_patch import RES


class _Verdict:
    """A stage whose run ends in a verdict, as VerifyStage(raise_on_failure=False) does."""

    name = "verify"

    def __init__(self, status: str) -> None:
        self.status = status

    def skip(self, ctx: Context) -> str | None:
        return None

    def title(self, ctx: Context) -> str:
        return "verify x.whl"

    def run(self, ctx: Context) -> Done:
        return Done(self.status)


@pytest.mark.parametrize(("status", "mark"), [("failed", "✕ verify x.whl"), ("passed", "✓ verify x.whl")])
def test_a_failed_verdict_closes_with_a_cross(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              status: str, mark: str) -> None:
    write_series(project, "s", "v1", {})
    write_recipe(project, "r", """
        [source]
        repo = "x"
        commit = "0000000000000000000000000000000000000000"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
    """)
    plan = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=tmp_path / "cache")
    ctx = stages.run(Context(plan), [_Verdict(status)])
    err = capsys.readouterr().err
    assert mark in err and ("✓" in err) == (status == "passed"), err
    assert ctx.outcomes["verify"]["status"] == status
