"""Which compile cache a build uses, where it stores, and whether compiles go to a build farm.

Precedence, lowest first: default < recipe `[build]` < user config `[compile_cache]` <
environment (`BUILD_KERNEL_COMPILE_CACHE`, `BUILD_KERNEL_CACHE_URL`) < command line
(`--compile-cache`, `--cache-url`, which set those variables). The cache is a fact of the
site as much as of the recipe (where the team's Redis is), so a user file may override it;
the farm's token lives only in that file or in `BUILD_KERNEL_DIST_TOKEN`, never in a recipe.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from build_kernel import mirrors
from build_kernel.errors import BuildError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOOLS = ("none", "ccache", "sccache")
DISTS = ("none", "sccache-dist")
ENV_TOOL, ENV_URL = "BUILD_KERNEL_COMPILE_CACHE", "BUILD_KERNEL_CACHE_URL"
# Which of those variables the command line set (`VAR=--option,…`; the CLI writes it): named as such in messages.
FROM_COMMAND_LINE = "BUILD_KERNEL_FROM_COMMAND_LINE"
ENV_SCHEDULER, ENV_TOKEN = "BUILD_KERNEL_DIST_SCHEDULER", "BUILD_KERNEL_DIST_TOKEN"
USER_TABLE = "compile_cache"
_USER_KEYS = {"tool": str, "url": str, "dist": str, "scheduler": str, "token": str}
# Long enough for a server across a data centre, short enough that a dead one costs nothing.
CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Storage:
    """Where compiled objects are shared: a scheme and what sccache/ccache need from the URL."""

    kind: str  # "local" (the tool's own folder), "folder", "redis", "memcached", "s3", "gcs", "http"
    url: str
    host: str = ""
    port: int = 0
    path: str = ""  # folder path, bucket key prefix, or redis db
    bucket: str = ""

    @property
    def shared(self) -> bool:
        return self.kind != "local"

    def describe(self) -> str:
        from build_kernel.process import redact

        return "local folder of the tool" if self.kind == "local" else redact(self.url)


_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "memcached": 11211, "tcp": 11211, "http": 80, "https": 443}


def parse_url(url: str, where: str) -> Storage:
    """`redis://[user:pw@]host[:port][/db]`, `memcached://host[:port]`, `s3://bucket/prefix`,
    `gs://bucket/prefix`, `http(s)://…` (ccache), or a folder (absolute path or file://)."""
    if not url:
        return Storage("local", "")
    if url.startswith("/") or url.startswith("file://"):
        return Storage("folder", url, path=url[len("file://"):] if url.startswith("file://") else url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        raise BuildError(f"{where}: cache_url {url!r} has a bad port", hint="write e.g. redis://cache.internal:6379") from None
    if scheme in ("redis", "rediss") and parts.hostname:
        return Storage("redis", url, parts.hostname, port, parts.path.strip("/"))
    if scheme in ("memcached", "tcp") and parts.hostname:
        return Storage("memcached", url, parts.hostname, port)
    if scheme in ("s3", "gs") and parts.hostname:
        return Storage("s3" if scheme == "s3" else "gcs", url, path=parts.path.strip("/"), bucket=parts.hostname)
    if scheme in ("http", "https") and parts.hostname:
        return Storage("http", url, parts.hostname, port)
    raise BuildError(f"{where}: cache_url {url!r} is not a cache location I know",
                     hint="use redis://host:6379, memcached://host:11211, s3://bucket/prefix, gs://bucket/prefix "
                          "or an absolute folder path")


def redis_auth(storage: Storage) -> tuple[str, str]:
    parts = urlsplit(storage.url)
    return unquote(parts.username or ""), unquote(parts.password or "")


def unreachable(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why host:port does not accept a TCP connection within `timeout`, or None when it does."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def storage_problem(storage: Storage) -> str | None:
    """Why the shared storage cannot be used right now (checked before the build), or None.
    Buckets are not probed here: sccache checks them itself when its server starts."""
    if storage.kind == "folder":
        folder = Path(storage.path)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / ".build-kernel-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            return f"folder {folder} is not writable ({exc.strerror})"
        return None
    if storage.host and storage.port:
        why = unreachable(storage.host, storage.port)
        return f"{storage.describe()} is unreachable ({why})" if why else None
    return None


@dataclass(frozen=True)
class Settings:
    tool: str = "none"
    url: str = ""
    dist: str = "none"
    scheduler: str = ""
    token: str = field(default="", repr=False)
    origin: Mapping[str, str] = field(default_factory=dict)  # setting -> where it was set
    config_file: Path | None = None

    @property
    def storage(self) -> Storage:
        return parse_url(self.url, self.origin.get("url", "recipe"))

    def to_dict(self) -> dict[str, Any]:
        from build_kernel.process import redact

        return {"tool": self.tool, "url": redact(self.url), "dist": self.dist, "scheduler": self.scheduler,
                "token": "***" if self.token else "", "origin": dict(self.origin),
                "config_file": str(self.config_file) if self.config_file else None}


def _user_table(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path}: invalid TOML: {exc}", hint=f"fix the syntax of the user config file {path}") from None
    table = data.get(USER_TABLE, {})
    if not isinstance(table, dict):
        raise BuildError(f"{path}: [{USER_TABLE}] must be a table", hint='write e.g. [compile_cache] url = "redis://cache:6379"')
    for key, value in table.items():
        if key not in _USER_KEYS:
            raise BuildError(f"{path}: [{USER_TABLE}] {key}: unknown key", hint=f"use {', '.join(_USER_KEYS)}")
        if not isinstance(value, str):
            raise BuildError(f"{path}: [{USER_TABLE}] {key} must be a string", hint=f'write e.g. {key} = "..."')
    return dict(table)


def resolve(recipe_tool: str, recipe_url: str, recipe_dist: str, recipe_scheduler: str,
            env: Mapping[str, str]) -> Settings:
    """The settings in force for one build, each with where it was set."""
    path = mirrors.default_config_file(env)
    user = _user_table(path)
    values = {"tool": recipe_tool, "url": recipe_url, "dist": recipe_dist or "none", "scheduler": recipe_scheduler,
              "token": ""}
    origin = {**{k: "recipe" for k in values}, "token": "unset"}  # a recipe never holds the token
    for key, value in user.items():
        values[key], origin[key] = value, f"user config {path}"
    given = dict(item.partition("=")[::2] for item in env.get(FROM_COMMAND_LINE, "").split(",") if item)
    for key, var in (("tool", ENV_TOOL), ("url", ENV_URL), ("scheduler", ENV_SCHEDULER), ("token", ENV_TOKEN)):
        if env.get(var):
            values[key], origin[key] = env[var], f"command line {given[var]}" if var in given else f"environment {var}"
    settings = Settings(values["tool"], values["url"], values["dist"], values["scheduler"], values["token"], origin,
                        path if user else None)
    _check(settings, path)
    return settings


def _check(s: Settings, path: Path) -> None:
    if s.tool not in TOOLS:
        raise BuildError(f"{s.origin['tool']}: compile cache {s.tool!r} is not one of {', '.join(TOOLS)}",
                         hint='e.g. compile_cache = "sccache"')
    if s.dist not in DISTS:
        raise BuildError(f"{s.origin['dist']}: dist {s.dist!r} is not one of {', '.join(DISTS)}",
                         hint='e.g. dist = "sccache-dist"')
    if s.dist == "sccache-dist":
        if s.tool != "sccache":
            raise BuildError(f"{s.origin['dist']}: dist = \"sccache-dist\" needs compile_cache = \"sccache\" "
                             f"(it is {s.tool!r}, from {s.origin['tool']})", hint='set compile_cache = "sccache"')
        if not s.scheduler:
            raise BuildError("dist = \"sccache-dist\" has no scheduler URL",
                             hint=f"set [build] dist_scheduler or scheduler in [{USER_TABLE}] of the user config {path}")
    s.storage  # noqa: B018 - parsing is the check: a bad URL fails before the build, not in it
    if s.tool == "ccache" and s.storage.kind in ("s3", "gcs", "memcached"):
        raise BuildError(f"{s.origin['url']}: ccache cannot store in {s.storage.kind} ({s.url})",
                         hint="use redis://, http:// or a folder with ccache, or compile_cache = \"sccache\"")
