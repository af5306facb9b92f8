"""A `serve --check` for a server with an API key: `python ask_with_key.py URL PIDS_FILE`.

A /generate without the key must be refused (401), with a wrong key too, and with the key (OPENAI_API_KEY,
which `serve` gives its checks) served (200); the server's command line (/proc/PID/cmdline of the pids in
PIDS_FILE, the double's DOUBLE_PIDS) must not hold the key. Prints each status; exits 1 on any other answer.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path


def ask(url: str, key: str | None) -> int:
    body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 2}}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/generate", data=body, headers=headers),
                                    timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def main() -> int:
    url, pids = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    key = os.environ.get("OPENAI_API_KEY", "")
    got = {"without": ask(url, None), "wrong": ask(url, "not-" + key), "with": ask(url, key)}
    leaks = [pid for pid in pids if key and key.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()]
    print(f"without key: {got['without']}, wrong key: {got['wrong']}, with key: {got['with']}, "
          f"command lines holding the key: {len(leaks)}")
    return 0 if key and got == {"without": 401, "wrong": 401, "with": 200} and not leaks else 1


if __name__ == "__main__":
    sys.exit(main())
