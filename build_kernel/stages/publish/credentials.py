"""Credentials for a publish target, and keeping them out of every message and log.

Where they come from, most specific first: the target's own variables
(`BUILD_KERNEL_INDEX_<NAME>_USERNAME/_PASSWORD`), a `user:pass@` in the URL, then
`TWINE_USERNAME/TWINE_PASSWORD`, then the netrc file (`$NETRC`, else `~/.netrc`: the `machine`
of the upload URL's host), then keyring (service: the upload URL, as twine asks it); a target of
`~/.pypirc` is left to twine, which reads it. So the install-back, which pip runs with its
configuration switched off, gets the same credentials as the upload. They travel to twine and pip
in the environment, never on a command line, and every message and log line publish writes passes
through `redact` (via `Target.redact`).
"""

from __future__ import annotations

import contextlib
import netrc
import re
from collections.abc import Mapping, Sequence
from configparser import ConfigParser
from configparser import Error as ConfigParserError
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from build_kernel import log, process
from build_kernel.errors import PublishError

DEFAULT_SOURCE = "TWINE_USERNAME/TWINE_PASSWORD (or keyring / ~/.pypirc)"


def secret_forms(secrets: Sequence[str]) -> tuple[str, ...]:
    """Each secret as itself and percent-encoded (as it appears inside a URL)."""
    return tuple(dict.fromkeys(form for s in secrets if s for form in (s, quote(s, safe=""))))


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """Hide `user:pass@` in URLs and every known secret (also percent-encoded)."""
    return process.redact(text, secret_forms(secrets))


_WARNED: set[str] = set()  # each short secret is warned of once a run, however often the target is resolved


def warn_short(named: Mapping[str, str | None]) -> None:
    """A one-line warning for each secret shorter than process.MIN_SECRET, naming where it came from (never its
    value): it is hidden only where it stands alone, since replacing it inside words would garble every message and
    show it."""
    for where, secret in named.items():
        if secret and len(secret) < process.MIN_SECRET and where not in _WARNED:
            _WARNED.add(where)
            log.warn(f"{where} is shorter than {process.MIN_SECRET} characters: messages and logs hide it only where "
                     "it stands alone, not inside other words (use a longer password or an API token)")


def redacted_error(secrets: Sequence[str], message: str, hint: str | None = None) -> PublishError:
    return PublishError(redact(message, secrets), hint=redact(hint, secrets) if hint else None)


def strip_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """`url` without `user:pass@`, and the (decoded) user and password it held."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return (clean, unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password is not None else None)


def with_userinfo(url: str, username: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{quote(username, safe='')}:{quote(password, safe='')}@{parts.netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _env_key(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def credential_env_names(name: str) -> tuple[str, str]:
    """`BUILD_KERNEL_INDEX_<NAME>_USERNAME` / `_PASSWORD` for a named target."""
    key = _env_key(name)
    return f"BUILD_KERNEL_INDEX_{key}_USERNAME", f"BUILD_KERNEL_INDEX_{key}_PASSWORD"


def pypirc_secrets(path: Path | None) -> tuple[str, ...]:
    if path is None or not path.is_file():
        return ()
    parser = ConfigParser(interpolation=None)
    with contextlib.suppress(ConfigParserError):
        parser.read(path)
    return tuple(parser.get(s, "password") for s in parser.sections() if parser.has_option(s, "password"))


@dataclass(frozen=True)
class Credentials:
    username: str | None
    password: str | None
    source: str
    """Where they came from, for the hint when the index refuses them."""
    secrets: tuple[str, ...] = ()
    """Passwords found on the way (the target's variable), to redact."""


def choose(name: str | None, env: Mapping[str, str], *, username: str | None, password: str | None,
           pypirc: Path | None, url: str = "") -> Credentials:
    """The target's variables, else the URL's `user:pass` (given), else TWINE_*, else netrc, else keyring;
    else twine's own lookup.

    `pypirc`: set when `~/.pypirc` defines the target (twine then reads its credentials). `url`: the upload URL
    (without credentials) of an index: its host is netrc's `machine`, the URL keyring's service.
    """
    source = "the user:password in the target's URL" if password else ""
    user_var, password_var = credential_env_names(name) if name else ("", "")
    if name and (env.get(user_var) or env.get(password_var)):
        return Credentials(env.get(user_var) or username, env.get(password_var) or password,
                           f"{user_var}/{password_var}", tuple(s for s in (env.get(password_var),) if s))
    if not password and (env.get("TWINE_USERNAME") or env.get("TWINE_PASSWORD")):
        return Credentials(env.get("TWINE_USERNAME") or username, env.get("TWINE_PASSWORD") or None,
                           "TWINE_USERNAME/TWINE_PASSWORD")
    if not password and pypirc is None and url.startswith(("http://", "https://")):
        found = from_netrc(url, env, username) or from_keyring(url, username)
        if found is not None:
            return found
    if not password:
        source = f"the [{name}] section of {pypirc} (or keyring)" if pypirc else DEFAULT_SOURCE
    return Credentials(username, password, source)


def netrc_path(env: Mapping[str, str]) -> Path:
    return Path(env["NETRC"]).expanduser() if env.get("NETRC") else Path(env.get("HOME", "~")).expanduser() / ".netrc"


def from_netrc(url: str, env: Mapping[str, str], username: str | None) -> Credentials | None:
    """The netrc entry of the URL's host (or its `default`), as pip and curl read it."""
    path, host = netrc_path(env), urlsplit(url).hostname or ""
    if not path.is_file():
        return None
    fix = "fix it (machine HOST login USER password PASSWORD; chmod 600), or set TWINE_USERNAME/TWINE_PASSWORD"
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except netrc.NetrcParseError as exc:  # its message quotes the token it stopped at, which may be a password
        why = re.sub(r"'[^']*'", "(a word, not shown)", exc.msg)
        raise PublishError(f"{path}: line {exc.lineno}: {why}", hint=fix) from None
    except OSError as exc:
        raise PublishError(f"{path}: {exc.strerror}", hint=fix) from None
    if entry is None or not entry[2]:
        return None
    login, _, secret = entry
    return Credentials(login or username, secret, f"{path} (machine {host})", (str(secret),))


def from_keyring(url: str, username: str | None) -> Credentials | None:
    """keyring's credential for the upload URL (twine's service name); None without keyring or an entry."""
    try:
        import keyring  # twine's own dependency

        found = keyring.get_credential(url, username)
    except Exception:  # a backend that cannot answer (no D-Bus, locked): twine asks it again and says why
        return None
    if found is None or not found.password:
        return None
    return Credentials(found.username or username, found.password, f"keyring (service {url})", (found.password,))
