"""The server's API key: a file readable by its owner alone, never a command-line word, an `Environment=` or a log line.

`[serve] api_key_file` names it (any host but loopback needs one: the recipe rules refuse it otherwise).
`serve --install` makes it when it is missing (32 random bytes, URL-safe, mode 0600, written whole). The unit hands
it to the server as a systemd credential (`LoadCredential=api-key:FILE`); `serve --launch` names the file in the
environment (`BUILD_KERNEL_API_KEY_FILE`, a path, not the key). The server runs through `keyed/launch_with_key.py`,
which reads the file and adds `--api-key KEY` to sglang's arguments inside its own process: `ps`, `/proc/PID/cmdline`
and `systemctl show` never see it, and that process's output hides it (sglang logs its `ServerArgs`, api_key
included). The smoke request, `--check` commands and `--bench` send it (`Authorization: Bearer`; bench_serving and
the checks read `OPENAI_API_KEY` from their environment).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
import tempfile
from pathlib import Path

from build_kernel.errors import ServeError

FILE_VAR = "BUILD_KERNEL_API_KEY_FILE"  # the path of the key, for the wrapper
CLIENT_VAR = "OPENAI_API_KEY"  # what sglang.bench_serving (and OpenAI clients) read
CREDENTIAL = "api-key"  # the systemd credential's name: $CREDENTIALS_DIRECTORY/api-key
WRAPPER = Path(__file__).parent / "keyed" / "launch_with_key.py"


def loopback(host: str) -> bool:
    """Only this machine can reach it: 127.0.0.0/8, ::1 or localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ensure(path: Path) -> bool:
    """Make the key file if it is missing (True when made); an existing one must be its owner's alone."""
    if path.exists():
        check(path)
        return False
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp: mode 0600
    except OSError as exc:
        raise ServeError(f"cannot make the API key file {path}: {exc.strerror}",
                         hint="run `serve --install` as a user that may write there (root for /etc/credstore), or "
                              "set [serve] api_key_file to a folder you own") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def check(path: Path) -> None:
    """The file exists, is a file and no one but its owner may read it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ServeError(f"no API key file {path} ([serve] api_key_file)",
                         hint="build-kernel serve --install makes one") from None
    except PermissionError:
        raise ServeError(f"cannot read the API key file {path}: permission denied",
                         hint="run as its owner (root for /etc/credstore)") from None
    if not stat.S_ISREG(st.st_mode):
        raise ServeError(f"the API key file {path} is not a file", hint="point [serve] api_key_file at a file")
    if st.st_mode & 0o077:
        raise ServeError(f"the API key file {path} is readable by others (mode {stat.filemode(st.st_mode)})",
                         hint=f"chmod 600 {path}")


def read(path: Path) -> str:
    check(path)
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise ServeError(f"cannot read the API key file {path}: {exc.strerror}", hint="run as its owner") from None
    if not key or any(c.isspace() for c in key):
        raise ServeError(f"the API key file {path} holds no key (empty, or more than one word)",
                         hint="delete it and run build-kernel serve --install to make a new one")
    return key
