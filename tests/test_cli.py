"""The command line as README and docs/ document it: shared options before or after the command,
every command's --help, and every command line README.md and docs/*.md show (fast: nothing compiles)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from build_kernel.cli import cli
from tests.conftest import DEMO_COMMIT, REPO_ROOT, run_cli

SHARED = ("--recipe", "--arch", "--jobs", "--cache-dir", "--output-dir", "--json", "--debug")
# README's placeholders, as a user would fill them in here.
FILL = {"R": "demo", "NAME": "demo", "L": "12.0a", "N": "2", "SHA": DEMO_COMMIT,
        "REF": "main", "FILE": "/tmp/bk-readme-health.json", "NAME|URL|DIR": "/tmp/bk-readme-index",
        "NAME|URL|PATH": "/tmp/bk-readme-index", "DIR": "patches/minikernel/v1", "DEST": "/tmp/bk-readme-wt",
        "PATH": sys.executable}


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


def test_shared_options_work_before_and_after_the_command(tmp_path: Path) -> None:
    after = run_cli("plan", "--recipe", "demo", "--json", "--arch", "9.0a,12.0a", "--jobs", "3",
                    "--cache-dir", str(tmp_path / "c"))
    before = run_cli("--json", "--arch", "9.0a,12.0a", "--jobs", "3", "--cache-dir", str(tmp_path / "c"),
                     "plan", "--recipe", "demo")
    assert after.returncode == 0 and before.returncode == 0, after.stderr + before.stderr
    a, b = json.loads(after.stdout), json.loads(before.stdout)
    assert a["archs"]["list"] == b["archs"]["list"] == ["9.0a", "12.0a"]
    assert a["jobs"]["jobs"] == b["jobs"]["jobs"] == 3 and a["cache_dir"] == b["cache_dir"] == str(tmp_path / "c")
    assert a["archs"]["source"] == "command line"


def test_an_option_given_after_the_command_wins() -> None:
    proc = run_cli("--arch", "9.0a", "plan", "--json", "--recipe", "demo", "--arch", "12.0a")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["archs"]["list"] == ["12.0a"]


@pytest.mark.parametrize("path", [p for p, _ in _commands(cli)], ids=" ".join)
def test_every_command_help_lists_the_shared_options(path: tuple[str, ...]) -> None:
    command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]  # type: ignore[assignment]
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    missing = [o for o in SHARED if o not in result.output]
    assert not missing, f"{' '.join(path)} --help lacks {missing}"


DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def readme_command_lines() -> list[str]:
    """Every `build-kernel …` line in the code blocks and command tables of README.md and docs/*.md
    (a table whose first column is headed `command`), placeholders filled."""
    lines: list[str] = []
    for document in DOCUMENTS:
        text = document.read_text()
        for block in re.findall(r"```sh\n(.*?)```", text, re.S):
            block = block.replace("\\\n", " ")  # a line continued with a backslash is one command
            lines += [l.split("#")[0].strip() for l in block.splitlines() if l.strip().startswith("build-kernel")]
        for table in re.findall(r"^\| command \|.*\n\|[- |]+\n((?:\|.*\n?)+)", text, re.M):
            for row in re.findall(r"^\| (.+?) \| [^|`]", table, re.M):
                for cell in re.findall(r"`([^`]+)`", row):
                    lines.append(cell if cell.startswith("build-kernel") else f"build-kernel {cell}")
    return list(dict.fromkeys(_fill(line) for line in lines))  # a line shown twice is run once


def test_command_lines_come_from_readme_and_docs() -> None:
    """README keeps one line per command; docs/commands.md every option: both are read, so no line moved
    out of README goes untested."""
    lines = readme_command_lines()
    for needle in ("build-kernel plan --recipe demo", "build-kernel doctor --installed --python",
                   "build-kernel prune-proof PRUNED.whl --against UNPRUNED.whl --recipe demo --across-tus",
                   "build-kernel --recipe flash-attn-2.8.3 --arch 9.0", "build-kernel cache dist-config --scheduler"):
        assert any(l.startswith(needle) for l in lines), needle


def _fill(line: str) -> str:
    line = re.sub(r"\[(-[^\]]+)\]", r"\1", line)          # an optional flag: give it
    line = re.sub(r"\s*\[[A-Z][A-Z.…]*\]", "", line)       # an optional positional: leave it out
    line = re.sub(r"\s[A-Z][A-Z…]*…", "", line)           # WHEEL…: none
    words = [FILL.get(w, w) for w in shlex.split(line.replace("|", "\\|").replace("NAME\\|URL\\|", "NAME|URL|"))]
    words = [FILL.get(w.replace("\\", ""), w.replace("\\", "")) for w in words]
    return shlex.join(words)


def test_readme_shows_commands_and_each_parses() -> None:
    lines = readme_command_lines()
    assert len(lines) >= 15 and any(" plan " in f" {l} " for l in lines)
    for line in lines:
        # Click parses every token (an unknown option is an error) before the eager --help answers.
        result = CliRunner().invoke(cli, [*shlex.split(line)[1:], "--help"])
        assert result.exit_code == 0, f"README line does not parse: {line}: {result.output}"


@pytest.mark.parametrize("line", [l for l in readme_command_lines()
                                  if re.match(r"build-kernel (recipes|plan|doctor)\b", l)])
def test_readme_read_only_commands_run(line: str, request: pytest.FixtureRequest) -> None:
    """The commands that only read run for real, on the demo recipe where README names one."""
    argv = shlex.split(line)[1:]
    # `--arch native` plans for "the GPUs of this host": no GPU can run here, so the host's driver is the double
    # of tests/conftest.py (a real libcuda.so.1 reporting an RTX 5090 and an RTX 3090), which the CLI loads and
    # asks as it would the real one (tests/test_targets.py: the same without a driver, and with no GPU).
    native = "native" in argv
    env = {**request.getfixturevalue("driver_double"), "BK_TEST_GPUS": "12.0 8.6"} if native else None
    proc = run_cli(*[("demo" if a == "nightly-cu130" and "--json" not in argv else a) for a in argv], env=env)
    # doctor exits 3 when this machine lacks something the recipe needs, doctor --installed 7 when
    # the interpreter's sgl_kernel is unhealthy or absent (this one has none): that is their answer.
    allowed = (0, 7) if "--installed" in argv else (0, 3) if "doctor" in argv else (0,)
    assert proc.returncode in allowed, proc.stderr
    if native:
        assert ("archs          12.0a;8.6 (from command line: native = 12.0a;8.6, the GPUs the driver reports;"
                in proc.stdout), proc.stdout
    assert "Traceback" not in proc.stderr and "No such option" not in proc.stderr
