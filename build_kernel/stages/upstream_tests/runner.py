"""One pytest process per test file, several at once, each with a time limit; what each one did.

A file is its own process so that a crash (a kernel's SIGSEGV) or a hang loses that file only,
and says which: the exit signal, and the test pytest's `-v` line had started but not finished.
Counts come from pytest's JUnit XML; a file that died before writing it is read from its log.
"""

from __future__ import annotations

import ast
import re
import signal
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import process
from build_kernel.errors import TestError

# pytest's exit codes (pytest.ExitCode): 2 interrupted (collection errors), 5 no tests collected.
_COLLECTION, _NO_TESTS = 2, 5
# pytest exits 4 (a usage error) when a conftest.py cannot be imported: no file under it is collected either
# (H100, 2026-12-06: sglang's import in upstream's conftest.py, a dependency missing from the test environment).
_USAGE = 4
_CONFTEST = re.compile(r"^ImportError while loading conftest", re.M)
_MISSING = re.compile(r"No module named '([^']+)'")
_VERBOSE = re.compile(r"^(\S+::\S+)(?: (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b)?")


@dataclass
class FileResult:
    """What one test file did: counts, the node ids of failures and skips, and how the process ended."""

    file: str
    status: str = "passed"  # passed | failed | crashed | timeout | uncollectable | empty
    passed: int = 0
    failed: list[str] = field(default_factory=list)  # node ids (failures and errors)
    # node id -> the first line of its failure (JUnit's message), for expectations that name the message
    failures: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # node id (the file, for a module's) -> pytest's reason
    seconds: float = 0.0
    exit_code: int | None = None
    signal: str | None = None
    last_test: str | None = None  # the test running when the process died or was stopped
    missing_module: str | None = None
    error: str | None = None  # the first line that says why a file could not run
    log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _node_id(case: ET.Element) -> str:
    """pytest's node id of a JUnit test case (xunit1 keeps the file; the classname past the module is the class)."""
    file, classname, name = case.get("file") or "", case.get("classname") or "", case.get("name") or ""
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file
    cls = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    return "::".join(p for p in (file, cls, name) if p)


# JUnit's `message` of a module that skipped itself at import (pytest.skip(allow_module_level=True), importorskip);
# pytest writes the reason into the element's text instead, as str() of (path, line, "Skipped: REASON").
COLLECTION_SKIPPED = "collection skipped"


def _collection_skip_reason(text: str) -> str:
    """The reason of a module-level skip from its JUnit text (`('/x/test_a.py', 3, 'Skipped: needs a GPU')`):
    'needs a GPU'; a bare pytest.skip() is 'Skipped', as for a test; text of another form is kept whole."""
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        parsed = None
    said = parsed[-1] if isinstance(parsed, tuple) and parsed and isinstance(parsed[-1], str) else text
    return said.removeprefix("Skipped: ").strip() or "Skipped"


def _junit(path: Path, result: FileResult) -> bool:
    """Counts from pytest's JUnit XML; False when there is none to read."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return False
    for case in root.iter("testcase"):
        node = _node_id(case)
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            result.passed += 1
        elif outcome.tag == "skipped" and outcome.get("message") == COLLECTION_SKIPPED and not case.get("classname"):
            # the whole module skipped: its node is the file, its reason the element's text (issue 70)
            result.skipped[case.get("file") or node] = _collection_skip_reason(outcome.text or "")
        elif outcome.tag == "skipped":
            result.skipped[node] = (outcome.get("message") or "").strip()
        else:
            result.failed.append(node)
            result.failures[node] = ((outcome.get("message") or "").strip().splitlines() or [""])[0]
    return True


def _from_log(text: str, result: FileResult) -> None:
    """What a file whose process died did before (pytest -v: `node PASSED` when a test ends)."""
    for line in text.splitlines():
        m = _VERBOSE.match(line.strip())
        if not m:
            continue
        node, word = m.groups()
        if word is None:
            result.last_test = node
        elif word == "PASSED":
            result.passed += 1
        elif word in ("FAILED", "ERROR"):
            result.failed.append(node)
        elif word == "SKIPPED":
            result.skipped[node] = ""
        result.last_test = node if word is None else None


def _why(text: str) -> tuple[str | None, str | None]:
    """The missing module of a collection error, and the last error line pytest printed (the cause is
    printed last: `The above exception was the direct cause of the following exception`)."""
    missing = _MISSING.search(text)
    errors = [ln.strip()[1:].strip() for ln in text.splitlines()
              if re.match(r"^E\s+[\w.]+(Error|Exception)\b", ln.strip())]
    return (missing.group(1) if missing else None), (errors[-1] if errors else None)


def run_file(python: str, file: str, cwd: Path, out: Path, env: Mapping[str, str], timeout_s: float,
             args: Sequence[str] = ()) -> FileResult:
    """pytest on one file (with the recipe's `args`), stopped (its whole process group) after `timeout_s`."""
    stem = file.replace("/", "__")
    xml, log = out / f"{stem}.xml", out / f"{stem}.log"
    xml.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", file, "-v", "-p", "no:cacheprovider", f"--junitxml={xml}",
           "-o", "junit_family=xunit1", "--rootdir", str(cwd), *args]
    result = FileResult(file, log=str(log))
    start = time.monotonic()
    with process.spawn(cmd, error=TestError, what=f"running {file}", cwd=cwd, env=env, log=log) as child:
        code = child.wait(timeout=timeout_s)
        if code is None:
            result.status = "timeout"
            code = child.stop(grace=5.0)
    result.seconds = round(time.monotonic() - start, 1)
    result.exit_code = code
    text = log.read_text(errors="replace")
    if result.status != "timeout" and code < 0:
        result.status, result.signal = "crashed", signal.Signals(-code).name
    result.missing_module, result.error = _why(text)
    if result.status in ("timeout", "crashed") or not _junit(xml, result):
        _from_log(text, result)
    if result.status not in ("timeout", "crashed"):
        result.last_test = None
        conftest = code == _USAGE and _CONFTEST.search(text) is not None
        if (code == _COLLECTION or conftest) and not result.passed:  # pytest stops before running anything
            result.status = "uncollectable"
        elif code == _NO_TESTS:
            result.status = "empty"
        elif result.failed or code != 0:
            result.status = "failed"
    return result


def run_all(python: str, files: Sequence[str], cwd: Path, out: Path, env: Mapping[str, str], *, timeout_s: float,
            parallel: int, on_done: Callable[[FileResult], None] | None = None,
            args: Sequence[str] = ()) -> list[FileResult]:
    """Every file, `parallel` at once, in the order given (longest known first is the caller's choice)."""
    out.mkdir(parents=True, exist_ok=True)

    def one(file: str) -> FileResult:
        result = run_file(python, file, cwd, out, env, timeout_s, args)
        if on_done is not None:
            on_done(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(one, files))
