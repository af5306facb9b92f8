"""Generated bad input (issue 68 item 5): recipes and command lines made by Hypothesis, run through the real CLI
(click's CliRunner, so through its one exit, cli/output.py), a few hundred with a fixed seed.

Every case is accepted (exit 0) or rejected with lines `error: ...`, each naming the key or option and a fix, with
an exit code of errors.py's kinds; never a traceback, never "unexpected error" (exit 1). The generators, the scratch
project and the judging are the study's (bench/faults/bad_input.py, which runs ten thousand).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import load_bench_script

study = load_bench_script("bench/faults/bad_input.py", "bad_input")
SETTINGS = settings(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    with study.scratch() as made:
        yield made


def _judged(case: Any, root: Path) -> None:
    out = study.run_case(case, root)
    shown = f"argv {out.argv}, files {case.files}, env {case.env}: exit {out.exit_code}, {out.lines}"
    assert out.verdict != "traceback", shown
    if out.verdict == "rejected":
        assert out.exit_code in study.EXIT_CODES - {0}, shown
        assert out.lines and not out.unnamed, shown  # each line names the key or option, and a fix


@settings(SETTINGS, max_examples=220)
@given(case=study.recipe_case())
def test_generated_recipes_are_accepted_or_one_line_per_problem(case: Any, root: Path) -> None:
    _judged(case, root)


@settings(SETTINGS, max_examples=150)
@given(case=study.argv_case())
def test_generated_command_lines_are_accepted_or_one_line(case: Any, root: Path) -> None:
    _judged(case, root)
