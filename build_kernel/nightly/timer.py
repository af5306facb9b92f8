"""Scheduling as the ecosystem does it: a systemd service + timer (user or system), checked with
`systemd-analyze verify`, whose output goes to the journal; or a cron line for hosts without systemd.

The service is a oneshot that runs the same command a person would (`python -m build_kernel nightly --recipe R
--state-dir S`), so a night started by hand and one started by the timer share the lock and the state. The
timer is Persistent: a night missed while the host was off runs at the next start. Words in ExecStart= and
Environment= are quoted as the serve unit's are (stages/serve/unit.py).
"""

from __future__ import annotations

import getpass
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_kernel import atomic
from build_kernel.errors import BuildKernelError
from build_kernel.stages.serve import unit

DEFAULT_AT = "02:30"
_AT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
# What the night's children need from the environment that a timer's start does not give.
_PASSED = ("PATH", "HOME", "BUILD_KERNEL_CACHE_DIR", "BUILD_KERNEL_OUTPUT_DIR", "BUILD_KERNEL_CONFIG",
           "BUILD_KERNEL_RECIPE_PATH", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "CUDA_HOME")


class TimerError(BuildKernelError):
    """The timer's units could not be written or do not verify."""

    exit_code = 2  # a usage problem: what was asked cannot be installed as asked


@dataclass(frozen=True)
class Units:
    name: str  # build-kernel-nightly-<recipe>
    service: str
    timer: str
    folder: Path
    scope: str  # "user" or "system"

    def enable(self) -> str:
        ctl = "systemctl --user" if self.scope == "user" else "sudo systemctl"
        linger = " (and `loginctl enable-linger` so it runs while you are logged out)" if self.scope == "user" else ""
        return f"{ctl} daemon-reload && {ctl} enable --now {self.name}.timer{linger}"

    def journal(self) -> str:
        return f"journalctl {'--user ' if self.scope == 'user' else ''}-u {self.name}.service"


def at(text: str) -> tuple[int, int]:
    m = _AT.match(text.strip())
    if m is None:
        raise TimerError(f"--at {text!r} is not a time of day", hint="write HH:MM, e.g. --at 02:30")
    return int(m.group(1)), int(m.group(2))


def command(recipe: str, state_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "build_kernel", "nightly", "--recipe", recipe, "--state-dir", str(state_dir), *extra]


def name_of(recipe: str) -> str:
    return "build-kernel-nightly-" + re.sub(r"[^A-Za-z0-9_.-]", "-", Path(recipe).stem)


def render(recipe: str, state_dir: Path, workdir: Path, env: Mapping[str, str], *, when: str = DEFAULT_AT,
           scope: str = "user", extra: Sequence[str] = ()) -> tuple[str, str]:
    """(service, timer) texts."""
    hour, minute = at(when)
    name = name_of(recipe)
    argv = command(recipe, state_dir, extra)
    passed = {k: env[k] for k in _PASSED if env.get(k)}
    service = [
        "# Written by build-kernel: `build-kernel nightly --install-timer` writes it again.",
        "[Unit]",
        f"Description=build-kernel nightly of {Path(recipe).stem}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "# One night, start to end; the timer starts it, a person may too (the lock keeps one at a time).",
        "Type=oneshot",
        f"ExecStart={' '.join(unit.quote(w) for w in argv)}",
        f"WorkingDirectory={unit.quote(str(workdir))}",
        *(f"Environment={unit.quote(f'{k}={v}')}" for k, v in sorted({**passed, 'NO_COLOR': '1'}.items())),
        *([f"User={unit.quote(getpass.getuser())}"] if scope == "system" else []),
        "# The log is the journal's: " + ("journalctl --user -u " if scope == "user" else "journalctl -u ")
        + f"{name}.service",
        "StandardOutput=journal",
        "StandardError=journal",
        f"SyslogIdentifier={name}",
        "# A real build takes hours; the timer's next start waits for this one.",
        "TimeoutStartSec=12h",
        "# Builds are background work: the host's interactive users come first.",
        "Nice=10",
        "IOSchedulingClass=idle",
        "# No program it runs can gain privileges; its /tmp is its own.",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "",
    ]
    timer = [
        "# Written by build-kernel: `build-kernel nightly --install-timer` writes it again.",
        "[Unit]",
        f"Description=build-kernel nightly of {Path(recipe).stem}, every night at {hour:02d}:{minute:02d}",
        "",
        "[Timer]",
        f"OnCalendar=*-*-* {hour:02d}:{minute:02d}:00",
        "# A night missed while the host was off runs when it starts again.",
        "Persistent=true",
        "# Hosts that share an upstream mirror do not all fetch in the same second.",
        "RandomizedDelaySec=10min",
        f"Unit={name}.service",
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
    ]
    return "\n".join(service), "\n".join(timer)


def folder_for(scope: str, env: Mapping[str, str]) -> Path:
    if scope == "system":
        return Path("/etc/systemd/system")
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "systemd" / "user"


def install(recipe: str, state_dir: Path, workdir: Path, env: Mapping[str, str], *, scope: str = "user",
            when: str = DEFAULT_AT, folder: Path | None = None, extra: Sequence[str] = ()) -> tuple[Units, str]:
    """Render, verify (both units together), then write; (the units, what verify said)."""
    service, timer = render(recipe, state_dir, workdir, env, when=when, scope=scope, extra=extra)
    name = name_of(recipe)
    verified = unit.verify(service, name, env, also={f"{name}.timer": timer}, error=TimerError,
                           hint="report it: the tool wrote a unit systemd refuses") or "systemd-analyze verify passed"
    target = folder or folder_for(scope, env)
    try:
        atomic.write_text(target / f"{name}.service", service)
        atomic.write_text(target / f"{name}.timer", timer)
    except OSError as exc:
        raise TimerError(f"cannot write the units into {target}: {exc.strerror}",
                         hint="run as root for --system, or use --user (the default)") from None
    return Units(name, service, timer, target, scope), verified


def cron_line(recipe: str, state_dir: Path, workdir: Path, *, when: str = DEFAULT_AT,
              extra: Sequence[str] = ()) -> str:
    """One crontab line: the same command at the same time, its output appended to the state folder's cron.log."""
    hour, minute = at(when)
    argv = " ".join(_sh(w) for w in command(recipe, state_dir, extra))
    return (f"{minute} {hour} * * * cd {_sh(str(workdir))} && NO_COLOR=1 {argv} >> {_sh(str(state_dir / 'cron.log'))} "
            "2>&1")


def _sh(word: str) -> str:
    import shlex

    # cron hands the line to /bin/sh, where % ends the command: escaped.
    return shlex.quote(word).replace("%", "\\%")
