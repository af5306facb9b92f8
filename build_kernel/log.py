"""A step-aware logger: each stage opens and closes with its duration and a mark.

Messages go to stderr so `--json` output on stdout stays clean for scripts. rich
handles colour (only on a TTY) and honours NO_COLOR.

Markup is off on every console: user-facing strings quote recipe tables (`[patches]`,
`[serve] sglang`) that rich would read as style tags and drop, so the text would say less
than `--json`. Colour is given as `Text` styles (`styled`), never as markup in a string.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from rich.console import Console, ConsoleDimensions
from rich.text import Text

from build_kernel.errors import Interrupted

# The width of a console whose stream is a pipe or a file: wide enough that no line of ours is ever wrapped.
# rich would otherwise take 80 columns (or COLUMNS, or the size of whichever standard stream is a terminal) and
# break a verdict mid-sentence (`conflicts at 0.4.3 (refresh\nit, ...`), so `grep` found half of it.
UNWRAPPED = 1_000_000


class _Console(Console):
    """rich's Console, except that output to a pipe or a file is never wrapped: a table takes its natural
    width, a message stays one line. On a terminal, the terminal's width, as rich finds it."""

    @property
    def size(self) -> ConsoleDimensions:
        found = super().size
        return found if self.is_terminal else ConsoleDimensions(UNWRAPPED, found.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


def plain_console(file: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """A console that prints strings as they are: no markup, no :emoji: codes, no highlighting, no wrapping
    where the reader is a program (a pipe, a file)."""
    return _Console(file=file, stderr=stderr, markup=False, emoji=False, highlight=False)


console = plain_console(stderr=True)


def styled(text: str, style: str) -> Text:
    """`text` in colour where colour is shown; its words never read as markup."""
    return Text(text, style=style)


def out(renderable: object) -> None:
    """A table or other rendering on stdout, through a console of its own: the stderr console's
    stream is left alone (a test runner swaps sys.stdout and sys.stderr under it)."""
    plain_console(sys.stdout).print(renderable)


def info(message: str) -> None:
    console.print(message, soft_wrap=True)


def warn(message: str) -> None:
    console.print(Text.assemble(styled("warning:", "yellow"), " ", message), soft_wrap=True)


class Step:
    """An open step; `fail()` closes it with ✕ although nothing was raised (a verdict that failed)."""

    def __init__(self) -> None:
        self.failed = False

    def fail(self) -> None:
        self.failed = True


# The innermost step a Ctrl-C interrupted (cli/output.py names it in the message).
interrupted_step: list[str] = []


@contextmanager
def step(name: str) -> Iterator[Step]:
    start = time.monotonic()
    console.print(styled(f"▶ {name}", "bold"), soft_wrap=True)
    handle = Step()
    try:
        yield handle
    except BaseException as exc:
        console.print(Text.assemble(styled(f"✕ {name}", "red"), f" ({time.monotonic() - start:.1f} s)"),
                      soft_wrap=True)
        if isinstance(exc, (KeyboardInterrupt, Interrupted)) and not interrupted_step:
            interrupted_step.append(name)  # the innermost: it unwinds first
        raise
    if handle.failed:
        console.print(Text.assemble(styled(f"✕ {name}", "red"), f" ({time.monotonic() - start:.1f} s)"),
                      soft_wrap=True)
        return
    console.print(Text.assemble(styled(f"✓ {name}", "green"), f" ({time.monotonic() - start:.1f} s)"),
                  soft_wrap=True)
