"""Run the wheel build: progress from ninja's `[N/M]` lines, and resume after an OOM kill.

The build runs in a persistent CMake folder, so when the kernel's OOM killer takes a
compile the same command runs again with half the jobs and ninja rebuilds only what is
missing. A Ctrl-C is said as such (Interrupted, exit 130: the same command resumes in that folder);
any other failure becomes one line: the first real error of the output.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from build_kernel import log, process
from build_kernel.errors import BuildError, Interrupted
from build_kernel.stages.builder.planner import EtaFromLines

# What a compile killed by the kernel's OOM killer leaves in the log, most telling first.
OOM_PATTERNS = (
    # gcc/g++: the driver survives and names its compiler proper (cc1plus, cc1, lto1).
    re.compile(r"Killed signal terminated program (\S+)"),
    re.compile(r"internal compiler error: Killed(?: \(program (\S+)\))?"),
    # nvcc runs each step with system(); when /bin/sh is bash it execs the step, and nvcc names it by the
    # first word of its command line: `nvcc error   : '"$CICC_PATH/cicc"' died due to signal 9 (Kill signal)`
    # (nvcc 13.0); ptxas's line starts `ptxas`, hence `'ptxas' died ...`, the form older nvcc gave for all.
    re.compile(r"""'"?(?:\$\w+/)?([\w+.-]+)"?'( died due to signal 9\b(?: \(Kill signal\))?)"""),
    # The profile recorder (our compiler launcher) says so when the compiler itself died of SIGKILL.
    re.compile(r"build-kernel recorder: \S+ \(.*?\) killed by signal 9"),
    # When /bin/sh is dash (Debian, Ubuntu) dash forks the step, reports its SIGKILL as a bare `Killed`
    # line and exits 137; nvcc then exits 137 saying nothing, so the program is not named anywhere.
    re.compile(r"(?m)^Killed$"),
)
_NVCC_DIED = OOM_PATTERNS[2]
_NINJA_FAILED = re.compile(r"(?m)^FAILED: (?:\[code=\d+\] )?(.+?)\s*$")  # ninja >= 1.12 adds [code=N]
_NINJA_INTERRUPTED = re.compile(r"(?m)^ninja: build stopped: interrupted by user")
NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
ERROR_LINE = re.compile(r"(error:|error :|fatal error|CMake Error|Error:|nvcc fatal)", re.IGNORECASE)
# No bar in a log file (CI): a line at most this often, and the last step.
PLAIN_PROGRESS_EVERY_S = 15.0


def oom_killed(output: str) -> str | None:
    """The OOM kill in a build's output, as one phrase naming the killed program where the output does."""
    for pattern in OOM_PATTERNS:
        m = pattern.search(output)
        if not m:
            continue
        if pattern is _NVCC_DIED:
            return f"'{m.group(1)}'{m.group(2)}"  # the program's bare name, not nvcc's `"$CICC_PATH/cicc"`
        if m.group(0) == "Killed":
            failed = _NINJA_FAILED.findall(output[:m.start()])
            return f"Killed: {failed[-1]}" if failed else "Killed"
        return m.group(0)
    return None


def interrupted(returncode: int, output: str) -> bool:
    """The build stopped for a Ctrl-C that reached only its programs (a SIGINT to the build's group, not to
    us): ninja says so in its last words, and a front end that does not pass its code on exits 1 after it."""
    if returncode in (-signal.SIGINT, 128 + signal.SIGINT):
        return True
    return _NINJA_INTERRUPTED.search(output) is not None


def first_error(output: str) -> str:
    """The first real error line; CMake puts the reason on the lines after `CMake Error at`."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if ERROR_LINE.search(line) and "warning" not in line.lower():
            if line.lstrip().startswith("CMake Error"):
                reason = " ".join(l.strip() for l in lines[i + 1:i + 4] if l.strip())
                return f"{line.strip()} {reason}".strip()
            return line.strip()
    rest = [l for l in lines if l.strip()]
    return rest[-1].strip() if rest else "(no output)"


def _with_progress(cmd: Sequence[str | Path], env: Mapping[str, str], cwd: Path, log_path: Path,
                   jobs: int, eta: EtaFromLines | None = None) -> process.Streamed:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        """Asked on every refresh, not only when ninja prints: a long last compile still counts down."""

        def render(self, task: object) -> Text:
            assert eta is not None
            return Text(eta.describe())

    tty = log.console.is_terminal
    # With a profile the ETA is the recorded time of what is left, rescaled by the build's own pace
    # (planner.EtaFromLines); without one, rich's estimate from the rate so far.
    remaining = EtaColumn() if eta else TimeRemainingColumn()
    with Progress(TextColumn(f"compiling ({jobs} jobs)"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  *([] if eta else [TextColumn("eta")]), remaining, console=log.console, transient=True,
                  disable=not tty) as progress:
        task = progress.add_task("compile", total=None)
        start, last_said = time.monotonic(), [0.0]

        def on_line(line: str) -> None:
            m = NINJA_PROGRESS.match(line)
            if m:
                done, total = int(m.group(1)), int(m.group(2))
                if eta:
                    eta(line)
                progress.update(task, completed=done, total=total)
                now = time.monotonic()
                if not tty and (now - last_said[0] >= PLAIN_PROGRESS_EVERY_S or done == total):
                    last_said[0] = now
                    said = f", {eta.describe()} (recorded times)" if eta and eta.remaining() is not None else ""
                    log.info(f"  [{done}/{total}] {now - start:.0f} s{said}")
            elif not tty and line.startswith(("FAILED", "ninja:")):
                log.info(line.rstrip())

        return process.stream(cmd, on_line=on_line, error=BuildError, what="building the wheel",
                              fix="the build environment's python is gone: delete its folder under <cache>/envs and run again",
                              cwd=cwd, env=env, log=log_path)


@dataclass
class Attempts:
    jobs: list[int] = field(default_factory=list)
    oom_kills: int = 0


def build_with_retries(cmd: Sequence[str | Path], env_for: Callable[[int], Mapping[str, str]], *, cwd: Path,
                       log_path: Path, jobs: int, max_oom_retries: int,
                       eta: EtaFromLines | None = None) -> Attempts:
    """Run until it succeeds, halving the jobs after each OOM kill; raise BuildError otherwise."""
    attempts = Attempts()
    while True:
        attempts.jobs.append(jobs)
        result = _with_progress(cmd, env_for(jobs), cwd, log_path, jobs, eta)
        if result.returncode == 0:
            return attempts
        killed = oom_killed(result.output)
        if killed and attempts.oom_kills < max_oom_retries and jobs > 1:
            attempts.oom_kills += 1
            jobs = max(1, jobs // 2)
            message = (f"OOM kill detected ({killed}): resuming in the same build folder with {jobs} job(s) "
                       f"(retry {attempts.oom_kills}/{max_oom_retries})")
            log.warn(message)
            with log_path.open("a") as fh:
                fh.write(f"# {message}\n")
            continue
        if interrupted(result.returncode, result.output):
            raise Interrupted()  # named by the step it stopped (cli/output.py); the build folder is kept to resume
        if killed:
            raise BuildError(f"compile OOM-killed ({killed}) even with {jobs} job(s); full log: {log_path}",
                             hint="free memory, lower [build] nvcc_threads, or build fewer archs")
        raise BuildError(f"build failed: {first_error(result.output)}; full log: {log_path}",
                         hint="fix the error above (the patch series or toolchain), then run again")
