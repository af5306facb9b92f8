"""One root error type; each kind carries its own exit code (after cibuildwheel's errors.py).

The CLI's one exit (cli/output.py) prints a `BuildKernelError`'s one-line message (and, with
`--json`, the same as a JSON object on stdout) and exits with `exit_code`; anything else is a bug,
still one line (exit 1), its traceback only with `--debug`.
"""

from __future__ import annotations


class BuildKernelError(Exception):
    """Root of every error the tool reports to the user as a message, not a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class RecipeError(BuildKernelError):
    """A recipe file is malformed, incomplete or inconsistent."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ToolchainError(BuildKernelError):
    """A compiler, CMake, ninja or torch is missing or does not fit the recipe."""

    exit_code = 3


class FetchError(BuildKernelError):
    """The pinned source could not be fetched or checked out."""

    exit_code = 4


class PatchError(BuildKernelError):
    """A patch series is tampered with, does not fit, or does not apply."""

    exit_code = 5


class BuildError(BuildKernelError):
    """The wheel build failed."""

    exit_code = 6


class VerifyError(BuildKernelError):
    """A built wheel lacks an arch, a kernel or an op, or does not import."""

    exit_code = 7


class PublishError(BuildKernelError):
    """Upload to an index or the install-back check failed."""

    exit_code = 8


class ServeError(BuildKernelError):
    """The serve profile is invalid or the server did not come up healthy."""

    exit_code = 9


class TestError(BuildKernelError):
    """The package's own tests failed, crashed or could not run against the wheel."""

    __test__ = False  # not a pytest class
    exit_code = 11


class DiskFullError(BuildKernelError):
    """A folder the work writes ran out of space: which folder, what the work needs there, what is free."""

    exit_code = 12


class NotBuiltYet(BuildKernelError):
    """A pipeline stage that this version of the tool does not provide yet."""

    exit_code = 10


class Interrupted(BuildKernelError):
    """Ctrl-C (SIGINT), here or in a program the tool ran: finished work is kept, a rerun resumes."""

    exit_code = 130  # as a shell reports a SIGINT death

    def __init__(self, during: str | None = None) -> None:
        self.during = during
        super().__init__(f"interrupted{f' during {during}' if during else ''}; run the same command to resume")
