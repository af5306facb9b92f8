"""`serve --check CMD`: the user's own acceptance checks, run against the live server after the smoke request.

E.g. a token-agreement run against a reference (bench/serving/token_agreement.py) while the very server that is
benchmarked is up: one start serves the smoke request, the checks and the bench, and the op report
(ops.py) covers the calls of all three. `{url}` in CMD becomes the server's URL; the command is split
like a shell line (shlex) and run without a shell. A check that exits non-zero fails `serve` (the server
is stopped first), naming the command and its last lines.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from build_kernel import log, process
from build_kernel.errors import ServeError

TAIL_LINES = 20


def argv(command: str, url: str) -> list[str]:
    return [word.replace("{url}", url) for word in shlex.split(command)]


def run(commands: Sequence[str], url: str, env: Mapping[str, str], log_path: Path,
        timeout: float = 3600, api_key: str | None = None) -> list[dict[str, Any]]:
    """`api_key`: the server's key, in each check's environment as OPENAI_API_KEY (as bench_serving and OpenAI
    clients read it), hidden in its output and the log."""
    from build_kernel.stages.serve.api_key import CLIENT_VAR

    secrets = (api_key,) if api_key else ()
    if api_key:
        env = {**env, CLIENT_VAR: api_key}
    done: list[dict[str, Any]] = []
    for command in commands:
        words = argv(command, url)
        t0 = time.monotonic()
        with log.step(f"check: {shlex.join(words)}"):
            proc = process.run(words, error=ServeError, what=f"the check `{command}`", env=env, log=log_path,
                               timeout=timeout, fix=f"see {log_path}", secrets=secrets)
        output = process.redact(proc.stdout + proc.stderr, secrets).splitlines()
        done.append({"command": shlex.join(words), "returncode": proc.returncode,
                     "seconds": round(time.monotonic() - t0, 1), "output_tail": output[-TAIL_LINES:]})
    return done
