"""The profile recorder: a compiler launcher that measures each compile into the profile.

    python -S .../build_kernel/stages/builder/recorder.py --db PATH [--project KEY] [--strip [LABEL=]DIR]... -- [cache launcher] compiler args...
    (or python -m build_kernel.stages.builder.recorder ...: the same, 0.5-1 s slower to start)

CMake puts it in front of every CUDA/C++ compile (`CMAKE_<LANG>_COMPILER_LAUNCHER`), before
a cache launcher when there is one. Per compile it records source, flags digest, archs,
nvcc threads, wall, CPU (user + sys of the whole tree), the peak of the summed RSS of the
process tree (cicc and ptxas included, sampled), the largest single RSS, and how it ended
(signal 9 and exit 137 are the OOM killer's marks). The compile's own exit code is passed
on; a recorder problem (the database locked or gone) is a warning, never a failed build.

It runs once per compile, so it must start fast: CMake runs this file by its path with -S,
and before the compiler starts it imports only os, signal, sys, threading and time (no
build_kernel package, whose `-m` import chain pulls GitPython and rich: 0.5-1 s per compile,
10-14 % of a miniature build measured; no subprocess, pathlib, dataclasses or typing either).
It starts the compiler with os.posix_spawnp (not build_kernel.process: no log, no echo, no
domain error, it must be transparent to ninja; the environment is inherited as is), and
while the compile runs a thread imports re, hashlib and sqlite3 and describes the command,
so that work is off the compile's critical path. The child is reaped with os.wait4 for the
tree's CPU times.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence

SAMPLE_S = 0.2  # the interval the shared profile was measured with
SOURCE_SUFFIXES = (".cu", ".cc", ".cpp", ".cxx", ".c", ".C", ".c++")
CACHE_LAUNCHERS = ("ccache", "sccache", "buildcache")
# Arguments that name this compile's own files: left out of the flags digest, with their value.
_OWN_FILE_FLAGS = {"-o", "-MF", "-MT", "-MQ", "-c", "--output-file", "--dependency-output"}
_ARCH = r"(?:code=\[?|-arch[= ]|--gpu-architecture[= ]|--cuda-gpu-arch=)((?:sm|compute)_\w+(?:,(?:sm|compute)_\w+)*)"
_THREADS = r"(?:^|\s)(?:--threads|-t)[= ](\d+)"
# What compilers print when a step of theirs was SIGKILLed (runner.OOM_PATTERNS has the detailed forms).
_KILL_MESSAGE = r"Killed signal terminated program|died due to signal 9|internal compiler error: Killed|^Killed$"
PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024

# The profile's columns, in the order of profile.Compile's fields (checked there).
COLUMNS = (("at", "REAL"), ("source", "TEXT"), ("output", "TEXT"), ("compiler", "TEXT"), ("flags_digest", "TEXT"),
           ("archs", "TEXT"), ("threads", "INTEGER"), ("wall_s", "REAL"), ("cpu_s", "REAL"), ("user_s", "REAL"),
           ("sys_s", "REAL"), ("tree_peak_mb", "REAL"), ("max_rss_mb", "REAL"), ("peak_procs", "INTEGER"),
           ("exit", "INTEGER"), ("signal", "INTEGER"), ("oom_kill", "INTEGER"), ("cgroup_oom_kills", "INTEGER"),
           ("cwd", "TEXT"), ("project", "TEXT"))
# A profile written before `project` existed has rows without it: the column is added on open (NULL there).
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)


def connect(db: str | os.PathLike[str]):  # type: ignore[no-untyped-def]  # sqlite3 is imported lazily (see above)
    import contextlib
    import sqlite3

    os.makedirs(os.path.dirname(os.fspath(db)) or ".", exist_ok=True)
    # Up to a build's worth of recorders finish at once; each waits its turn rather than failing.
    conn = sqlite3.connect(os.fspath(db), timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL without an fsync per compile: a profile, not a ledger
    cols = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    conn.execute(f"CREATE TABLE IF NOT EXISTS compiles (id INTEGER PRIMARY KEY, {cols})")
    have = {row[1] for row in conn.execute("PRAGMA table_info(compiles)")}
    for name, kind in COLUMNS:
        if name not in have:  # an older profile: its rows stay, read with this column empty
            with contextlib.suppress(sqlite3.OperationalError):  # another recorder added it first
                conn.execute(f"ALTER TABLE compiles ADD COLUMN {name} {kind}")
    conn.execute("CREATE INDEX IF NOT EXISTS by_source ON compiles (source, flags_digest)")
    return conn


def insert(db: str | os.PathLike[str], rows: Iterable[tuple[object, ...]]) -> None:
    """Append rows (values in COLUMNS order)."""
    conn = connect(db)
    try:
        with conn:
            conn.executemany(f"INSERT INTO compiles ({', '.join(COLUMN_NAMES)}) VALUES "
                             f"({', '.join('?' * len(COLUMNS))})", list(rows))
    finally:
        conn.close()


class Described:
    """What a compile command compiles, and how (the flags digest)."""

    __slots__ = ("archs", "compiler", "flags_digest", "output", "source", "threads")

    def __init__(self, source: str, output: str, compiler: str, flags_digest: str, archs: str, threads: int) -> None:
        self.source, self.output, self.compiler = source, output, compiler
        self.flags_digest, self.archs, self.threads = flags_digest, archs, threads

    def _key(self) -> tuple[object, ...]:
        return (self.source, self.output, self.compiler, self.flags_digest, self.archs, self.threads)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Described) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Described{self._key()!r}"


def _root(entry: str) -> tuple[str | None, str]:
    """A --strip entry: `DIR` (absolute) or `LABEL=DIR`, whose files are named `LABEL/...`."""
    if not entry.startswith("/") and "=" in entry:
        label, root = entry.split("=", 1)
        return label, root.rstrip("/")
    return None, entry.rstrip("/")


def _rel(path: str, strip: Sequence[str]) -> str:
    """`path` named as the profile names it: relative to the first root, `LABEL/...` under a labelled
    one (a dependency by its name, not its cache folder: the same across machines and pins), else `<i>/...`."""
    for i, entry in enumerate(strip):
        label, root = _root(entry)
        if path.startswith(root + "/"):
            rest = path[len(root) + 1:]
            return rest if i == 0 and label is None else f"{label or f'<{i}>'}/{rest}"
    return path


def compiled(command: str | Sequence[str], strip: Sequence[str] = ()) -> Described | None:
    """What a compile command compiles: a shell string (build.ninja's, `ninja -t compdb`'s), or the argv of
    a job ninja started (`/bin/sh -c "..."`, or the command itself once the shell exec'd it); the
    recorder's own arguments skipped. None when it compiles no source (or its quoting cannot be read)."""
    import shlex

    words = list(command) if not isinstance(command, str) else ["sh", "-c", command]
    if len(words) >= 3 and os.path.basename(words[0]) in ("sh", "bash", "dash") and words[1] == "-c":
        try:
            words = shlex.split(words[2])
        except ValueError:
            return None
    mine = next((i for i, w in enumerate(words) if os.path.basename(w) == "recorder.py"), None)
    if mine is not None and "--" in words[mine:]:
        words = words[words.index("--", mine) + 1:]
    described = describe(words, strip)
    return described if described.source else None


def describe(cmd: Sequence[str], strip: Sequence[str] = ()) -> Described:
    """What a compile command compiles, and a digest of how (stable across build folders)."""
    import hashlib
    import re

    words = list(cmd)
    # nvcc's path-mapping launcher (`python -S .../nvcc_paths.py --map ... -- nvcc ...`) stands in front of the
    # compiler it runs: the compile is that compiler's, not python's.
    if any(os.path.basename(w) == "nvcc_paths.py" for w in words[:3]) and "--" in words:
        words = words[words.index("--") + 1:]
    while len(words) > 1 and os.path.basename(words[0]) in CACHE_LAUNCHERS:
        words = words[1:]
    compiler = os.path.basename(words[0]) if words else ""
    source = next((w for w in reversed(words[1:]) if w.endswith(SOURCE_SUFFIXES) and not w.startswith("-")), "")
    output, flags, skip = "", [compiler], False
    for prev, word in zip(["", *words[1:]], words[1:], strict=False):
        if skip:
            skip = False
            if prev == "-o":
                output = word
            continue
        if word in _OWN_FILE_FLAGS:
            skip = word != "-c"  # `-c` stands alone for gcc; its value for nvcc is the source, dropped below
            continue
        if word == source or word in ("-MD", "-MMD") or word.startswith(("-MF", "-MT", "-MQ", "-Xcompiler=-M")):
            continue
        for entry in strip:
            label, root = _root(entry)
            word = word.replace(root, f"<{label}>" if label else "<root>")
        flags.append(word)
    joined = " ".join(words)
    archs = sorted({a for m in re.finditer(_ARCH, joined) for a in m.group(1).split(",") if a.startswith("sm_")})
    threads = re.search(_THREADS, " " + joined)
    return Described(_rel(source, strip), _rel(output, strip), compiler,
                     hashlib.sha256("\0".join(flags).encode()).hexdigest()[:16], ",".join(archs),
                     int(threads.group(1)) if threads else 1)


def killed_message(text: str) -> bool:
    import re

    return re.search(_KILL_MESSAGE, text, re.MULTILINE) is not None


def _children(pid: int) -> list[int]:
    try:
        kids: list[int] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                kids.extend(int(x) for x in fh.read().split())
        return kids
    except (OSError, ValueError):
        return []


def tree_rss(pid: int) -> tuple[int, int]:
    """(summed RSS bytes, processes) of `pid` and its descendants, read from /proc directly:
    a sample costs a few file reads, not a scan of every process on the host."""
    total, procs, todo = 0, 0, [pid]
    while todo:
        here = todo.pop()
        try:
            with open(f"/proc/{here}/statm") as fh:
                total += int(fh.read().split()[1]) * PAGE
            procs += 1
        except (OSError, ValueError, IndexError):
            continue
        todo.extend(_children(here))
    return total, procs


class Sampler(threading.Thread):
    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak, self.procs = 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            rss, procs = tree_rss(self.pid)
            self.peak, self.procs = max(self.peak, rss), max(self.procs, procs)
            self.done.wait(self.interval)


class Tee(threading.Thread):
    """Copies a pipe to our stderr as it comes, keeping its last 8 KB."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.tail = fd, b""
        self.start()

    def run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            os.write(2, chunk)
            self.tail = (self.tail + chunk)[-8192:]

    def finish(self) -> str:
        self.join(timeout=2.0)  # a grandchild that outlives the compile may hold the pipe: don't wait on it
        return self.tail.decode(errors="replace")


def oom_kills(group: str | os.PathLike[str]) -> int:
    """Processes the kernel's OOM killer has killed in a cgroup so far (v1 memory.oom_control, v2 memory.events)."""
    for name in ("memory.oom_control", "memory.events"):
        try:
            with open(os.path.join(os.fspath(group), name)) as fh:
                for line in fh:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            continue
    return 0


def own_cgroup(proc_self_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> str | None:
    """This process's own memory cgroup folder (v2, else v1), if it has an OOM-kill counter."""
    try:
        with open(proc_self_cgroup) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, controllers, rel = line.split(":", 2)
        if hid == "0" and controllers == "":
            folder, counter = os.path.join(root, rel.lstrip("/")), "memory.events"
        elif "memory" in controllers.split(","):
            folder, counter = os.path.join(root, "memory", rel.lstrip("/")), "memory.oom_control"
        else:
            continue
        if os.path.isfile(os.path.join(folder, counter)):
            return folder
    return None


def _oom_counter(group: str | None) -> int:
    return oom_kills(group) if group is not None else 0


def _spawn(cmd: Sequence[str], tee: bool) -> tuple[int, int | None]:
    """(pid, read end of the child's stderr pipe or None)."""
    if not tee:
        return os.posix_spawnp(cmd[0], list(cmd), os.environ), None
    read, write = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, write, 2), (os.POSIX_SPAWN_CLOSE, read), (os.POSIX_SPAWN_CLOSE, write)]
    try:
        pid = os.posix_spawnp(cmd[0], list(cmd), os.environ, file_actions=actions)
    except OSError:
        os.close(read)
        raise
    finally:
        os.close(write)
    return pid, read


def record(cmd: Sequence[str], db: str | os.PathLike[str], strip: Sequence[str] = (), interval: float = SAMPLE_S,
           project: str = "") -> int:
    """Run the compile, record it, return the exit code to pass on (128+N for signal N, as shells do).
    `project`: whose compile it is (scheduling.project_key), so that projects sharing a cache, whose
    sources have the same relative names, keep their own predictions."""
    counter = own_cgroup()
    kills0, at, t0 = _oom_counter(counter), time.time(), time.monotonic()
    # The compiler's own words name a kill of a step it ran (cc1plus under g++, cicc under nvcc), which
    # the recorder cannot see: stderr passes through a pipe and its tail is kept. Not behind a cache
    # launcher, whose server (sccache) may hold the pipe long after the compile.
    try:
        pid, err = _spawn(cmd, tee=os.path.basename(cmd[0]) not in CACHE_LAUNCHERS)
    except OSError as exc:
        print(f"build-kernel recorder: cannot run {cmd[0] if cmd else '(nothing)'}: {exc.strerror}", file=sys.stderr)
        return 127
    tail = Tee(err) if err is not None else None
    sampler = Sampler(pid, interval)
    sampler.start()
    described: list[Described] = []
    prep = threading.Thread(target=lambda: described.append(describe(cmd, strip)), daemon=True)
    prep.start()  # imports re/hashlib and digests the flags while the compiler works
    # ninja sends Ctrl-C to the whole group: the compiler gets it too, and we stay to record its end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    sampler.done.set()
    said = tail.finish() if tail is not None else ""
    sampler.join()
    prep.join()
    code = os.waitstatus_to_exitcode(status)
    sig = -code if code < 0 else 0
    kills = _oom_counter(counter) - kills0
    oom = (sig == signal.SIGKILL or code == 128 + signal.SIGKILL
           or (code != 0 and (kills > 0 or killed_message(said))))
    d = described[0]
    row = (at, d.source, d.output, d.compiler, d.flags_digest, d.archs, d.threads, round(wall, 3),
           round(usage.ru_utime + usage.ru_stime, 3), round(usage.ru_utime, 3), round(usage.ru_stime, 3),
           round(max(sampler.peak, usage.ru_maxrss * 1024) / MB, 1), round(usage.ru_maxrss / 1024, 1),
           max(sampler.procs, 1), code, sig, int(oom), kills, os.getcwd(), project)
    try:
        insert(db, [row])
    except Exception as exc:  # a profile that cannot be written must not fail the compile
        print(f"build-kernel recorder: warning: not recorded in {os.fspath(db)}: {exc}", file=sys.stderr)
    if sig == signal.SIGKILL:
        # The compiler itself was killed: it said nothing, so say it, in the form runner.oom_killed reads.
        print(f"build-kernel recorder: {d.compiler} ({d.source}) killed by signal 9", file=sys.stderr)
    return 128 + sig if sig else code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -S recorder.py --db PATH [--project KEY] [--strip [LABEL=]DIR]... -- COMMAND...",
              file=sys.stderr)
        return 2
    split = args.index("--")
    opts, cmd = args[:split], args[split + 1:]
    db, strip, interval, project = None, [], SAMPLE_S, ""
    for key, value in zip(opts[::2], opts[1::2], strict=False):
        if key == "--db":
            db = value
        elif key == "--strip":
            strip.append(value)
        elif key == "--interval":
            interval = float(value)
        elif key == "--project":
            project = value
    if db is None or not cmd:
        print("build-kernel recorder: --db PATH and a command after -- are needed", file=sys.stderr)
        return 2
    return record(cmd, db, strip, interval, project)


if __name__ == "__main__":
    sys.exit(main())
