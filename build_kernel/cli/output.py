"""How a failure reaches the user: one message object, rendered as text on stderr and, with `--json`,
as one JSON object on stdout, with the exit code of its kind; a traceback only with `--debug`.

Every exception ends here, not only `BuildKernelError`: a bug or a file the code did not expect
is still one line (naming the exception, and `--debug` for the rest), never a traceback the user
has to read (cibuildwheel's `main()` does the same with its root error).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from build_kernel import log
from build_kernel.errors import BuildKernelError, Interrupted, VerifyError

INTERNAL_EXIT = 1  # the root error's code: not one of the documented kinds
ABORTED_EXIT = Interrupted.exit_code  # Ctrl-C, as a shell reports SIGINT
WHEELS_META = "build_kernel.wheels"  # click's ctx.meta (one dict for the whole command line): wheels given
# What reading a damaged member of a zip raises (a bad CRC, a corrupt deflate stream, a cut-off member).
DAMAGED_ZIP = (zipfile.BadZipFile, zlib.error, EOFError)


@dataclass(frozen=True)
class ErrorMessage:
    """What failed, as both renderers see it: the same lines in the text and in the JSON."""

    kind: str
    exit_code: int
    lines: tuple[str, ...]
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"kind": self.kind, "exit_code": self.exit_code, "message": "\n".join(self.lines),
                          "hint": self.hint, "lines": list(self.lines)}}

    def text(self) -> str:
        return "\n".join(f"error: {line}" for line in self.lines)


def _interrupted(exc: BaseException) -> Interrupted | None:
    """Ctrl-C, however it arrived: in this process (click turns KeyboardInterrupt into Abort), or in a
    program it ran (Interrupted); named by the step it stopped (log.step records the innermost)."""
    if isinstance(exc, click.exceptions.Abort):
        exc = exc.__cause__ or exc.__context__ or exc
    if not isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return None
    during = exc.during if isinstance(exc, Interrupted) else None
    return Interrupted(during or (log.interrupted_step[0] if log.interrupted_step else None))


def printable_lines(text: str) -> tuple[str, ...]:
    """The message's lines, a character a terminal would act on (a control character, a line or paragraph
    separator, from a recipe key or a word of the command line) written as its escape: a problem stays one
    line, and a key cannot move the cursor."""
    return tuple("".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in line)
                 for line in text.split("\n"))


def message_for(exc: BaseException) -> ErrorMessage:
    """The message of any exception the CLI can end in."""
    if (interrupted := _interrupted(exc)) is not None:
        return ErrorMessage("Interrupted", interrupted.exit_code, (interrupted.render(),))
    if isinstance(exc, BuildKernelError):
        return ErrorMessage(type(exc).__name__, exc.exit_code, printable_lines(exc.render()), exc.hint)
    if isinstance(exc, click.exceptions.Abort):
        return ErrorMessage("Aborted", ABORTED_EXIT, ("aborted",))
    if isinstance(exc, click.ClickException):
        ctx = getattr(exc, "ctx", None)
        # click's own rendering is a usage block and a blank line: one line instead. Ours (a plain UsageError)
        # say their fix; the parser's (no such option, a bad or missing value) get the way to the command's help.
        first, *rest = printable_lines(exc.format_message()) or [""]
        line = " ".join([first.rstrip("."), *(r.strip() for r in rest if r.strip())])
        if isinstance(exc, click.exceptions.NoArgsIsHelpError) and isinstance(ctx, click.Context):
            # A group given no command: its message is the whole help; the commands it has, on one line.
            commands = ctx.command.list_commands(ctx) if isinstance(ctx.command, click.Group) else []
            line = f"{ctx.command_path}: no command given (one of: {', '.join(commands)})"
        parser = type(exc) is not click.UsageError or line.startswith("Got unexpected extra argument")
        # click's parser raises some without a context ("requires an argument"): still a way to the help.
        where = (f"see '{ctx.command_path} --help'" if isinstance(ctx, click.Context) else "see the command's --help") \
            if parser else None
        return ErrorMessage("UsageError", exc.exit_code, (f"{line} ({where})" if where else line,), where)
    hint = "an unexpected error: rerun with --debug for the traceback, and report it"
    return ErrorMessage("InternalError", INTERNAL_EXIT, (f"{_describe(exc)} ({hint})",), hint)


def _describe(exc: BaseException) -> str:
    """`module.Type: message` on one line, whatever the exception carried (`zlib.error`, not `error`)."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{name}: {' '.join(str(exc).split()) or '(no message)'}"


def remember_wheel(ctx: click.Context | None, path: Path) -> None:
    """Note a wheel this command line reads, so a member found damaged later names its file."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.setdefault(WHEELS_META, []).append(path)


def report(message: ErrorMessage, *, as_json: bool) -> None:
    """The lines on stderr, the log a person reads (with the stages' ✓/✕ and the warnings), and with
    `--json` the same message as one object on stdout, the stream a script reads."""
    if as_json:
        click.echo(json.dumps(message.to_dict(), indent=2))
    click.echo(message.text(), err=True)


def flags(argv: Sequence[str]) -> tuple[bool, bool]:
    """(--json, --debug) as given anywhere on the line before `--`: read from the words because a
    line that fails to parse never reaches the options' callbacks."""
    words = list(argv)
    words = words[: words.index("--")] if "--" in words else words
    return "--json" in words, "--debug" in words


class GuardedGroup(click.Group):
    """The root group: its `main` is the CLI's only exit, so a test's CliRunner goes through it too
    (`standalone_mode` is not honoured: turning every exception into a message is the point)."""

    def invoke(self, ctx: click.Context) -> Any:
        # The wheel check reads a wheel's index and METADATA, not every member (that would decompress
        # the whole wheel before a recorded verify returns): a member damaged further in is found by the
        # stage that reads it, and named here, while the command line's context still says which wheels.
        try:
            return super().invoke(ctx)
        except DAMAGED_ZIP as exc:
            wheels = list(dict.fromkeys(str(w) for w in ctx.meta.get(WHEELS_META, [])))
            if not wheels:
                raise
            raise VerifyError(f"{' or '.join(wheels)} is damaged: {_describe(exc)}",
                              hint="rebuild it, or copy it again") from exc

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> NoReturn:
        argv = list(sys.argv[1:] if args is None else args)
        as_json, debug = flags(argv)
        try:
            rc = super().main(argv, prog_name, complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except BrokenPipeError:
            # `build-kernel plan --json | head`: the reader left; nothing more can be said on stdout.
            # Python's documented remedy: stdout to devnull, so the flush at exit does not raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(INTERNAL_EXIT)
        except (Exception, KeyboardInterrupt) as exc:  # the one place every failure becomes a message
            message = message_for(exc)
            if debug and not isinstance(exc, (click.ClickException, click.exceptions.Abort)):
                traceback.print_exc()  # then the same line and exit code as without --debug
            report(message, as_json=as_json)
            sys.exit(message.exit_code)
        sys.exit(rc if isinstance(rc, int) else 0)
