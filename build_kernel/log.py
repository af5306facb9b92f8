"""A step-aware logger: each stage opens and closes with its duration and a mark.

Messages go to stderr so `--json` output on stdout stays clean for scripts. rich
handles colour (only on a TTY) and honours NO_COLOR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

console = Console(stderr=True, highlight=False)


def info(message: str) -> None:
    console.print(message, markup=False, soft_wrap=True)


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/] {message}", markup=True, soft_wrap=True)


class Step:
    """An open step; `fail()` closes it with ✕ although nothing was raised (a verdict that failed)."""

    def __init__(self) -> None:
        self.failed = False

    def fail(self) -> None:
        self.failed = True


@contextmanager
def step(name: str) -> Iterator[Step]:
    start = time.monotonic()
    console.print(f"[bold]▶ {name}[/]", soft_wrap=True)
    handle = Step()
    try:
        yield handle
    except BaseException:
        console.print(f"[red]✕ {name}[/] ({time.monotonic() - start:.1f} s)", soft_wrap=True)
        raise
    if handle.failed:
        console.print(f"[red]✕ {name}[/] ({time.monotonic() - start:.1f} s)", soft_wrap=True)
        return
    console.print(f"[green]✓ {name}[/] ({time.monotonic() - start:.1f} s)", soft_wrap=True)
