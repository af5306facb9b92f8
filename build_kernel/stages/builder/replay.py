"""A stand-in compile for the scheduler benchmark and tests: it takes a profiled peak and holds it.

    python replay.py --name TU --mb PEAK --seconds WALL [--lanes N] [--duty F]

It allocates and touches PEAK MiB (real, resident memory: a cgroup cap OOM-kills it as it
would cicc), then works for WALL seconds: N lanes (nvcc --threads) each burning CPU at
most a fraction F of a core, so 16 "virtual cores" fit on 2 real ones (F = 2/16) and a
machine with more jobs than cores slows every job down, as real compiles do. F = 0:
it only sleeps. Stdlib only and run by path, not `-m`: a replay starts in milliseconds.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024
PERIOD_S = 0.01
T0 = time.monotonic()  # as near the process start as Python gets


def burn(seconds: float, duty: float, t0: float) -> None:
    """Work until `seconds` have passed since `t0` and this process has used `seconds * duty` CPU
    seconds (its start and its allocation included: a compile's own work), never faster than `duty`
    of a core: on a starved machine it runs late, as a real compile would."""
    target = seconds * duty
    while True:
        elapsed, used = time.monotonic() - t0, time.process_time()
        if used >= target and elapsed >= seconds:
            return
        ahead = used - duty * elapsed  # CPU used beyond the pace: sleep it off
        if duty <= 0 or used >= target or ahead >= 0:
            time.sleep(min(PERIOD_S, max(0.001, seconds - elapsed, ahead / duty if duty > 0 else 0)))
            continue
        until = min(-ahead, target - used) + used
        while time.process_time() < until:
            pass


@dataclass(frozen=True)
class Unit:
    """One replayed compile: a TU's (scaled) profiled peak and wall time, and its lanes (nvcc threads)."""

    name: str
    mb: float
    seconds: float
    lanes: int = 1
    duty: float = 0.0


def write_ninja(folder: Path, units: Sequence[Unit], *, launcher: Sequence[str] = (), sources: bool = False) -> Path:
    """A build.ninja with one edge per unit, in the given order (ninja breaks ties by edge order).
    `sources`: each edge reads an empty `src/<name>`, as a compile its source (`ninja -t compdb`, which
    ninja_order reads, lists only edges with an input)."""
    folder.mkdir(parents=True, exist_ok=True)
    me = shlex.join([sys.executable, str(Path(__file__).resolve())])
    command = " ".join([*(shlex.quote(w) for w in launcher), me, "$args --out $out"])
    lines = ["rule replay", f"  command = {command}",
             "  description = replay $out", ""]
    for u in units:
        args = f"--name {shlex.quote(u.name)} --mb {u.mb:.1f} --seconds {u.seconds:.3f} --lanes {u.lanes} --duty {u.duty:.4f}"
        source = f" src/{u.name}" if sources else ""
        if sources:
            (folder / "src" / u.name).parent.mkdir(parents=True, exist_ok=True)
            (folder / "src" / u.name).touch()
        lines += [f"build {_target(u.name)}: replay{source}", f"  args = {args}"]
    lines.append(f"build all: phony {' '.join(_target(u.name) for u in units)}")
    lines.append("default all\n")
    path = folder / "build.ninja"
    path.write_text("\n".join(lines))
    return path


def _target(name: str) -> str:
    return name.replace("/", "__").replace(" ", "_").replace(":", "_") + ".done"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)  # the TU it stands for: what the governor matches
    parser.add_argument("--mb", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--lanes", type=int, default=1)
    parser.add_argument("--duty", type=float, default=0.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    lanes = []
    for _ in range(args.lanes - 1):
        pid = os.fork()
        if pid == 0:  # a forked lane: work, then go (it holds no memory)
            burn(args.seconds, args.duty, time.monotonic())
            os._exit(0)
        lanes.append(pid)
    size = max(int(args.mb * MiB), 4096)
    # Resident, charged to the cgroup: MAP_POPULATE faults every page in at once (~0.5 s/GB of sys
    # time; touching page by page from Python is 4x that), and the cap's OOM killer fires right here.
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))
    if not hasattr(mmap, "MAP_POPULATE"):
        block[::4096] = b"\1" * len(range(0, size, 4096))
    burn(args.seconds, args.duty, T0)
    for pid in lanes:
        os.waitpid(pid, 0)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(f"{args.name} {block[0]}\n")


if __name__ == "__main__":
    main()
