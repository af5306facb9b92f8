"""The state folder of one recipe's nights, and the lock that lets one night run at a time.

    <state>/night.lock        filelock's lock (fcntl: the kernel drops it with its holder, crash or not)
    <state>/holder.json       who holds it: pid, host, started, night (what a second night's error names)
    <state>/current.json      the night in progress: its date, commit, series version and lock changes, kept
                              until it ends, so that the same command after an interruption resumes that
                              night (not a newer upstream) and its wheel keeps its version
    <state>/last_good.json    the last night that published a wheel: commit, series, wheel
    <state>/nights/*.json     one record per night (record.py)
    <state>/wheels/           the good nights' wheels, kept for retention (retention.py)
    <state>/logs/             each night's own log

Default folder: `$XDG_STATE_HOME/build-kernel/nightly/<recipe>` (`~/.local/state/...`): the history is state,
not cache; wiping the build cache must not forget which night was good.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from build_kernel import atomic
from build_kernel.errors import BuildKernelError

LOCK, HOLDER, CURRENT, LAST_GOOD = "night.lock", "holder.json", "current.json", "last_good.json"


class Busy(BuildKernelError):
    """Another night of the same state folder is running (one at a time)."""

    exit_code = 75  # EX_TEMPFAIL (sysexits.h): try again later


def default_dir(recipe: str, env: Mapping[str, str]) -> Path:
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local" / "state")
    return Path(base) / "build-kernel" / "nightly" / recipe


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write(path: Path, data: Mapping[str, Any]) -> None:
    atomic.write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def holder_words(holder: Mapping[str, Any] | None) -> str:
    if not holder:
        return "a process that is just starting (no holder.json yet)"
    return (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')}"
            f" (night {holder.get('night') or '?'})")


@contextmanager
def hold(state_dir: Path, recipe: str, night: str | None) -> Iterator[None]:
    """The state folder's lock, for one night; a second night at once is one Busy line naming the holder."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(state_dir / LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise Busy(f"another night of {recipe} is running: {holder_words(_read(state_dir / HOLDER))}; "
                   f"state folder {state_dir}",
                   hint="one night at a time: wait for it to end (if that process is gone, the lock went with it: "
                        "run again)") from None
    try:
        _write(state_dir / HOLDER, {"pid": os.getpid(), "host": socket.gethostname(), "started": now(),
                                    "recipe": recipe, "night": night})
        yield
    finally:
        (state_dir / HOLDER).unlink(missing_ok=True)
        lock.release()


def current(state_dir: Path) -> dict[str, Any] | None:
    """The interrupted night to resume (None: the last night ended)."""
    return _read(state_dir / CURRENT)


def begin(state_dir: Path, night: Mapping[str, Any]) -> None:
    _write(state_dir / CURRENT, night)


def end(state_dir: Path) -> None:
    (state_dir / CURRENT).unlink(missing_ok=True)


def last_good(state_dir: Path) -> dict[str, Any] | None:
    return _read(state_dir / LAST_GOOD)


def set_last_good(state_dir: Path, good: Mapping[str, Any]) -> None:
    _write(state_dir / LAST_GOOD, good)


def log_path(state_dir: Path, night: str, commit: str) -> Path:
    return state_dir / "logs" / f"{night.replace('-', '')}-{commit[:12]}.log"


def wheels_dir(state_dir: Path) -> Path:
    return state_dir / "wheels"
