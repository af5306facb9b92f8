"""Publish targets: a name, URL or path resolved to an upload index or a static folder.

Where a target comes from, lowest precedence first: the recipe's `[publish.targets]`, the
user's indexes file (`~/.config/build-kernel/indexes.toml`, or `$BUILD_KERNEL_INDEXES`),
`~/.pypirc` (twine reads it), or the command line as a URL or path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from configparser import ConfigParser
from configparser import Error as ConfigParserError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from build_kernel.errors import PublishError
from build_kernel.recipe import Publish
from build_kernel.stages.publish import credentials
from build_kernel.stages.publish.credentials import redact

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

INDEXES_ENV = "BUILD_KERNEL_INDEXES"


@dataclass(frozen=True)
class Target:
    """Where wheels go: an upload index or a static folder, with its credentials."""

    label: str
    """The name (`internal`) or, for a bare URL, the URL without credentials."""
    kind: str
    """`index` (twine upload API) or `static` (a PEP 503 folder)."""
    url: str
    """Upload URL without credentials, or the static folder as a `file://` URL."""
    simple_url: str
    """The PEP 503 simple URL pip installs from."""
    source: str
    """Where the target was defined (for messages)."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    credential_source: str = credentials.DEFAULT_SOURCE
    pypirc: Path | None = None
    """Set when `~/.pypirc` defines the target: twine then reads it itself."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Every password known to be in play: redacted from all output."""

    @property
    def where(self) -> str:
        """`internal (https://…/)`, or just the URL when it has no name."""
        return self.label if self.label in (self.url, str(self.path)) else f"{self.label} ({self.url})"

    @property
    def path(self) -> Path:
        return Path(unquote(urlsplit(self.url).path))

    @property
    def secret_forms(self) -> tuple[str, ...]:
        """The secrets as given and percent-encoded: what a child's output or log may hold."""
        return credentials.secret_forms(self.secrets)

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def fail(self, message: str, hint: str | None = None) -> PublishError:
        """A PublishError with the message and hint redacted."""
        return credentials.redacted_error(self.secrets, message, hint)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "url": self.url, "simple_url": self.simple_url,
                "source": self.source, "username": self.username, "password": "***" if self.password else None}


def default_indexes_file(env: Mapping[str, str]) -> Path:
    if env.get(INDEXES_ENV):
        return Path(env[INDEXES_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "build-kernel" / "indexes.toml"


def _looks_like_path(value: str) -> bool:
    return value.startswith((".", "/", "~")) or os.sep in value


def _derive_simple(url: str) -> str:
    """pypiserver and Artifactory serve the simple index at `<upload URL>/simple/`."""
    return url.rstrip("/") + "/simple/"


def load_indexes(path: Path) -> dict[str, dict[str, str]]:
    """The user's named indexes: `name = "URL"` or `[name] url = … simple = …`."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PublishError(f"{path}: invalid TOML: {exc}", hint="fix the syntax of the indexes file") from None
    out: dict[str, dict[str, str]] = {}
    for name, value in data.items():
        if isinstance(value, str):
            out[name] = {"url": value}
        elif isinstance(value, dict):
            unknown = sorted(set(value) - {"url", "simple", "username"})
            if unknown or not isinstance(value.get("url"), str):
                raise PublishError(f"{path}: [{name}]: needs url = \"…\" (and optional simple, username), "
                                   f"not {', '.join(unknown) or 'no url'}",
                                   hint="e.g. [internal] url = \"https://pypi.internal/\" simple = \"https://pypi.internal/simple/\"")
            out[name] = {k: str(v) for k, v in value.items()}
        else:
            raise PublishError(f"{path}: {name}: must be a URL string or a table", hint="e.g. internal = \"https://pypi.internal/\"")
    return out


def _pypirc_url(path: Path, name: str) -> str | None:
    """The `repository` URL of section `name` in ~/.pypirc (credentials stay with twine)."""
    if not path.is_file():
        return None
    parser = ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except ConfigParserError:
        raise PublishError(f"{path}: malformed", hint="see https://packaging.python.org/specifications/pypirc/") from None
    if not parser.has_section(name):
        return None
    return parser.get(name, "repository", fallback=None)


@dataclass(frozen=True)
class _Entry:
    """A chosen target before its URL is parsed: the raw entry and where it was defined."""

    name: str | None
    values: dict[str, str]
    source: str
    via_pypirc: Path | None = None


def _lookup(chosen: str, *, from_command_line: bool, publish: Publish, indexes_file: Path, pypirc: Path) -> _Entry:
    """A URL or path as given; a name from the indexes file, the recipe, then ~/.pypirc."""
    if urlsplit(chosen).scheme in ("http", "https", "file") or _looks_like_path(chosen):
        return _Entry(None, {"url": chosen}, "command line" if from_command_line else "recipe [publish] target")
    user_indexes = load_indexes(indexes_file)
    if chosen in user_indexes:
        return _Entry(chosen, user_indexes[chosen], str(indexes_file))
    if chosen in publish.targets:
        return _Entry(chosen, {"url": publish.targets[chosen]}, "recipe [publish.targets]")
    if (url := _pypirc_url(pypirc, chosen)) is not None:
        return _Entry(chosen, {"url": url}, str(pypirc), pypirc)
    known = sorted({*user_indexes, *publish.targets})
    raise PublishError(
        f"unknown index {chosen!r}: not in [publish.targets], {indexes_file} or {pypirc}",
        hint=f"known: {', '.join(known)}; or pass a URL or a folder" if known
        else f"pass a URL (https://…/) or a folder (./dir), or define it in {indexes_file}")


def _check_no_stray_at(entry: _Entry) -> None:
    raw = urlsplit(entry.values["url"])
    if raw.scheme in ("http", "https") and "@" in raw.path + raw.query + raw.fragment:
        raise PublishError(f"the URL of {entry.name or 'the target'} has an '@' after its host: a password with an "
                           "unencoded '/', '?' or '#'?", hint="percent-encode it (/ is %2F) or set it in the "
                           "environment (BUILD_KERNEL_INDEX_<NAME>_PASSWORD or TWINE_PASSWORD)")


def _locate(entry: _Entry, url: str, *, install_url: str | None, secrets: list[str]) -> tuple[str, str, str]:
    """(kind, url, simple URL): an upload index, or a static folder as an absolute `file://` URL."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        return "index", url, install_url or entry.values.get("simple") or _derive_simple(url)
    if parts.scheme not in ("file", ""):
        raise PublishError(f"{redact(entry.values['url'], secrets)}: unsupported scheme {parts.scheme!r}",
                           hint="use http(s)://, file:// or a folder path")
    # Relative to where the user is, whoever named it (the command line or a recipe): a recipe may be an
    # overlay anywhere (`extends = "/…/recipes/x.toml"`), so its "project" is no place a user would guess.
    folder = Path(unquote(parts.path) if parts.scheme == "file" else url).expanduser()
    url = folder.resolve().as_uri()
    return "static", url, install_url or entry.values.get("simple") or f"{url}/simple/"


def resolve_target(
    to: str | None,
    publish: Publish | None = None,
    *,
    env: Mapping[str, str],
    indexes_file: Path | None = None,
    pypirc: Path | None = None,
    install_url: str | None = None,
) -> Target:
    """The one place that reads the environment: name/URL/path -> Target with credentials.

    A relative folder resolves against the current directory (given on the command line or in a recipe).
    """
    publish = publish or Publish()
    chosen = to or publish.target
    if not chosen:
        raise PublishError("no publish target", hint="pass --to NAME|URL|PATH or set [publish] target in the recipe")
    indexes_file = indexes_file or default_indexes_file(env)
    pypirc = pypirc or Path(env.get("HOME", "~")).expanduser() / ".pypirc"
    entry = _lookup(chosen, from_command_line=bool(to), publish=publish, indexes_file=indexes_file, pypirc=pypirc)
    _check_no_stray_at(entry)
    url, url_user, url_password = credentials.strip_userinfo(entry.values["url"])
    secrets = [s for s in (url_password, env.get("TWINE_PASSWORD")) if s]
    secrets += credentials.pypirc_secrets(pypirc)
    kind, url, simple = _locate(entry, url, install_url=install_url, secrets=secrets)
    simple, simple_user, simple_password = credentials.strip_userinfo(simple)
    secrets += [s for s in (simple_password,) if s]
    creds = credentials.choose(entry.name, env, username=entry.values.get("username") or url_user or simple_user,
                               password=url_password or simple_password, pypirc=entry.via_pypirc,
                               url=url if kind == "index" else "")
    secrets += creds.secrets
    # Each secret by where it came from, for the warning of one too short to hide inside words (process.redact).
    named = {"the password in the target's URL": url_password, "TWINE_PASSWORD": env.get("TWINE_PASSWORD"),
             "the password in the install URL": simple_password,
             **{f"a password in {pypirc}": s for s in credentials.pypirc_secrets(pypirc)}}
    if entry.name:
        named[credentials.credential_env_names(entry.name)[1]] = env.get(credentials.credential_env_names(entry.name)[1])
    credentials.warn_short(named)
    label = entry.name or redact(url if kind == "index" else str(Path(unquote(urlsplit(url).path))), secrets)
    return Target(label=label, kind=kind, url=url, simple_url=simple, source=entry.source, username=creds.username,
                  password=creds.password, credential_source=creds.source,
                  pypirc=entry.via_pypirc if entry.name else None, secrets=tuple(secrets))
