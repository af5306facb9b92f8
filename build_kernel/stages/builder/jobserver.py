"""The governor: a GNU make jobserver (FIFO) that hands ninja a token only while memory allows.

ninja >= 1.13 run without `-j` and with `MAKEFLAGS=--jobserver-auth=fifo:PATH` runs one
job on its implicit slot and one more per byte it can read from the FIFO, writing the byte
back when that job ends. The owner thread here decides how many bytes are out.

What a token costs. A token does not say which TU will take it, and ninja re-reads a byte
it has just written back before anyone else can (the end of one edge and the start of the
next are one step of its loop), so a token, once out, can be reused for any TU still to
start. But at any later instant the jobs running are at most `slots` distinct TUs among those
running now and those not started yet (a finished TU never runs again). So the memory
`slots` jobs can ever need is bounded by the sum of the `slots` heaviest predictions of
that set, B(slots), which only falls as the build goes on. A token is granted only while

    B(slots + 1) ≤ budget                                     (the predictions), and
    free now − reserve ≥ Σ_running (predicted − current RSS)⁺ + the (idle slots + 1) heaviest
                          predictions not started              (what the kernel says is free),

and never beyond `max_jobs` (the CPUs). Which TUs are still to come: until the build is
configured, any number of TUs no profile knows may (each counts as the default); once the
ninja wrapper has written the build's list of compiles (ninja_order's `edges` file), exactly
those, each by its prediction or the default, and a profile's TUs this build does not
compile (FA3's under a 12.0a build) count for nothing. ninja 1.13.x looks at the FIFO only
when it starts or finishes a job (watching it while idle is ninja master's 9ec8b855,
2026-03-03, after 1.13.2), so the FIFO is kept filled to the allowed level ahead of time.
Over budget (a TU ran heavier than predicted), tokens sitting in the FIFO are taken back.
Occupants are found by scanning ninja's children (/proc, no full process scan): a job's
command line is described as the recorder describes a compile (recorder.compiled), and its
source matched against the predictions' keys.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from build_kernel.stages.builder.ninja_order import EdgesList
from build_kernel.stages.builder.recorder import _children, compiled, tree_rss

INTERVAL_S = 0.05
TRACE_S = 5.0  # a line of the trace at least this often, and at every grant or take-back
TRACE = "trace.jsonl"
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
    waiting: Mapping[str, int]  # TU -> compiles of it not started yet
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

    def summary(self) -> str:
        """One line for the build's log: what the governor did, and why it stopped if it did."""
        return (f"governor: {self.granted} token(s) granted, {self.reclaimed} taken back, at most "
                f"{self.max_jobs_seen} compile(s) at once, {len(self.started)} started"
                + (f"; stopped handing out tokens: {self.error}" if self.error else ""))


class Governor:
    def __init__(self, folder: Path, *, budget: int, predictions: Mapping[str, int], default: int, complete: bool,
                 max_jobs: int, available: Callable[[], int], reserve: int, root_pid: int | None = None,
                 edges: Path | None = None, strip: Sequence[str] = (), interval: float = INTERVAL_S) -> None:
        self.path = folder / "jobserver.fifo"
        self.budget, self.default, self.complete = budget, default, complete
        self.max_jobs, self.available, self.reserve = max(1, max_jobs), available, reserve
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self.interval, self.stats = interval, Stats()
        # What the profiles predict, and what this build compiles (each known TU once until `edges` says).
        self.known = dict(predictions)
        self.predictions = dict(predictions)
        self.waiting: Counter[str] = Counter(list(self.known))
        # The build's list of compiles, written by the ninja wrapper after each configure (None: never).
        self.edges, self.strip, self._edges = edges, list(strip), EdgesList(edges)
        # Longest key first: `gemm/fp8.cu` must not be taken for `fp8.cu` (the fallback match).
        self._keys = sorted(self.predictions, key=len, reverse=True)
        # Keyed by (pid, start time), never the pid alone: the kernel hands a finished job's pid to a later
        # process once its pid space wraps (pid_max 32768 on many hosts, and a build runs tens of thousands
        # of processes), and that later job, another TU, must count as started and be charged its own peak.
        self._key_of_job: dict[tuple[int, int], str] = {}
        self._fd = -1
        self._tokens_out = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jobserver", daemon=True)
        # Why the build runs as many compiles as it does: a JSON line per decision that moved a token,
        # and one every TRACE_S seconds (`build-kernel` keeps it beside the FIFO).
        self.trace_path = folder / TRACE
        self._traced = 0.0
        self._t0 = time.monotonic()

    @property
    def makeflags(self) -> str:
        return f"--jobserver-auth=fifo:{self.path}"

    def __enter__(self) -> Governor:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        self.trace_path.unlink(missing_ok=True)
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

    def charge(self, job: Running) -> int:
        return self.predictions.get(job.key, self.default) if job.key else self.default

    def _heaviest(self, peaks: list[int], n: int) -> int:
        """The sum of the n heaviest of `peaks`, with as many defaults as needed while TUs no profile knows
        may still come."""
        top = sorted(peaks + ([] if self.complete else [self.default] * n), reverse=True)[:n]
        return sum(top)

    def bound(self, s: State, slots: int) -> int:
        """The most `slots` jobs can ever need from now on: the `slots` heaviest of what runs and what waits."""
        return self._heaviest([self.charge(j) for j in s.running] + self._waiting_peaks(s), slots)

    def _waiting_peaks(self, s: State) -> list[int]:
        return [self.predictions.get(k, self.default) for k, n in s.waiting.items() for _ in range(n)]

    def decide(self, s: State) -> int:
        """+1: write a token; -N: take N back from the FIFO; 0: wait."""
        slots = 1 + s.tokens_out
        charged = self.bound(s, slots)
        self.stats.max_charged = max(self.stats.max_charged, charged)
        if charged > self.budget:
            back = 0
            while back < s.in_pipe and self.bound(s, slots - back) > self.budget:
                back += 1
            return -back
        growth = sum(max(0, self.charge(j) - j.rss) for j in s.running)
        starts = self._heaviest(self._waiting_peaks(s), max(0, slots - len(s.running)) + 1)
        if slots < self.max_jobs and self.bound(s, slots + 1) <= self.budget and s.free - self.reserve >= growth + starts:
            return 1
        return 0

    def _read_edges(self) -> None:
        """Once the build is configured: exactly its compiles are still to come (see the module's docstring)."""
        sources = self._edges.changed()
        if sources is None:
            return  # none, not written yet (or being replaced), or unchanged: what was known stays
        listed = Counter(sources)
        done = Counter(self.stats.started)
        self.predictions = {src: self.known.get(src, self.default) for src in listed}
        self.waiting = Counter({src: n - done[src] for src, n in listed.items() if n > done[src]})
        self._keys = sorted(self.predictions, key=len, reverse=True)
        self.complete = True

    def _scan(self) -> list[Running]:
        jobs: list[Running] = []
        todo = [self.root_pid]
        while todo:
            pid = todo.pop()
            kids = _children(pid)
            # The innermost ninja: a wrapper named ninja (a launcher script, PyPI's console entry point)
            # has the real one as its child, another program; a child ninja has forked and not yet
            # exec'd is the same program as its parent, and one of its jobs.
            if _comm(pid) == "ninja" and not any(_comm(k) == "ninja" and _exe(k) != _exe(pid) for k in kids):
                jobs.extend(self._job(k) for k in kids)
            else:
                todo.extend(kids)
        return jobs

    def _job(self, pid: int) -> Running:
        # Only a match is remembered: a child read between ninja's fork and its exec still shows
        # ninja's own command line, and a `None` kept from then would never count that TU as
        # started and charge it the default rather than its prediction.
        ident = (pid, _start_time(pid))
        key = self._key_of_job.get(ident)
        if key is None:
            argv = _argv(pid)
            described = compiled(argv, self.strip) if argv else None
            if described is not None and described.source in self.predictions:
                key = described.source
            else:  # named otherwise (a command the recorder cannot read): a key its command line holds
                cmdline = " ".join(argv)
                key = next((k for k in self._keys if k in cmdline), described.source if described else None)
            if key is not None:
                self._key_of_job[ident] = key
                self.stats.started.append(key)
                if self.waiting[key] > 0:
                    self.waiting[key] -= 1
        return Running(pid, key, tree_rss(pid)[0])

    def _in_pipe(self) -> int:
        raw = fcntl.ioctl(self._fd, termios.FIONREAD, struct.pack("i", 0))
        return int(struct.unpack("i", raw)[0])

    def step(self) -> int:
        self._read_edges()
        running = self._scan()
        state = State(running, self._tokens_out, self._in_pipe(), +self.waiting, self.available())
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
        self._trace(state, move)
        return move

    def _trace(self, s: State, move: int) -> None:
        now = time.monotonic()
        if not move and now - self._traced < TRACE_S:
            return
        self._traced = now
        slots = 1 + s.tokens_out
        line = {"t": round(now - self._t0, 2), "move": move, "slots": slots, "in_pipe": s.in_pipe,
                "running": [j.key for j in s.running], "waiting": sum(s.waiting.values()),
                "complete": self.complete, "bound_gb": round(self.bound(s, slots) / 1e9, 2),
                "next_bound_gb": round(self.bound(s, slots + 1) / 1e9, 2), "budget_gb": round(self.budget / 1e9, 2),
                "free_gb": round(s.free / 1e9, 2)}
        try:
            with self.trace_path.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
        except OSError:
            pass  # a trace, never a reason to stop governing

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                move = self.step()
            except Exception as exc:  # memory no longer readable (the cgroup went away), or a defect: hand out no more
                self.stats.error = f"{type(exc).__name__}: {exc}"
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


def _start_time(pid: int) -> int:
    """When the process started (clock ticks since boot; /proc/PID/stat field 22), -1 once it is gone:
    with the pid, the process's identity (a pid alone is reused)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # The fields after the command name, which may itself hold spaces and parentheses.
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    text = raw.decode(errors="replace")
    return text.removesuffix("\0").split("\0") if text else []


def _cmdline(pid: int) -> str:
    return " ".join(_argv(pid))
