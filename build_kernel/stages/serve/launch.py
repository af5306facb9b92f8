"""Start the server, wait until it generates, send one smoke request, stop it cleanly.

`/health` answers 200 as soon as the HTTP server is up; `/health_generate` runs one
token through the model, so it is the readiness signal. A server that exits while we
wait shows its exit code, the last exception its log names (not the parent's "Received sigquit
from a child process") and the server's own advice where it gives one; Ctrl-C and errors stop its
whole process group (the scheduler and detokenizer children too).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import log, process
from build_kernel.errors import ServeError

SMOKE_PROMPT = "The capital of France is"
# Health is asked at 0.1 s, then twice as long between asks up to 1 s: a warm server (a restart, a small model)
# is seen within a tenth of a second, a cold one costs the same few requests a second as before.
FIRST_POLL_S, POLL_S = 0.1, 1.0
PROGRESS_EVERY_S = 15.0
# How far back an early exit's cause is looked for: a crashed child's traceback, then the parent's shutdown.
CAUSE_LINES = 400
# A Python exception line, also inside an exception group's `  | ` frame.
_EXCEPTION = re.compile(r"^[\s|]*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (\S.*)$")
# The server's own way out, e.g. sglang: "To work around this error, add --disable-piecewise-cuda-graph to your
# launch command."
_ADVICE = re.compile(r"(?i)\b(to work around this(?: error)?,? .*|add --[\w-]+ to your launch command.*)$")


@dataclass
class Launched:
    url: str
    pid: int
    log: str
    seconds_to_healthy: float = 0.0
    smoke: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def reachable(host: str) -> str:
    """The address a client on this machine uses: a server bound to every address is on loopback."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def base_url(host: str, port: int) -> str:
    return f"http://{reachable(host)}:{port}"


def _get(url: str, timeout: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def early_exit_cause(lines: Sequence[str]) -> tuple[str, str]:
    """The last exception a server's log names (else its last line) and the server's own advice ("" if none)."""
    cause = next((f"{m[1]}: {m[2]}" for ln in reversed(lines) if (m := _EXCEPTION.match(ln))), "")
    advice = next((m[1].strip() for ln in reversed(lines) if (m := _ADVICE.search(ln.strip()))), "")
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "(no output)")
    return (cause[:300] + (" …" if len(cause) > 300 else "")) if cause else last, advice


def _early_exit(server: process.Spawned, code: int, what: str) -> ServeError:
    lines = server.tail(CAUSE_LINES)
    for line in lines[-15:]:
        log.info(f"  | {line}")
    cause, advice = early_exit_cause(lines)
    hint = f"the server's own advice: {advice} ([serve] args); see {server.log}" if advice else f"see {server.log}"
    return ServeError(f"the server exited with code {code} {what}: {cause}", hint=hint)


def wait_healthy(server: process.Spawned, url: str, timeout: float) -> float:
    """Seconds until `/health_generate` answered 200; raises if the server exits or time runs out."""
    t0 = time.monotonic()
    next_note = t0 + PROGRESS_EVERY_S
    pause = FIRST_POLL_S
    while True:
        if (code := server.poll()) is not None:
            raise _early_exit(server, code, "before it was healthy")
        if _get(f"{url}/health_generate", timeout=30) == 200:
            return time.monotonic() - t0
        now = time.monotonic()
        if now - t0 > timeout:
            raise ServeError(f"the server was not healthy after {timeout:g} s (pid {server.pid}, log {server.log})",
                             hint="raise [serve] health_timeout_s, or read the log for where it stalls")
        if now >= next_note:
            last = next((ln for ln in reversed(server.tail(5)) if ln.strip()), "")
            log.info(f"waiting for {url}/health_generate: {now - t0:.0f} s ({last.strip()[:100]})")
            next_note = now + PROGRESS_EVERY_S
        time.sleep(pause)
        pause = min(pause * 2, POLL_S)


def auth_headers(api_key: str | None) -> dict[str, str]:
    """sglang's `--api-key` wants `Authorization: Bearer KEY` on every request but /health*, /metrics."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def smoke(url: str, *, max_new_tokens: int = 32, timeout: float = 300, api_key: str | None = None) -> dict[str, Any]:
    """One greedy `/generate` (with the API key, when the server has one): the text, its token count and tokens/s."""
    body = json.dumps({"text": SMOKE_PROMPT, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
    req = urllib.request.Request(f"{url}/generate", data=body.encode(),
                                 headers={"Content-Type": "application/json", **auth_headers(api_key)})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        exc.close()  # its response's socket
        if exc.code == 401:
            raise ServeError(f"the smoke request to {url}/generate was refused: HTTP 401 (the server wants an API key "
                             f"{'other than' if api_key else 'and'} ours)",
                             hint="check [serve] api_key_file, and that nothing else serves on that port") from None
        raise ServeError(f"the smoke request to {url}/generate failed: {exc}", hint="see the server log") from None
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        raise ServeError(f"the smoke request to {url}/generate failed: {exc}", hint="see the server log") from None
    seconds = time.monotonic() - t0
    tokens = int((data.get("meta_info") or {}).get("completion_tokens") or 0)
    if not tokens or not isinstance(data.get("text"), str):
        raise ServeError(f"the smoke request got no tokens back: {json.dumps(data)[:200]}", hint="see the server log")
    return {"prompt": SMOKE_PROMPT, "text": data["text"], "tokens": tokens, "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None}


@contextmanager
def running(argv: Sequence[str], env: Mapping[str, str], *, host: str, port: int, timeout: float,
            log_path: Path, before_smoke: Callable[[], None] | None = None, api_key: str | None = None
            ) -> Iterator[tuple[process.Spawned, Launched]]:
    """The server, healthy and smoke-tested; stopped on leaving (also on Ctrl-C or an error). `before_smoke`
    runs once it is healthy, before the smoke request (a snapshot of what it has run so far). `api_key`: sent
    with the smoke request (health is open without it, as in sglang)."""
    url = base_url(host, port)
    if _get(f"{url}/health", timeout=2) != 0:
        raise ServeError(f"something already answers on {url}", hint="stop it, or set [serve] port to a free port")
    server = process.spawn(argv, error=ServeError, what="starting the server", env=env, log=log_path,
                           fix="check [serve] python (build-kernel serve --install)")
    try:
        launched = Launched(url, server.pid, str(log_path))
        with log.step(f"server pid {server.pid} on {url} (log {log_path})"):
            launched.seconds_to_healthy = round(wait_healthy(server, url, timeout), 1)
            if before_smoke is not None:
                before_smoke()
            launched.smoke = smoke(url, api_key=api_key)
        log.info(f"healthy after {launched.seconds_to_healthy} s; smoke: {launched.smoke['tokens']} tokens "
                 f"at {launched.smoke['tokens_per_s']} tokens/s: {launched.smoke['text'][:60]!r}")
        yield server, launched
    finally:
        code = server.stop()
        log.info(f"server stopped (exit {code})")


def serve_foreground(server: process.Spawned) -> None:
    """Wait for the server to end (Ctrl-C stops it); a failure exit is an error."""
    code = server.wait()
    if code:
        raise _early_exit(server, code, "while serving")
