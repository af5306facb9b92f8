"""Each file's outcome against the recipe's expectations (`[test.expect."GLOB"]`): red means new.

An expectation names files or node ids by glob, an outcome (`skip`, `fail`, `uncollectable`),
the reason and the evidence. A failure or an uncollectable file no expectation explains is red;
so is every crash and timeout. A skip is never red, but one no expectation explains is listed as
unexplained. A skip is explained only by its reason (issue 70: a file pattern alone explained every
bare `Skipped`): the expectation's `message` must be in the skip's reason text, or, written
`re:PATTERN`, match it (re.search); a skip expectation without a message explains no skip.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from build_kernel.recipe.model import Expectation
from build_kernel.stages.upstream_tests.runner import FileResult

OUTCOMES = ("skip", "fail", "uncollectable")
RED = ("failed", "crashed", "timeout", "uncollectable")


def _matches(exp: Expectation, file: str, node: str | None = None) -> bool:
    names = [file, file.rsplit("/", 1)[-1]]
    if node is not None:
        short = node.split("::", 1)[1] if "::" in node else node
        names += [node, f"{file}::{short}", f"{names[1]}::{short}"]
    return any(fnmatchcase(name, exp.pattern) for name in names)


def applicable(expect: Sequence[Expectation], asked: Sequence[str]) -> list[Expectation]:
    """The expectations for this build's archs (`when_asked`: only when one of them is asked)."""
    return [e for e in expect if not e.when_asked or set(e.when_asked) & set(asked)]


@dataclass
class Verdict:
    file: str
    status: str  # the file's own status
    red: bool
    line: str  # what the table shows
    expected: list[dict[str, str]] = field(default_factory=list)  # {node, outcome, reason}
    unexplained_skips: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "status": self.status, "red": self.red, "line": self.line,
                "expected": self.expected, "unexplained_skips": self.unexplained_skips}


PATTERN_PREFIX = "re:"


def holds(expected: str, text: str) -> bool:
    """Does `text` (a failure's message, a skip's reason) hold the expectation's `message`?"""
    if expected.startswith(PATTERN_PREFIX):
        try:
            return re.search(expected[len(PATTERN_PREFIX):], text) is not None
        except re.error:
            return False  # rules.py reports the broken pattern at load time
    return expected in text


def _why(exps: Sequence[Expectation], outcome: str, file: str, node: str | None,
         message: str = "") -> Expectation | None:
    def says(e: Expectation) -> bool:
        if outcome == "skip":  # only a named reason explains a skip
            return bool(e.message) and holds(e.message, message)
        return not e.message or holds(e.message, message)

    return next((e for e in exps if e.outcome == outcome and _matches(e, file, node) and says(e)), None)


def judge(result: FileResult, exps: Sequence[Expectation]) -> Verdict:
    file = result.file
    verdict = Verdict(file, result.status, False, "")
    if result.status in ("crashed", "timeout"):
        where = f" in {result.last_test}" if result.last_test else ""
        what = f"signal {result.signal}" if result.status == "crashed" else "stopped at the time limit"
        verdict.red, verdict.line = True, f"{result.status.upper()} ({what}{where})"
        return verdict
    if result.status == "uncollectable":
        why = f"no module {result.missing_module}" if result.missing_module else (result.error or "collection error")
        if exp := _why(exps, "uncollectable", file, None):
            verdict.expected.append({"node": file, "outcome": "uncollectable", "reason": exp.reason})
            verdict.line = f"expected: not collectable ({why}): {exp.reason}"
        else:
            verdict.red, verdict.line = True, f"UNCOLLECTABLE ({why})"
        return verdict
    new: list[str] = []
    for node in result.failed:
        if exp := _why(exps, "fail", file, node, result.failures.get(node, "")):
            verdict.expected.append({"node": node, "outcome": "fail", "reason": exp.reason})
        else:
            new.append(node)
    for node, reason in result.skipped.items():
        if exp := _why(exps, "skip", file, node, reason):
            verdict.expected.append({"node": node, "outcome": "skip", "reason": exp.reason})
        else:
            verdict.unexplained_skips.append(f"{node}: {reason}" if reason else node)
    if new or (result.status == "failed" and not result.failed):
        shown = ", ".join(n.split("::", 1)[-1] for n in new[:3]) + (f" and {len(new) - 3} more" if len(new) > 3 else "")
        verdict.red = True
        verdict.line = f"FAILED: {len(new)} new ({shown})" if new else f"FAILED (pytest exited {result.exit_code})"
        return verdict
    counts = [f"{result.passed} passed"]
    if fails := sum(1 for e in verdict.expected if e["outcome"] == "fail"):
        counts.append(f"{fails} expected failures")
    if result.skipped:
        explained = len(result.skipped) - len(verdict.unexplained_skips)
        counts.append(f"{len(result.skipped)} skipped ({explained} explained)")
    if result.status == "empty":  # a module that skipped itself says why where an expectation explains it
        why = next((e["reason"] for e in verdict.expected if e["outcome"] == "skip"), "")
        counts = [f"no tests collected ({why})" if why else "no tests collected"]
    verdict.line = ", ".join(counts)
    return verdict
