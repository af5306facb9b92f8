"""A network that fails (issue 68 item 4): real servers made to fail, the real CLI against them.

    python bench/faults/network.py [--out bench/faults/results/network.json]

Servers, all real and on this machine: `git daemon` (upstream repositories made here), pypiserver, and a small
HTTP server standing in for a torch wheel index (its pages and wheels are real; only its faults are scripted).
Faults are made deterministic by a TCP proxy in front of a server, never by timing: it cuts a connection after
a byte count (measured on an uncut run of the same transfer, then halved), it kills pypiserver once it has passed
a byte count of an upload, or it accepts and never answers. A timeout is set small through the tool's one place
for it (build_kernel/network.py: BUILD_KERNEL_NETWORK_TIMEOUT, BUILD_KERNEL_FETCH_TIMEOUT; pip's own PIP_TIMEOUT
and PIP_RETRIES).

Each case: the command, its error line and exit code, whether what the tool keeps (the mirror cache, the index,
the recipe's lock) is as it was (lock files of the tool's own file locks excepted: they hold no data), and whether
the same command succeeds once the server is back. tests/test_network_faults.py runs the same cases and asserts
the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.test_publish import make_wheel  # a real small wheel, as the suite makes them
from tests.test_wheel_pins import LocalIndex  # a real PEP 503 folder with real wheels

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2026-01-02T00:00:00+00:00",
            "GIT_COMMITTER_DATE": "2026-01-02T00:00:00+00:00"}
TORCH = "2.11.0+cu130"


# ---- servers ----------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing answered on port {port} in {timeout:g} s")


@contextlib.contextmanager
def started(argv: list[str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of a server's port. `mode`: "pass" (bytes through, counted per
    connection), "cut" (the next `cuts` connections are cut with a reset once `budget` bytes went through in
    `direction`, after `on_cut` ran), "silent" (accepts, reads nothing, answers nothing)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.mode, self.direction, self.budget, self.cuts = "pass", "down", 0, 0
        self.on_cut: Callable[[], None] | None = None
        self.counts: list[dict[str, int]] = []  # per connection: bytes "up" (to the server) and "down"
        self.held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.port = int(self._server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def set(self, mode: str, *, direction: str = "down", budget: int = 0, cuts: int = 0,
            on_cut: Callable[[], None] | None = None) -> None:
        with self._lock:
            self.mode, self.direction, self.budget, self.cuts, self.on_cut = mode, direction, budget, cuts, on_cut
            self.counts = []

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            mode = self.mode
            count = {"up": 0, "down": 0}
            self.counts.append(count)
        if mode == "silent":
            self.held.append(client)  # open, never read, never answered
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        done = threading.Event()
        pumps = [threading.Thread(target=self._pump, args=(src, dst, way, count, client, upstream, done), daemon=True)
                 for src, dst, way in ((client, upstream, "up"), (upstream, client, "down"))]
        for pump in pumps:
            pump.start()
        for pump in pumps:
            pump.join()
        client.close()
        upstream.close()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str, count: dict[str, int], client: socket.socket,
              upstream: socket.socket, done: threading.Event) -> None:
        try:
            while not done.is_set():
                data = src.recv(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                with self._lock:
                    cut = self.mode == "cut" and way == self.direction and self.cuts > 0 \
                        and count[way] + len(data) >= self.budget
                    if cut:
                        self.cuts -= 1
                        data = data[: self.budget - count[way]]
                    count[way] += len(data)
                dst.sendall(data)
                if cut:
                    if self.on_cut is not None:
                        self.on_cut()
                    done.set()
                    for sock in (client, upstream):  # a reset, as a dead peer's kernel sends
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                            sock.shutdown(socket.SHUT_RDWR)  # wakes the other direction's recv
                    return
        except OSError:
            done.set()

    def close(self) -> None:
        self._server.close()
        for sock in self.held:
            sock.close()


class ScriptedIndex:
    """A package index over HTTP whose answers follow a script, request by request (the last one repeats):
    "ok" (the real folder index), "500", "garbage" (200 with bytes that are no page), "not-http" (bytes that are
    no HTTP response), "cut" (a page cut off before its Content-Length), "silent" (never answers)."""

    def __init__(self, folder: Path) -> None:
        self.script, self.served = ["ok"], 0
        self.stop = threading.Event()
        index = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                index.served += 1
                what = index.script[min(index.served, len(index.script)) - 1]
                if what == "ok":
                    super().do_GET()
                elif what == "500":
                    self.send_error(500, "Internal Server Error")
                elif what == "garbage":
                    body = random.Random(68).randbytes(2048)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif what == "not-http":
                    self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                    self.close_connection = True
                elif what == "cut":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    self.wfile.write(b"<!DOCTYPE html>\n<html><body>\n")
                    self.close_connection = True
                else:  # silent: the request was read; no answer comes until the server stops
                    index.stop.wait()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, *script: str) -> None:
        self.script, self.served = list(script), 0

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


# ---- what the tool keeps ----------------------------------------------------------------------------------

def snapshot(folder: Path) -> str:
    """A digest of every file under `folder` (names and bytes), the tool's own lock files left out."""
    digest = hashlib.sha256()
    if folder.exists():
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".lock")):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "build_kernel", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, check=False, timeout=300)


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "warning:"))]
    return errors[-1] if errors else (proc.stderr.strip().splitlines() or [""])[-1]


def base_env(work: Path, **extra: str) -> dict[str, str]:
    """This process's environment without the user's pip, index and network settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "TWINE_", "BUILD_KERNEL_", "GIT_CONFIG"))}
    return {**env, "NO_COLOR": "1", "COLUMNS": "200", "HOME": str(work / "home"), "PIP_CONFIG_FILE": os.devnull,
            "BUILD_KERNEL_INDEXES": str(work / "no-indexes.toml"), "XDG_CONFIG_HOME": str(work / "config"),
            "GIT_CONFIG_NOSYSTEM": "1", **extra}


@dataclass
class Row:
    case: str
    command: str
    exit_code: int
    error: str
    kept_unchanged: bool
    rerun_exit_code: int
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def rerun_ok(self) -> bool:
        return self.rerun_exit_code == 0

    @property
    def nothing_half_written(self) -> bool:
        """What the tool keeps is as it was, or (a fetch cut during the files' transfer) holds only whole objects:
        the commit fetched before the cut, no part of the cut pack."""
        return self.kept_unchanged or (self.notes.get("half_written") == [] and bool(self.notes.get("commit_kept_whole")))


# ---- git ----------------------------------------------------------------------------------------------------

NEWFILE_PATCH = textwrap.dedent("""\
    Description: add a file
    Origin: vendor, build-kernel faults study
    Forwarded: not-needed
    Last-Update: 2026-12-07
    ---
    diff --git a/added.txt b/added.txt
    new file mode 100644
    --- /dev/null
    +++ b/added.txt
    @@ -0,0 +1 @@
    +added by a patch
    """)


class GitWorld:
    """An upstream repository served by `git daemon` behind a proxy, and a project whose recipe pins it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._measured: dict[tuple[str, str | None], dict[str, int]] = {}
        base = work / "served"
        self.repo = base / "upstream.git"
        src = work / "upstream-src"
        self.commits = [self._commit(src, i) for i in range(2)]
        subprocess.run(["git", "clone", "-q", "--bare", str(src), str(self.repo)], check=True, env={**os.environ, **IDENTITY})
        for key in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
            subprocess.run(["git", "-C", str(self.repo), "config", key, "true"], check=True)
        self.port = free_port()
        self._daemon = started(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={base}",
                                "--listen=127.0.0.1", f"--port={self.port}", str(base)], self.port, work / "daemon.log")
        self._daemon.__enter__()
        self.proxy = Proxy(self.port)
        self.url = f"git://127.0.0.1:{self.proxy.port}/upstream.git"
        from build_kernel.series import write_lock

        self.project = work / "project"
        series = self.project / "patches" / "s" / "v1"
        series.mkdir(parents=True)
        (series / "0001-add.patch").write_text(NEWFILE_PATCH)
        (series / "series").write_text("0001-add.patch\n")
        write_lock(series)
        (self.project / "recipes").mkdir()

    def _commit(self, src: Path, i: int) -> str:
        env = {**os.environ, **IDENTITY}
        if not (src / ".git").exists():
            subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True, env=env)
        pkg = src / "pkg"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "CMakeLists.txt").write_text(f"project(up{i})\n")
        # Bytes that do not compress: a transfer long enough to be cut in the middle.
        (pkg / "data.bin").write_bytes(random.Random(i).randbytes(300_000))
        subprocess.run(["git", "-C", str(src), "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", str(src), "commit", "-q", "--no-gpg-sign", "-m", f"c{i}"], check=True, env=env)
        return subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()

    def recipe(self, commit: str) -> Path:
        path = self.project / "recipes" / f"r-{commit[:8]}.toml"
        path.write_text(f'[source]\nrepo = "{self.url}"\ncommit = "{commit}"\nsubdir = "pkg"\n'
                        '[patches]\nseries = "s"\nversion = "v1"\n[build]\narch = ["12.0a"]\n')
        return path

    def fetch(self, cache: Path, commit: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return cli("--cache-dir", str(cache), "fetch", "--recipe", str(self.recipe(commit)),
                   env=base_env(self.work, **extra), cwd=self.work)

    def half_of(self, commit: str, before: str | None, which: str) -> int:
        """Half the bytes the server sends on one connection of fetching `commit` (into a mirror holding
        `before`), measured on an uncut run in a scratch cache. `which`: "commit" (the first: the commit and its
        trees), "files" (the largest: the pack of its files; the smaller ones pass under that budget)."""
        if (commit, before) in self._measured:
            return self._measured[(commit, before)][which]
        scratch = Path(tempfile.mkdtemp(dir=self.work))
        if before:
            self.fetch(scratch, before)
        self.proxy.set("pass")
        proc = self.fetch(scratch, commit)
        assert proc.returncode == 0, proc.stderr
        sizes = [c["down"] for c in self.proxy.counts]
        self._measured[(commit, before)] = {"commit": sizes[0] // 2, "files": max(sizes) // 2}
        return self._measured[(commit, before)][which]

    def close(self) -> None:
        self.proxy.close()
        self._daemon.__exit__(None, None, None)


def leftovers(mirrors: Path) -> list[str]:
    """Half-written files inside a mirror: a pack received in part, a lock git left."""
    return sorted(str(p.relative_to(mirrors)) for p in mirrors.rglob("*") if p.is_file() and
                  (p.name.startswith(("tmp_", "incoming-")) or (p.name.endswith(".lock") and ".git/" in str(p))))


def git_cut_every_attempt(world: GitWorld, which: str) -> Row:
    """A mirror holds the first commit; the second is fetched while the server dies mid-transfer (during the
    commit's transfer, or during its files'), on the first attempt and on the retry: one error line, nothing
    half-written (during the commit's: the mirror as it was; during the files': the whole commit kept, no part of
    the files' pack), and the rerun (server back) fetches it."""
    first, second = world.commits
    cache = world.work / f"cache-cut-{which}"
    assert world.fetch(cache, first).returncode == 0
    budget = world.half_of(second, first, which)
    before = snapshot(cache / "mirrors")
    world.proxy.set("cut", budget=budget, cuts=99)
    proc = world.fetch(cache, second)
    kept = snapshot(cache / "mirrors") == before
    left = leftovers(cache / "mirrors")
    pinned = any((cache / "mirrors").glob(f"*.git/refs/build-kernel/pins/{second}"))
    cuts = sum(1 for c in world.proxy.counts if c["down"] == budget)
    world.proxy.set("pass")
    rerun = world.fetch(cache, second)
    return Row(f"git remote cut mid-fetch, during the {which}' transfer (every attempt; mirror exists)".replace(
               "commit'", "commit's"), "build-kernel fetch --recipe R", proc.returncode, error_line(proc), kept,
               rerun.returncode, {"cut_after_bytes": budget, "connections_cut": cuts, "half_written": left,
                                  "commit_kept_whole": pinned})


def git_cut_once(world: GitWorld) -> Row:
    """The transfer breaks once: the tool's one retry fetches it, with a warning."""
    first, second = world.commits
    cache = world.work / "cache-once"
    assert world.fetch(cache, first).returncode == 0
    budget = world.half_of(second, first, "files")
    world.proxy.set("cut", budget=budget, cuts=1)
    proc = world.fetch(cache, second)
    world.proxy.set("pass")
    return Row("git remote cut mid-fetch (once; the retry)", "build-kernel fetch --recipe R", proc.returncode,
               error_line(proc), True, proc.returncode, {"cut_after_bytes": budget, "retried": "trying once more" in proc.stderr})


def git_cut_first_fetch(world: GitWorld) -> Row:
    """No mirror yet, and the server dies mid-transfer: no mirror is left behind, the rerun makes it."""
    _, second = world.commits
    cache = world.work / "cache-first"
    budget = world.half_of(second, None, "files")
    world.proxy.set("cut", budget=budget, cuts=99)
    proc = world.fetch(cache, second)
    kept = not any((cache / "mirrors").glob("*.git"))  # only the file lock beside where it would be
    world.proxy.set("pass")
    rerun = world.fetch(cache, second)
    return Row("git remote cut mid-fetch (first fetch; no mirror yet)", "build-kernel fetch --recipe R",
               proc.returncode, error_line(proc), kept, rerun.returncode, {"cut_after_bytes": budget})


def git_silent(world: GitWorld, cap_s: float = 2.0) -> Row:
    """A server that accepts and never answers: the fetch timeout (set small here), not a hang."""
    first, _ = world.commits
    cache = world.work / "cache-silent"
    world.proxy.set("silent")
    t0 = time.monotonic()
    proc = world.fetch(cache, first, BUILD_KERNEL_FETCH_TIMEOUT=f"{cap_s:g}")
    seconds = time.monotonic() - t0
    kept = not any((cache / "mirrors").glob("*.git"))
    world.proxy.set("pass")
    rerun = world.fetch(cache, first)
    return Row("git server accepts and never answers", f"BUILD_KERNEL_FETCH_TIMEOUT={cap_s:g} build-kernel fetch",
               proc.returncode, error_line(proc), kept, rerun.returncode, {"seconds": round(seconds, 1)})


# ---- pypiserver -----------------------------------------------------------------------------------------------

class PyPIWorld:
    """A real pypiserver (anonymous uploads) over a packages folder, behind a proxy; killed and started again."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.packages = work / "packages"
        self.packages.mkdir(parents=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self._ctx: Any = None
        self.start()
        assert self.port is not None
        self.proxy = Proxy(self.port)
        self.url = f"http://127.0.0.1:{self.proxy.port}/"

    def start(self) -> None:
        self.port = free_port()
        self._ctx = started([sys.executable, "-m", "pypiserver", "run", "-p", str(self.port), "-i", "127.0.0.1",
                             "-a", ".", "-P", ".", "--disable-fallback", str(self.packages)], self.port,
                            self.work / "pypiserver.log")
        self.proc = self._ctx.__enter__()
        if hasattr(self, "proxy"):
            self.proxy.target = self.port

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL, mid-upload
        self.proc.wait()

    def publish(self, wheel: Path) -> subprocess.CompletedProcess[str]:
        return cli("publish", str(wheel), "--to", self.url, env=base_env(self.work, TWINE_USERNAME="u",
                                                                          TWINE_PASSWORD="p"), cwd=self.work)

    def close(self) -> None:
        self.proxy.close()
        self._ctx.__exit__(None, None, None)


def pypiserver_killed_mid_upload(world: PyPIWorld) -> Row:
    """pypiserver is SIGKILLed once the upload has sent 150 kB of a 400 kB wheel: one error line, nothing on the
    index, and the rerun (pypiserver started again over the same folder) uploads and installs it back."""
    wheel = make_wheel(world.work / "dist", "bk-faults", "0.1.0+fault", value="after the fault",
                       extra={"bk_faults/data.txt": random.Random(5).randbytes(300_000).hex()[:400_000]})
    before = snapshot(world.packages)
    world.proxy.set("cut", direction="up", budget=150_000, cuts=1, on_cut=world.kill)
    proc = world.publish(wheel)
    kept = snapshot(world.packages) == before
    world.start()
    world.proxy.set("pass")
    rerun = world.publish(wheel)
    on_index = (world.packages / wheel.name).is_file() and (world.packages / wheel.name).read_bytes() == wheel.read_bytes()
    return Row("pypiserver killed mid-upload", "build-kernel publish WHEEL --to URL", proc.returncode,
               error_line(proc), kept, rerun.returncode, {"wheel_bytes": wheel.stat().st_size,
                                                          "killed_after_upload_bytes": 150_000, "on_index_after_rerun": on_index})


# ---- the torch index: the tool's own page reads, and pip's -------------------------------------------------------

class IndexWorld:
    """A recipe whose torch is pinned from an index served here, and `build-kernel lock` against it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        folder = LocalIndex(work / "index")
        folder.publish(TORCH)
        self.server = ScriptedIndex(work / "index")
        demo = (ROOT / "recipes" / "demo.toml").read_text()
        self.project = work / "project"
        (self.project / "recipes").mkdir(parents=True)
        (self.project / "patches").symlink_to(ROOT / "patches")
        self.recipe = self.project / "recipes" / "pinned.toml"
        self.recipe.write_text(demo.replace('torch = "existing"', f'torch = "{TORCH}"\ntorch_index = "{self.server.url}"'))
        self.lock = self.recipe.with_suffix(".lock")

    def lock_cmd(self, **extra: str) -> subprocess.CompletedProcess[str]:
        return cli("--cache-dir", str(self.work / "cache"), "lock", "--recipe", str(self.recipe),
                   env=base_env(self.work, **extra), cwd=self.work)

    def case(self, name: str, script: list[str], note: str, *, rerun: bool = True, **extra: str) -> Row:
        self.lock.unlink(missing_ok=True)
        self.server.answer(*script)
        t0 = time.monotonic()
        proc = self.lock_cmd(**extra)
        seconds = time.monotonic() - t0
        requests = self.server.served
        kept = not self.lock.exists()
        self.server.answer("ok")
        again = self.lock_cmd().returncode if rerun else -1
        return Row(name, f"{' '.join(f'{k}={v}' for k, v in extra.items())} build-kernel lock --recipe R".strip(),
                   proc.returncode, error_line(proc), kept, again,
                   {"answers": script, "requests": requests, "seconds": round(seconds, 1), "what": note})

    def close(self) -> None:
        self.server.close()


def index_cases(world: IndexWorld) -> list[Row]:
    pip = {"PIP_RETRIES": "2", "PIP_TIMEOUT": "1"}
    return [
        world.case("torch index answers 500", ["500"], "the tool's own read of the index page"),
        world.case("torch index answers garbage (200, random bytes)", ["garbage"], "the tool's own read"),
        world.case("torch index is no HTTP server", ["not-http"], "the tool's own read"),
        world.case("torch index page cut before its length", ["cut"], "the tool's own read"),
        world.case("torch index accepts and never answers", ["silent"], "the tool's own read",
                   BUILD_KERNEL_NETWORK_TIMEOUT="1"),
        world.case("torch index answers 500 to pip", ["ok", "500"], "the page read, then pip (which retries)", **pip),
        world.case("torch index never answers pip", ["ok", "silent"], "the page read, then pip (which retries)", **pip),
    ]


# ---- the study --------------------------------------------------------------------------------------------------

def run_all(work: Path) -> list[Row]:
    rows: list[Row] = []
    git_world = GitWorld(work / "git")
    try:
        rows += [git_cut_every_attempt(git_world, "commit"), git_cut_every_attempt(git_world, "files"),
                 git_cut_once(git_world), git_cut_first_fetch(git_world), git_silent(git_world)]
    finally:
        git_world.close()
    pypi_world = PyPIWorld(work / "pypi")
    try:
        rows.append(pypiserver_killed_mid_upload(pypi_world))
    finally:
        pypi_world.close()
    index_world = IndexWorld(work / "index")
    try:
        rows += index_cases(index_world)
    finally:
        index_world.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "faults" / "results" / "network.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bk-net-faults-") as tmp:
        rows = run_all(Path(tmp))
        text = json.dumps({"command": "python bench/faults/network.py", "cases": [
            {"case": r.case, "command": r.command, "exit_code": r.exit_code,
             "error": re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", r.error.replace(tmp, "TMP")),
             "kept_unchanged": r.kept_unchanged, "nothing_half_written": r.nothing_half_written,
             "rerun_ok": r.rerun_ok, **{k: v for k, v in r.notes.items()}} for r in rows]}, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text.replace(str(Path(tempfile.gettempdir())), "TMP") + "\n")
    for r in rows:
        print(f"{r.exit_code:>3} kept={r.kept_unchanged!s:5} rerun={r.rerun_ok!s:5} {r.case}: {r.error}")
    bad = [r for r in rows if not (r.nothing_half_written and r.rerun_ok)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
