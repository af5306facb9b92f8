"""How long the tool waits on a network peer, and what it retries: one place, read from the plan's environment.

- `timeout_s`: how long a server may stay silent (to connect, or between bytes) before a call of the tool's
  own fails: the index pages it reads (stages/builder/wheelindex.py), `git ls-remote`, and git's HTTP
  transfers (`http.lowSpeedTime`). 15 s by default, pip's own `--timeout`; `BUILD_KERNEL_NETWORK_TIMEOUT`.
- `fetch_cap_s`: the most one git fetch may take in all. git has no timeout of its own for `git://` and
  ssh (a server that accepts and never answers holds it forever); 30 minutes by default, far above the
  partial fetches of the largest recipe; `BUILD_KERNEL_FETCH_TIMEOUT`.

Retries: pip retries by itself (`--retries`, 5 by default: a refused or reset connection, a read timeout,
HTTP 500/502/503/520/527) and is run with the user's own pip settings (`PIP_TIMEOUT`, `PIP_RETRIES`, pip.conf
pass through). git retries no fetch; the tool retries one once when the connection broke mid-transfer
(`FETCH_ATTEMPTS`): a fetch writes its objects and refs only once its pack is whole, so a broken one left
nothing, and the partial fetches are small. Not a refusal, a missing repository or a timeout: those would
fail the same way again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from build_kernel.errors import RecipeError

TIMEOUT_ENV = "BUILD_KERNEL_NETWORK_TIMEOUT"
FETCH_TIMEOUT_ENV = "BUILD_KERNEL_FETCH_TIMEOUT"
FETCH_ATTEMPTS = 2
# git's words for a transfer that started and broke (not a server that refused or was never reached).
BROKEN_TRANSFER = ("early eof", "the remote end hung up unexpectedly", "connection reset", "unexpected disconnect",
                   "index-pack failed", "fetch-pack: invalid index-pack output", "transfer closed with",
                   "rpc failed", "protocol error: bad pack header")


@dataclass(frozen=True)
class Settings:
    timeout_s: float = 15.0
    fetch_cap_s: float = 1800.0

    def git_options(self) -> list[str]:
        """git's own stall timeout for HTTP(S) transfers: fail when under 1 byte/s for `timeout_s`."""
        return ["-c", "http.lowSpeedLimit=1", "-c", f"http.lowSpeedTime={max(1, math.ceil(self.timeout_s))}"]

    @property
    def words(self) -> str:
        """Where a user changes them, for messages."""
        return f"{TIMEOUT_ENV} / {FETCH_TIMEOUT_ENV}"


DEFAULT = Settings()


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise RecipeError([f"environment {name}={text!r}: not a number of seconds (set a number above 0, e.g. "
                           f"{name}={default:g}, or unset it)"])
    return value


def settings(env: Mapping[str, str]) -> Settings:
    """The timeouts in force: the environment's, else the defaults."""
    return Settings(_seconds(env, TIMEOUT_ENV, DEFAULT.timeout_s), _seconds(env, FETCH_TIMEOUT_ENV, DEFAULT.fetch_cap_s))


def broken_transfer(said: str) -> bool:
    """git's message says the connection broke mid-transfer (worth one more attempt)."""
    low = said.lower()
    return any(s in low for s in BROKEN_TRANSFER)
