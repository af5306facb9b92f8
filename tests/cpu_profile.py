"""The suite's CPU time per test (docs/tests.md): `pytest -p tests.cpu_profile --cpu-profile FILE`.

Each phase of each test (setup, call, teardown) is counted as the user + system CPU seconds of the process that
runs it and of every child it waited for (the CLI, compilers, pip, sglang's parser): getrusage SELF + CHILDREN,
read before and after. A fixture wider than a test is counted in the setup of the first test that asks for it.
Not counted: collection, and children a test leaves running (a server it kills without waiting).
Works with and without pytest-xdist: the workers attach their numbers to the test reports, the controller (or the
only process) writes FILE ({node id: {phase: CPU s, phase_wall: s}}) and prints the 15 dearest tests and files.
Not loaded unless asked for (`-p`).
"""

from __future__ import annotations

import json
import resource
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_PHASES = ("setup", "call", "teardown")
_STARTED = pytest.StashKey[tuple[float, float]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-profile", metavar="FILE", default=None,
                     help="write each test's CPU seconds per phase (itself and its waited-for children) to FILE")


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _start(item: pytest.Item) -> None:
    if item.config.getoption("cpu_profile"):
        item.stash[_STARTED] = (_cpu(), time.monotonic())


pytest_runtest_setup = pytest.hookimpl(tryfirst=True)(_start)
pytest_runtest_call = pytest.hookimpl(tryfirst=True)(_start)
pytest_runtest_teardown = pytest.hookimpl(tryfirst=True)(_start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    started = item.stash.get(_STARTED, None)
    if started is not None and call.when in _PHASES:
        cpu, wall = _cpu() - started[0], time.monotonic() - started[1]
        outcome.get_result().user_properties.append(("cpu_profile", (call.when, round(cpu, 3), round(wall, 3))))


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("cpu_profile")
    if target and not hasattr(config, "workerinput"):  # the controller, or the only process with -n 0
        config.pluginmanager.register(_Collector(Path(target)), "cpu_profile_collector")


def _total(row: dict[str, float]) -> float:
    return sum(row.get(phase, 0.0) for phase in _PHASES)


class _Collector:
    """Gathers the numbers the test reports carry; writes and prints them at the end."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.rows: dict[str, dict[str, float]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == "cpu_profile":
                when, cpu, wall = value
                row = self.rows.setdefault(report.nodeid, {})
                row[when], row[f"{when}_wall"] = cpu, wall

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.target.write_text(json.dumps(self.rows, indent=1, sort_keys=True) + "\n")
        files: Counter[str] = Counter()
        for nodeid, row in self.rows.items():
            files[nodeid.split("::")[0]] += _total(row)
        write = terminalreporter.write_line
        terminalreporter.section(f"CPU seconds per test (itself + waited-for children): {sum(files.values()):.0f} in all")
        for nodeid, row in sorted(self.rows.items(), key=lambda kv: -_total(kv[1]))[:15]:
            write(f"{_total(row):8.1f}  (setup {row.get('setup', 0.0):.1f})  {nodeid}")
        write("per file:")
        for name, seconds in files.most_common(15):
            write(f"{seconds:8.1f}  {name}")
        write(f"written to {self.target}")
