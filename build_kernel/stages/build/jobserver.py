"""The governor: a GNU make jobserver (FIFO) that hands ninja a token only while memory allows.

ninja >= 1.13 run without `-j` and with `MAKEFLAGS=--jobserver-auth=fifo:PATH` runs one
job on its implicit slot and one more per byte it can read from the FIFO, writing the byte
back when that job ends. The owner thread here decides how many bytes are out.

What a token costs. A token does not say which TU will take it, and ninja re-reads a byte
it has just written back before anyone else can (the end of one edge and the start of the
next are one step of its loop), so a token, once out, can be reused for any TU still to
start. Hence each slot is charged the larger of its current occupant's predicted peak and
the heaviest prediction not yet started (H): a reuse can never raise the sum, and as the
heavy TUs start (heaviest first where the edge order is ours) H falls and more tokens go
out. A token is granted only while

    Σ_slots max(occupant, H) + H ≤ budget                    (the predictions), and
    free now − reserve ≥ Σ_running (predicted − current RSS)⁺ + (idle slots + 1) × H
                                                               (what the kernel says is free),

and never beyond `max_jobs` (the CPUs). Where the edge order is ours (`order`, heaviest first),
a free slot is charged the next TU of that order rather than H: ninja takes ready edges in
file order among equals, and heaviest first means no later TU outweighs an earlier one, so
the reuse argument still holds. ninja 1.13.x looks at the FIFO only when it starts or
finishes a job (watching it while idle is ninja master's 9ec8b855, 2026-03-03, after 1.13.2),
so the FIFO is kept filled to the allowed level ahead of time. Over budget (a TU ran heavier than predicted),
tokens sitting in the FIFO are taken back. Occupants are found by scanning ninja's
children (/proc, no full process scan): a job's command line names its source, which is
matched against the predictions' keys.
"""

from __future__ import annotations

import fcntl
import math
import os
import struct
import termios
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from build_kernel.stages.build.recorder import _children, tree_rss

INTERVAL_S = 0.05
JOBSERVER_NINJA = (1, 13)


def supports_jobserver(ninja_version: str | None) -> bool:
    """ninja >= 1.13 is a jobserver client (kitware's PyPI build spells it `1.13.2.git.kitware...`)."""
    if not ninja_version:
        return False
    parts = [int(p) for p in ninja_version.split(".")[:2] if p.isdigit()]
    return len(parts) == 2 and tuple(parts) >= JOBSERVER_NINJA


@dataclass
class Running:
    pid: int
    key: str | None
    rss: int


@dataclass
class State:
    """What the owner thread knows at one instant; `decide` is a pure function of it."""

    running: list[Running]
    tokens_out: int  # explicit tokens written and not taken back (ninja also has one implicit slot)
    in_pipe: int  # tokens sitting in the FIFO, not held by ninja
    started: set[str]
    free: int  # cgroup-aware free memory now, bytes


@dataclass
class Stats:
    max_jobs_seen: int = 0
    max_tokens_out: int = 0
    max_charged: int = 0
    granted: int = 0
    reclaimed: int = 0
    started: list[str] = field(default_factory=list)
    error: str = ""


class Governor:
    def __init__(self, folder: Path, *, budget: int, predictions: Mapping[str, int], default: int, complete: bool,
                 max_jobs: int, available: Callable[[], int], reserve: int, root_pid: int | None = None,
                 order: Sequence[str] | None = None, interval: float = INTERVAL_S) -> None:
        self.path = folder / "jobserver.fifo"
        self.budget, self.predictions, self.default, self.complete = budget, dict(predictions), default, complete
        self.max_jobs, self.available, self.reserve = max(1, max_jobs), available, reserve
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self.interval, self.stats = interval, Stats()
        # The edge order ninja will follow, when we wrote it heaviest first (None: ninja's own).
        self.order = list(order) if order is not None else None
        # Longest key first: `gemm/fp8.cu` must not be taken for `fp8.cu`.
        self._keys = sorted(self.predictions, key=len, reverse=True)
        self._started: set[str] = set()
        self._known: dict[int, str] = {}
        self._tokens_out = 0
        self._fd = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jobserver", daemon=True)

    @property
    def makeflags(self) -> str:
        return f"--jobserver-auth=fifo:{self.path}"

    def __enter__(self) -> Governor:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        os.mkfifo(self.path, 0o600)
        # Held open read-write: ninja's opens never block or see EOF, and we can take tokens back.
        self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        while self.step() > 0:  # filled before ninja first looks (see above)
            pass
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    # --- one step -------------------------------------------------------------------------------

    def heaviest_left(self, started: set[str]) -> int:
        left = [p for k, p in self.predictions.items() if k not in started]
        if not self.complete:
            left.append(self.default)  # TUs the profile does not know may still come
        return max(left, default=0)

    def charge(self, job: Running) -> int:
        return self.predictions.get(job.key, self.default) if job.key else self.default

    def idle_charges(self, started: set[str], n: int) -> list[int]:
        """What the next `n` free slots will run: the next TUs of the edge order when it is ours
        (heaviest first, so never more than what came before), else the heaviest left for each."""
        h = self.heaviest_left(started)
        if self.order is None:
            return [h] * n
        nxt = [self.predictions[k] for k in self.order if k not in started][:n]
        tail = 0 if self.complete else self.default
        return nxt + [tail] * (n - len(nxt))

    def decide(self, s: State) -> int:
        """+1: write a token; -N: take N back from the FIFO; 0: wait."""
        h = self.heaviest_left(s.started)
        slots = 1 + s.tokens_out
        idle = max(0, slots - len(s.running))
        ahead = self.idle_charges(s.started, idle + 1)
        charged = sum(max(self.charge(j), h) for j in s.running) + sum(ahead[:idle])
        self.stats.max_charged = max(self.stats.max_charged, charged)
        if charged > self.budget:
            return -min(s.in_pipe, math.ceil((charged - self.budget) / max(h, 1))) if s.in_pipe else 0
        growth = sum(max(0, self.charge(j) - j.rss) for j in s.running)
        if (slots < self.max_jobs and charged + ahead[-1] <= self.budget
                and s.free - self.reserve >= growth + sum(ahead)):
            return 1
        return 0

    def _scan(self) -> list[Running]:
        jobs: list[Running] = []
        todo = [self.root_pid]
        while todo:
            pid = todo.pop()
            kids = _children(pid)
            if _comm(pid) == "ninja":
                jobs.extend(self._job(k) for k in kids)
            else:
                todo.extend(kids)
        for job in jobs:
            if job.key and job.key not in self._started:
                self._started.add(job.key)
                self.stats.started.append(job.key)
        return jobs

    def _job(self, pid: int) -> Running:
        # Only a match is remembered: a child read between ninja's fork and its exec still shows
        # ninja's own command line, and a `None` kept from then would never count that TU as
        # started and charge it the default rather than its prediction.
        key = self._known.get(pid)
        if key is None:
            cmdline = _cmdline(pid)
            key = next((k for k in self._keys if k in cmdline), None)
            if key is not None:
                self._known[pid] = key
        return Running(pid, key, tree_rss(pid)[0])

    def _in_pipe(self) -> int:
        raw = fcntl.ioctl(self._fd, termios.FIONREAD, struct.pack("i", 0))
        return int(struct.unpack("i", raw)[0])

    def step(self) -> int:
        running = self._scan()
        state = State(running, self._tokens_out, self._in_pipe(), set(self._started), self.available())
        move = self.decide(state)
        if move > 0:
            os.write(self._fd, b"+")
            self._tokens_out += 1
            self.stats.granted += 1
        elif move < 0:
            try:
                got = len(os.read(self._fd, -move))
            except BlockingIOError:
                got = 0  # ninja took them first
            self._tokens_out -= got
            self.stats.reclaimed += got
        self.stats.max_jobs_seen = max(self.stats.max_jobs_seen, len(running))
        self.stats.max_tokens_out = max(self.stats.max_tokens_out, self._tokens_out)
        return move

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                move = self.step()
            except OSError as exc:  # memory no longer readable (the cgroup went away): hand out no more
                self.stats.error = str(exc)
                return
            # A grant is re-checked at once: a build start can open many slots in a few steps.
            if move <= 0:
                self._stop.wait(self.interval)
            else:
                time.sleep(0.002)  # let ninja take the token and spawn, so the scan sees the job


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
