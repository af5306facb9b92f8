"""The one way the tool runs a subprocess: echo, resolve, log, raise a domain error.

After scikit-build-core's FailedProcessError: a failure shows the command, its return
code and the tail of its output, and names the log file that holds all of it.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from build_kernel.errors import BuildKernelError


def which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=path)


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
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` (never through a shell), capture its output, append it to `log`."""
    argv = [str(c) for c in cmd]
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=dict(env) if env is not None else None,
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except FileNotFoundError:
        raise error(f"{what}: {argv[0]} not found", hint=fix or f"install {Path(argv[0]).name} or put it on PATH") from None
    except subprocess.TimeoutExpired:
        raise error(f"{what}: `{shlex.join(argv)}` did not finish in {timeout:g} s", hint=fix) from None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"$ {shlex.join(argv)}\n{proc.stdout}{proc.stderr}[exit {proc.returncode}]\n")
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        where = f"; full log: {log}" if log else ""
        raise error(
            f"{what}: `{shlex.join(argv)}` exited {proc.returncode}: {tail[0].strip()}{where}",
            hint=fix,
        )
    return proc
