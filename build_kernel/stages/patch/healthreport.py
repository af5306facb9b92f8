"""Patch health, reported: the table `patch health` prints and the JSON `--write` keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from build_kernel import atomic
from build_kernel.errors import PatchError
from build_kernel.stages.patch import apply as patches

if TYPE_CHECKING:  # a type only: health imports this module
    from build_kernel.stages.patch.health import Health


def write(health: Health, path: Path) -> None:
    """The rows' records as JSON, replacing `path` only when complete."""
    text = json.dumps([row.record() for row in health.rows], indent=2) + "\n"
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


_SHORT = {patches.APPLIES: "[green]ok[/]", patches.OFFSET: "[yellow]offset[/]",
          patches.UPSTREAM: "[red]upstream[/]", patches.CONFLICT: "[red]CONFLICT[/]"}


def render(health: Health, names: list[str]) -> Group:
    """One row per version change, one column per patch, a legend, and the summary line."""
    heads = labels(names)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for heading in ("commit", "date", "version", *heads, "whole"):
        table.add_column(heading, no_wrap=True)
    for row in health.rows:
        states = row.states()
        table.add_row(row.commit[:9], row.date, row.version, *(_SHORT.get(states.get(n, ""), "-") for n in names),
                      "[green]yes[/]" if row.applies else "[red]no[/]")
    legend = [Text(f"{h}  {n}") for h, n in zip(heads, names, strict=True)]
    summary = f"series applies whole at {health.whole} of {len(health.rows)} commits"
    return Group(table, Text(""), *legend, Text(summary))
