"""Patch health, reported: the table `patch health` prints and the JSON `--write` keeps."""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from build_kernel import atomic
from build_kernel.errors import PatchError
from build_kernel.log import styled
from build_kernel.stages.patch import apply as patches
from build_kernel.stages.patch.healthrows import Health, Row


def as_json(health: Health) -> dict[str, object]:
    """What `--json` prints: every row in full, and each patch of the recipe's series (needed or since when not)."""
    return {"rows": [row.to_dict() for row in health.rows], "patches": [p.to_dict() for p in health.patches]}


def write(health: Health, path: Path) -> None:
    """The rows' records and each patch's need as JSON, replacing `path` only when complete."""
    record = {"rows": [row.record() for row in health.rows], "patches": [p.to_dict() for p in health.patches]}
    text = json.dumps(record, indent=2) + "\n"
    try:
        atomic.write_text(path, text)
    except OSError as exc:
        raise PatchError(f"cannot write {path}: {exc.strerror}", hint="choose a writable path") from None


def labels(names: list[str]) -> list[str]:
    """Column headings: the quilt numbers (`0001`) when they tell the patches apart, else positions."""
    heads = [name.split("-", 1)[0] for name in names]
    if all(h.isdigit() for h in heads) and len(set(heads)) == len(heads):
        return heads
    return [str(i + 1) for i in range(len(names))]


def needs(health: Health) -> list[Text]:
    """One line per patch of the recipe's series, then how many upstream no longer needs."""
    if not health.patches:
        return []
    width = max(len(p.name) for p in health.patches)
    lines = [Text(f"each patch at {health.rows[-1].version} ({health.rows[-1].commit[:9]}):")]
    lines += [Text(f"  {p.name:<{width}}  {p.says()}") for p in health.patches]
    gone = [p.name.split("-", 1)[0] for p in health.patches if p.since]
    lines.append(Text(f"not needed any more: {len(gone)} of {len(health.patches)} patches"
                      + (f" ({', '.join(gone)}: leave out of the series' next version)" if gone else "")))
    return lines


_SHORT = {patches.APPLIES: styled("ok", "green"), patches.OFFSET: styled("offset", "yellow"),
          patches.UPSTREAM: styled("upstream", "red"), patches.CONFLICT: styled("CONFLICT", "red")}
_FIXED = styled("fixed", "cyan")


def render(health: Health, names: list[str]) -> Group:
    """One row per version change, one column per patch, a legend, and the summary line;
    with several series, one column per series instead (`render_compared`)."""
    if health.series:
        return render_compared(health)
    heads = labels(names)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for heading in ("commit", "date", "version", *heads, "whole"):
        table.add_column(heading, no_wrap=True)
    for row in health.rows:
        states = row.states()
        table.add_row(row.commit[:9], row.date, row.version,
                      *(_FIXED if n in row.fixed and states.get(n) != patches.UPSTREAM else _SHORT.get(states.get(n, ""), "-")
                        for n in names),
                      styled("yes", "green") if row.applies else styled("no", "red"))
    legend = [Text(f"{h}  {n}") for h, n in zip(heads, names, strict=True)]
    if any(row.fixed for row in health.rows):
        legend.append(Text("fixed: upstream has the patch's Applied-Upstream commit"))
    summary = f"series applies whole at {health.whole} of {len(health.rows)} commits"
    return Group(table, Text(""), *legend, Text(summary), *needs(health))


def _cell(row: Row, name: str) -> Text:
    at = next(c for c in row.compared if c.name == name)
    if at.applies:
        return styled("offset", "yellow") if any(st.state == patches.OFFSET for st in at.statuses) else styled("ok", "green")
    first = next(st for st in at.statuses if st.state not in (patches.APPLIES, patches.OFFSET))
    return styled(f"{first.name.split('-', 1)[0]} {_WORD.get(first.state, first.state)}", "red")


_WORD = {patches.UPSTREAM: "upstream", patches.CONFLICT: "CONFLICT"}


def render_compared(health: Health) -> Group:
    """One row per version change, one column per series (ok / offset / the first patch that stops it),
    which series cover it; then each series' count and the rows none covers, with why."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for heading in ("commit", "date", "version", *health.series, "covered by"):
        table.add_column(heading, no_wrap=True)
    for row in health.rows:
        table.add_row(row.commit[:9], row.date, row.version, *(_cell(row, n) for n in health.series),
                      ", ".join(row.covered_by) or styled("none", "red"))
    total = len(health.rows)
    lines = [Text(f"{name} applies whole at {sum(name in r.covered_by for r in health.rows)} of {total} commits")
             for name in health.series]
    lines.append(Text(f"covered by one of them: {total - len(health.uncovered)} of {total} commits"))
    for row in health.uncovered:
        why = "; ".join(f"{c.name}: {c.why_not()}" for c in row.compared)
        lines.append(Text(f"not covered: {row.version} {row.commit[:9]} ({why})"))
    return Group(table, Text(""), *lines, *needs(health))
