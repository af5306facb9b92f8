"""`python launch_with_key.py MODULE ARGS...`: `python -m MODULE ARGS... --api-key KEY`, the key never on a command line.

Run by the serve interpreter (no build_kernel there: standard library only). The key is read from the file
`$BUILD_KERNEL_API_KEY_FILE` names (under systemd: `%d/api-key`, the credential `LoadCredential=` copied in) and added
to `sys.argv` inside this process, after it started: `/proc/PID/cmdline` (what `ps` shows) keeps the words it was
started with. sglang's children start by multiprocessing's spawn, which hands them `sys.argv` through a pipe, not a
command line. sglang logs its `ServerArgs` (api_key included): this process's stdout and stderr, which every logging
handler it sets up writes to, show the key as `***`.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any, TextIO


class Redacting:
    """A text stream that writes `***` wherever the key was."""

    def __init__(self, stream: TextIO, key: str) -> None:
        self._stream, self._key = stream, key

    def write(self, text: str) -> int:
        self._stream.write(text.replace(self._key, "***"))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer...
        return getattr(self._stream, name)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: launch_with_key.py MODULE [ARGS...] (the key file in $BUILD_KERNEL_API_KEY_FILE)")
    path = os.environ.pop("BUILD_KERNEL_API_KEY_FILE", "")
    if not path:
        sys.exit("launch_with_key.py: BUILD_KERNEL_API_KEY_FILE names no key file")
    try:
        with open(path) as fh:
            key = fh.read().strip()
    except OSError as exc:
        sys.exit(f"launch_with_key.py: cannot read the API key file {path}: {exc.strerror}")
    if not key:
        sys.exit(f"launch_with_key.py: the API key file {path} is empty")
    sys.stdout, sys.stderr = Redacting(sys.stdout, key), Redacting(sys.stderr, key)
    module, args = sys.argv[1], sys.argv[2:]
    # One word: a key starting with '-' (1 in 64 of token_urlsafe's) as a word of its own is an option to argparse.
    sys.argv = [module, *args, f"--api-key={key}"]
    sys.path[0] = os.getcwd()  # as under `python -m`: the current folder first, not this script's
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
