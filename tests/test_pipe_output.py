"""Output that pipes (issue 66 item 10): text going to a pipe or a file is never wrapped, one verdict one line.

Seen: `build-kernel patch health | grep ...` found half a verdict, rich having wrapped it at 80 columns
(`unknown: conflicts at 0.4.3 (refresh\\nit, or name ...`). The fix is in the one output layer (log.py's console),
so every command is covered; these run the real CLI with its stdout a real pipe and no COLUMNS, as a shell
pipeline has it.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.table import Table
from rich.text import Text

from build_kernel import log
from tests.conftest import REPO_ROOT
from tests.test_patch_health import Upstream, recipe, upstream  # noqa: F401  (the miniature upstream history)


def piped(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with stdout and stderr real pipes; COLUMNS as a pipeline has it (unset), or as given."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "build_kernel", *args], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, check=False)


def test_patch_health_through_a_pipe_keeps_each_verdict_on_one_line(tmp_path: Path, recipe: Path) -> None:  # noqa: F811
    cache = tmp_path / "cache"
    for columns in (None, "40"):  # a pipe, also where the shell exported a narrow COLUMNS
        proc = piped("--cache-dir", str(cache), "patch", "health", "--recipe", str(recipe), columns=columns)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        # The table's row for the conflicting release, whole: commit, date, version, a state per patch, "whole".
        [conflict] = [line for line in lines if " 0.2.0 " in line and "CONFLICT" in line]
        assert conflict.split()[-1] == "no" and len(conflict.split()) == 3 + 6 + 1
        # Each patch's verdict at the newest release: one line each, the name and what it says together.
        verdicts = [line for line in lines if line.startswith("  000")]
        assert len(verdicts) == 6 and all(len(v.split(None, 1)) == 2 for v in verdicts)
        first = verdicts[0].split()
        assert first[:3] == ["0001-cmake-guard-policies.patch", "unknown:", "conflicts"]  # grep finds it whole
        assert verdicts[0].endswith("(refresh it, or name upstream's equivalent fix in Applied-Upstream)")
        assert lines[-1] == "not needed any more: 0 of 6 patches"


def test_a_table_wider_than_80_columns_is_whole_in_a_pipe() -> None:
    # `recipes list`: the descriptions run past 80 columns; through a pipe each recipe is one row.
    proc = piped("recipes", "list")
    assert proc.returncode == 0, proc.stderr
    [demo] = [line for line in proc.stdout.splitlines() if "│ demo " in line]
    assert "miniature sgl-kernel (examples/minikernel) for sm_120a, offline" in demo and len(demo) > 80


def test_the_console_wraps_only_on_a_terminal() -> None:
    long = " ".join(["unknown: conflicts at 0.4.3 (refresh it, or name upstream's fix in Applied-Upstream)"] * 3)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    to_file, to_tty = io.StringIO(), Tty()
    for stream in (to_file, to_tty):
        table = Table("patch", "verdict")
        table.add_row("0001-cmake-guard-policies", long)
        console = log.plain_console(stream)
        console.print(Text(long))
        console.print(table)
    assert to_file.getvalue().splitlines()[0] == long  # a file: whole
    assert long in to_file.getvalue()  # the table's cell too
    assert len(to_tty.getvalue().splitlines()[0]) <= 200  # a terminal: its width (COLUMNS or 80)
