"""The one way the tool runs programs: captured (`run`), streamed (`stream`), read line by line
(`lines`), long-running (`spawn`), asked one question after another (`converse`), and `probe` for
"what does this tool say, if it runs at all".

After scikit-build-core's `Run`/`FailedProcessError`: never a shell; a failure is the
caller's domain error with the command, its return code and the tail of its output, and
names the log file that holds all of it. Every command and its output that goes to a log
passes through `redact` first, so a secret handed to a child in its environment never
lands in a file or a message.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from build_kernel.errors import BuildKernelError, Interrupted

# The password part may hold a raw '/' (a mistyped URL): over-redacting beats leaking.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*):(?P<password>[^@\s]*)@")
CompletedProcess = subprocess.CompletedProcess


def which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=path)


# A secret this long or longer is hidden wherever it occurs, also inside a longer word. A shorter one is hidden
# only where it stands alone (no letter or digit beside it): replaced inside words, `TWINE_PASSWORD=e` turned every
# message into `cannot r***ach ... ind***x` and, worse, showed the password to anyone who compared that with the
# words it came from. 8 is the length below which a string turns up by chance in ordinary text (English words,
# versions, hashes' prefixes) and NIST SP 800-63B's floor for a memorised secret; publish warns of a shorter one.
MIN_SECRET = 8


def _hide(secret: str) -> re.Pattern[str]:
    return re.compile(re.escape(secret) if len(secret) >= MIN_SECRET
                      else rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])")


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """Passwords in `scheme://user:password@` and every given secret replaced by ***: whole secrets, never a
    letter inside a word (a secret shorter than MIN_SECRET only where it stands alone)."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:***@", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = _hide(secret).sub("***", text)
    return text


def log_command(log: Path, argv: Sequence[str], output: str, code: int, secrets: Sequence[str] = ()) -> None:
    """Append `$ command`, its output and `[exit N]` to a log (the one writer of that format)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(redact(f"$ {shlex.join(argv)}\n{output}[exit {code}]\n", secrets))


def _tail(output: str) -> str:
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def shown(argv: Sequence[str]) -> str:
    """`argv` for a one-line message: an argument of several lines (a `python -c` script) as its line count."""
    return shlex.join(a if "\n" not in a else f"<{a.count(chr(10)) + 1}-line script>" for a in argv)


def exit_cause(code: int) -> str:
    """`exited 3`, or `killed by SIGSEGV` for a negative return code."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited {code}"


def _failure(error: type[BuildKernelError], what: str, argv: Sequence[str], code: int, output: str,
             log: Path | None, fix: str | None, secrets: Sequence[str]) -> BuildKernelError:
    if code in (-signal.SIGINT, 128 + signal.SIGINT):  # Ctrl-C reached the child: not the command's failure
        return Interrupted()
    where = f"; full log: {log}" if log else ""
    message = f"{what}: `{shown(argv)}` {exit_cause(code)}: {_tail(output)}{where}"
    return error(redact(message, secrets), hint=redact(fix, secrets) if fix else None)


def _not_found(error: type[BuildKernelError], what: str, program: str, fix: str | None,
               cwd: Path | None = None, exc: OSError | None = None) -> BuildKernelError:
    """The program, or the folder it was to run in, is not there (or not runnable): which one."""
    if cwd is not None and not Path(cwd).is_dir():
        return error(f"{what}: the folder to run {Path(program).name} in, {cwd}, does not exist",
                     hint="a cache folder was removed while in use? run again")
    if isinstance(exc, PermissionError):
        return error(f"{what}: {program} is not executable ({exc.strerror})", hint=f"chmod +x {program}, or reinstall it")
    return error(f"{what}: {program} not found", hint=fix or f"install {Path(program).name} or put it on PATH")


def run(
    cmd: Sequence[str | Path],
    *,
    error: type[BuildKernelError] = BuildKernelError,
    what: str,
    fix: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    timeout: float | None = None,
    check: bool = True,
    stdin: str | None = None,
    secrets: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `cmd`, capture its output, append it to `log`; a failure raises `error` (when `check`)."""
    argv = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=dict(env) if env is not None else None, input=stdin,
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        raise _not_found(error, what, argv[0], fix, cwd, exc) from None
    except subprocess.TimeoutExpired as exc:
        if log is not None:  # what it printed before it was stopped: where it hangs
            partial = b"".join(x if isinstance(x, bytes) else x.encode() for x in (exc.stdout, exc.stderr) if x)
            log_command(log, argv, partial.decode(errors="replace"), -9, secrets)
        where = f"; its output so far: {log}" if log else ""
        raise error(redact(f"{what}: `{shown(argv)}` did not finish in {timeout:g} s{where}", secrets),
                    hint=redact(fix, secrets) if fix else None) from None
    if log is not None:
        log_command(log, argv, proc.stdout + proc.stderr, proc.returncode, secrets)
    if check and proc.returncode != 0:
        raise _failure(error, what, argv, proc.returncode, proc.stderr or proc.stdout, log, fix, secrets)
    return proc


def probe(cmd: Sequence[str | Path], *, env: Mapping[str, str] | None = None, timeout: float = 60,
          merge: bool = True, stdin: str | None = None) -> str | None:
    """stdout (+ stderr when `merge`) of a command that succeeded; None when it is missing, fails or hangs.

    For tool detection (`doctor`, toolchain facts), where "not there" is an answer, not an error.
    """
    try:
        proc = subprocess.run([str(c) for c in cmd], env=dict(env) if env is not None else None, input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout + proc.stderr if merge else proc.stdout


@dataclass
class Streamed:
    returncode: int
    output: str


def stream(
    cmd: Sequence[str | Path],
    *,
    on_line: Callable[[str], None],
    error: type[BuildKernelError] = BuildKernelError,
    what: str,
    fix: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path,
) -> Streamed:
    """Run a long command, teeing each line of stdout+stderr to `log` and to `on_line`.

    The exit code is returned, not raised: a long build decides itself what a failure means
    (an OOM kill is resumed from, anything else becomes its one-line error).
    """
    argv = [str(c) for c in cmd]
    chunks: list[str] = []
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"$ {shlex.join(argv)}\n")
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=dict(env) if env is not None else None, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1)
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            fh.write(f"[not started: {exc.strerror}]\n")
            raise _not_found(error, what, argv[0], fix, cwd, exc) from None
        assert proc.stdout is not None
        try:
            with proc.stdout:
                for line in proc.stdout:
                    fh.write(line)
                    chunks.append(line)
                    on_line(line)
            code = proc.wait()
        except BaseException:
            # Ctrl-C or a failing callback: the child does not outlive us.
            _stop(proc, grace=5.0)
            raise
        fh.write(f"[exit {code}]\n")
    return Streamed(code, "".join(chunks))


def lines(cmd: Sequence[str | Path], *, error: type[BuildKernelError] = BuildKernelError, what: str,
          fix: str | None = None, env: Mapping[str, str] | None = None, tolerate: str = "") -> Iterator[str]:
    """stdout of `cmd` line by line, as it comes (output too large to hold: a whole library's SASS).
    A non-zero exit raises `error` with stderr's last line, unless stderr says `tolerate`; a
    consumer that stops early stops the child too."""
    argv = [str(c) for c in cmd]
    with tempfile.TemporaryFile(mode="w+") as err:  # a file, not a pipe: a full stderr pipe would stall stdout
        try:
            proc = subprocess.Popen(argv, env=dict(env) if env is not None else None, stdout=subprocess.PIPE,
                                    stderr=err, text=True)
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            raise _not_found(error, what, argv[0], fix, None, exc) from None
        assert proc.stdout is not None
        try:
            with proc.stdout:
                yield from proc.stdout
        finally:
            if proc.poll() is None:  # stopped early (the consumer's error): do not leave it running
                proc.kill()
            code = proc.wait()
        err.seek(0)
        message = err.read()
    if code and not (tolerate and tolerate in message):
        raise _failure(error, what, argv, code, message, None, fix, ())


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop(proc: subprocess.Popen[str], grace: float) -> int:
    """SIGTERM to the child's process group, then SIGKILL after `grace` seconds.

    Also when the leader has already exited: a server's workers (sglang's scheduler,
    holding GPU memory) outlive it in the group otherwise.
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None and not _group_alive(proc.pid):
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            proc.send_signal(sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and (proc.poll() is None or _group_alive(proc.pid)):
            time.sleep(0.1)
    return proc.wait()


class Spawned:
    """A long-running child (a server) in its own process group, its output going to a log."""

    def __init__(self, proc: subprocess.Popen[str], argv: list[str], log: Path, fh: IO[str]) -> None:
        self.proc, self.argv, self.log, self._fh = proc, argv, log, fh

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 30.0) -> int:
        """Stop the whole group (SIGTERM, then SIGKILL); the exit code."""
        code = _stop(self.proc, grace)
        self._fh.close()
        return code

    def tail(self, lines: int = 20) -> list[str]:
        self._fh.flush()
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        return text.splitlines()[-lines:]

    def __enter__(self) -> Spawned:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(cmd: Sequence[str | Path], *, error: type[BuildKernelError] = BuildKernelError, what: str,
          fix: str | None = None, cwd: Path | None = None, env: Mapping[str, str] | None = None,
          log: Path) -> Spawned:
    """Start `cmd` in the background (own session, so stop() reaches its children too)."""
    argv = [str(c) for c in cmd]
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("a")
    fh.write(f"$ {shlex.join(argv)}  # started {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    fh.flush()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=dict(env) if env is not None else None, stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        fh.close()
        raise _not_found(error, what, argv[0], fix, cwd, exc) from None
    return Spawned(proc, argv, log, fh)


class Conversation:
    """A child kept running to answer one request line after another (a parser whose import is slow):
    each answer is the first stdout line that starts with a mark; other lines (an import's chatter) are
    passed over. stderr goes to a file, so a full pipe never stalls it, and its tail explains a crash."""

    def __init__(self, proc: subprocess.Popen[bytes], argv: list[str], err: IO[bytes],
                 error: type[BuildKernelError], what: str, fix: str | None) -> None:
        self.proc, self.argv, self._err, self._error, self._what, self._fix = proc, argv, err, error, what, fix
        self._pending = b""

    def ask(self, request: str, *, mark: str, timeout: float) -> str | None:
        """Send one line; the answer after `mark`, or None when the child ended without one."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(request.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            return None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()  # raw reads: a buffered reader could hold the answer where select cannot see it
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self._pending:
                    line, self._pending = self._pending.split(b"\n", 1)
                    text = line.decode(errors="replace")
                    if text.startswith(mark):
                        return text[len(mark):]
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise self._error(f"{self._what}: `{shown(self.argv)}` gave no answer in {timeout:g} s",
                                      hint=self._fix)
                if sel.select(left):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        return None
                    self._pending += chunk

    def stderr_tail(self, lines: int = 1) -> list[str]:
        self._err.flush()
        self._err.seek(0)
        return self._err.read().decode(errors="replace").strip().splitlines()[-lines:]

    def close(self) -> int:
        """End of questions: stdin closed, so the child ends by itself; killed if it does not within 5 s."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
        return code

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def converse(cmd: Sequence[str | Path], *, error: type[BuildKernelError] = BuildKernelError, what: str,
             fix: str | None = None, env: Mapping[str, str] | None = None) -> Conversation:
    """Start `cmd` to be asked questions on its stdin (`Conversation.ask`); close() ends it."""
    argv = [str(c) for c in cmd]
    err = tempfile.TemporaryFile()  # noqa: SIM115 (the Conversation owns it and closes it in close())
    try:
        proc = subprocess.Popen(argv, env=dict(env) if env is not None else None, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        err.close()
        raise _not_found(error, what, argv[0], fix, None, exc) from None
    return Conversation(proc, argv, err, error, what, fix)
