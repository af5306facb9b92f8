"""Publish verified wheels to an index, then install the exact version back and import it.

Two backends behind one Protocol (STYLE 9): an index that speaks the upload API
(pypiserver, devpi, Artifactory, Nexus), reached through twine in a subprocess, and a
static PEP 503 folder (a path or `file://` URL) that any web server can serve. Either
way the round trip is proven afterwards: pip, with every configured index and find-links
switched off, installs `name==exact.version+local` from the target's simple URL into a
throw-away folder, the bytes it fetched must be the bytes we published, and the wheel's
modules must import from that folder.

Where a target comes from, lowest precedence first: the recipe's `[publish.targets]`, the
user's indexes file (`~/.config/build-kernel/indexes.toml`, or `$BUILD_KERNEL_INDEXES`),
`~/.pypirc` (twine reads it), or the command line as a URL or path. Credentials: the
environment (`BUILD_KERNEL_INDEX_<NAME>_USERNAME/_PASSWORD`, then `TWINE_USERNAME/
TWINE_PASSWORD`), a `user:pass@` in the URL, keyring or `~/.pypirc` (twine). They travel
to twine and pip in the environment, never on a command line, and every message and log
line this module writes passes through `Target.redact`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from configparser import ConfigParser
from configparser import Error as ConfigParserError
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from rich.table import Table

from build_kernel import log, process, static_index
from build_kernel.errors import BuildKernelError, PublishError
from build_kernel.recipe import Publish
from build_kernel.stages.verify import checks as verify

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

INDEXES_ENV = "BUILD_KERNEL_INDEXES"
UPLOAD_TIMEOUT_S = 600.0
INSTALL_TIMEOUT_S = 600.0
# pip settings that only shape the connection; every other PIP_* variable (extra index
# URLs, find-links, constraints) could let pip take the package from somewhere else.
_PIP_ENV_KEPT = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES")
# The password part may hold a raw '/' (a mistyped URL): over-redacting beats leaking.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*):(?P<password>[^@\s]*)@")

_IMPORT_PROBE = r"""
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
        out[name] = {"ok": True, "file": where}
    except Exception as exc:
        out[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print("@@RESULT@@" + json.dumps(out))
"""


# ---------------------------------------------------------------------------- targets


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
    credential_source: str = "TWINE_USERNAME/TWINE_PASSWORD (or keyring / ~/.pypirc)"
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

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "url": self.url, "simple_url": self.simple_url,
                "source": self.source, "username": self.username, "password": "***" if self.password else None}


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """Hide `user:pass@` in URLs and every known secret (also percent-encoded)."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            text = text.replace(form, "***")
    return text


def _strip_userinfo(url: str) -> tuple[str, str | None, str | None]:
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


def _env_key(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def credential_env_names(name: str) -> tuple[str, str]:
    """`BUILD_KERNEL_INDEX_<NAME>_USERNAME` / `_PASSWORD` for a named target."""
    key = _env_key(name)
    return f"BUILD_KERNEL_INDEX_{key}_USERNAME", f"BUILD_KERNEL_INDEX_{key}_PASSWORD"


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


def _pypirc_secrets(path: Path | None) -> tuple[str, ...]:
    if path is None or not path.is_file():
        return ()
    parser = ConfigParser(interpolation=None)
    with contextlib.suppress(ConfigParserError):
        parser.read(path)
    return tuple(parser.get(s, "password") for s in parser.sections() if parser.has_option(s, "password"))


def resolve_target(
    to: str | None,
    publish: Publish | None = None,
    *,
    env: Mapping[str, str] | None = None,
    indexes_file: Path | None = None,
    pypirc: Path | None = None,
    install_url: str | None = None,
    recipe_root: Path | None = None,
) -> Target:
    """The one place that reads the environment: name/URL/path -> Target with credentials.

    A relative folder resolves against `recipe_root` when the recipe named it, else the
    current directory.
    """
    env = os.environ if env is None else env
    publish = publish or Publish()
    chosen = to or publish.target
    if not chosen:
        raise PublishError("no publish target", hint="pass --to NAME|URL|PATH or set [publish] target in the recipe")
    indexes_file = indexes_file or default_indexes_file(env)
    pypirc = pypirc or Path(env.get("HOME", "~")).expanduser() / ".pypirc"
    name: str | None = None
    entry: dict[str, str]
    via_pypirc: Path | None = None
    scheme = urlsplit(chosen).scheme
    if scheme in ("http", "https", "file") or _looks_like_path(chosen):
        entry, source = {"url": chosen}, "command line" if to else "recipe [publish] target"
    else:
        name = chosen
        user_indexes = load_indexes(indexes_file)
        if name in user_indexes:
            entry, source = user_indexes[name], str(indexes_file)
        elif name in publish.targets:
            entry, source = {"url": publish.targets[name]}, "recipe [publish.targets]"
        elif (url := _pypirc_url(pypirc, name)) is not None:
            entry, source, via_pypirc = {"url": url}, str(pypirc), pypirc
        else:
            known = sorted({*user_indexes, *publish.targets})
            raise PublishError(
                f"unknown index {name!r}: not in [publish.targets], {indexes_file} or {pypirc}",
                hint=f"known: {', '.join(known)}; or pass a URL or a folder" if known
                else f"pass a URL (https://…/) or a folder (./dir), or define it in {indexes_file}")
    raw = urlsplit(entry["url"])
    if raw.scheme in ("http", "https") and "@" in raw.path + raw.query + raw.fragment:
        raise PublishError(f"the URL of {name or 'the target'} has an '@' after its host: a password with an unencoded "
                           "'/', '?' or '#'?", hint="percent-encode it (/ is %2F) or set it in the environment "
                           "(BUILD_KERNEL_INDEX_<NAME>_PASSWORD or TWINE_PASSWORD)")
    url, url_user, url_password = _strip_userinfo(entry["url"])
    secrets = [s for s in (url_password, env.get("TWINE_PASSWORD")) if s]
    secrets += _pypirc_secrets(pypirc)
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        kind = "index"
        simple = install_url or entry.get("simple") or _derive_simple(url)
    elif parts.scheme in ("file", ""):
        kind = "static"
        folder = Path(unquote(parts.path) if parts.scheme == "file" else url).expanduser()
        if source.startswith("recipe") and recipe_root is not None and not folder.is_absolute():
            folder = recipe_root / folder
        folder = folder.resolve()
        url = folder.as_uri()
        simple = install_url or entry.get("simple") or f"{url}/simple/"
    else:
        raise PublishError(f"{redact(entry['url'], secrets)}: unsupported scheme {parts.scheme!r}",
                           hint="use http(s)://, file:// or a folder path")
    simple, simple_user, simple_password = _strip_userinfo(simple)
    secrets += [s for s in (simple_password,) if s]
    # Credentials, most specific first: the target's own variables, the URL, TWINE_*; else twine
    # asks keyring or ~/.pypirc itself.
    username, password = entry.get("username") or url_user or simple_user, url_password or simple_password
    credential_source = "the user:password in the target's URL" if password else ""
    user_var, password_var = credential_env_names(name) if name else ("", "")
    if name and (env.get(user_var) or env.get(password_var)):
        username, password = env.get(user_var) or username, env.get(password_var) or password
        credential_source = f"{user_var}/{password_var}"
        secrets += [s for s in (env.get(password_var),) if s]
    elif not password and (env.get("TWINE_USERNAME") or env.get("TWINE_PASSWORD")):
        username, password = env.get("TWINE_USERNAME") or username, env.get("TWINE_PASSWORD") or None
        credential_source = "TWINE_USERNAME/TWINE_PASSWORD"
    elif not password:
        credential_source = (f"the [{name}] section of {pypirc} (or keyring)" if via_pypirc
                             else "TWINE_USERNAME/TWINE_PASSWORD (or keyring / ~/.pypirc)")
    label = name or redact(url if kind == "index" else str(Path(unquote(urlsplit(url).path))), secrets)
    return Target(label=label, kind=kind, url=url, simple_url=simple, source=source, username=username,
                  password=password, credential_source=credential_source, pypirc=via_pypirc if name else None,
                  secrets=tuple(secrets))


# ---------------------------------------------------------------------------- results


@dataclass
class Published:
    wheel: str
    project: str
    version: str
    sha256: str
    status: str
    """`uploaded`, `copied` (static folder) or `skipped` (already there, --skip-existing)."""
    verified: bool
    installed_from: str = ""
    index_sha256: str | None = None
    imports: dict[str, str] = field(default_factory=dict)


@dataclass
class PublishResult:
    target: Target
    wheels: list[Published]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target.to_dict(), "wheels": [asdict(w) for w in self.wheels]}


def render(result: PublishResult) -> Table:
    t = result.target
    table = Table("wheel", "status", "verified", "installed back", "imports",
                  title=f"{t.label} ({t.kind}: {t.redact(t.url)}; install from {t.redact(t.simple_url)})")
    for w in result.wheels:
        table.add_row(w.wheel, w.status, "yes" if w.verified else "[red]NO (--force)[/]",
                      f"{w.project}=={w.version}" if w.installed_from else "-",
                      ", ".join(f"{m} {o}" for m, o in w.imports.items()) or "-")
    return table


# ---------------------------------------------------------------------------- backends


class Backend(Protocol):
    target: Target

    def put(self, wheel: Path, version: str, *, skip_existing: bool) -> str:
        """Publish one wheel; return `uploaded`/`copied`/`skipped`; raise PublishError."""


def _fail(target: Target, message: str, hint: str | None = None) -> PublishError:
    return PublishError(target.redact(message), hint=target.redact(hint) if hint else None)


def _write_log(target: Target, log_path: Path | None, argv: Sequence[str], output: str, code: int) -> None:
    if log_path is None:
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as fh:
        fh.write(target.redact(f"$ {' '.join(argv)}\n{output}[exit {code}]\n"))


def _run(target: Target, cmd: Sequence[str | Path], *, what: str, env: Mapping[str, str], cwd: Path | None = None,
         log_path: Path | None = None, timeout: float) -> tuple[int, str]:
    """process.run without its raise (we classify), output redacted before it is kept."""
    try:
        proc = process.run(cmd, error=PublishError, what=what, env=env, cwd=cwd, timeout=timeout, check=False)
    except BuildKernelError as exc:
        raise _fail(target, exc.message, exc.hint) from None
    output = proc.stdout + proc.stderr
    _write_log(target, log_path, [str(c) for c in cmd], output, proc.returncode)
    return proc.returncode, output


_CONNECT_ERRORS = ("connection refused", "failed to establish a new connection", "max retries exceeded",
                   "name or service not known", "temporary failure in name resolution", "nodename nor servname",
                   "no route to host", "connecttimeout", "connection timed out", "network is unreachable")


def _already_there(flat: str) -> bool:
    return ("already exist" in flat or re.search(r"httperror: 409\b", flat) is not None
            or "overwrite artifact" in flat or "updating asset" in flat)


def _reachability(target: Target, flat: str) -> PublishError | None:
    if any(marker in flat for marker in _CONNECT_ERRORS):
        return _fail(target, f"cannot reach {target.where}: is the index running?",
                     "check the URL, the network, and that the index server is up")
    return None


def classify_upload_failure(target: Target, wheel: Path, version: str, output: str) -> PublishError | str:
    """Turn twine's output into one clear error, or `exists` for a version already there."""
    flat = " ".join(output.split()).lower()
    if _already_there(flat):
        return "exists"
    if "no module named twine" in flat:
        return _fail(target, "twine is not installed in this environment",
                     "pip install 'build-kernel[publish]' (or pip install twine)")
    if re.search(r"httperror: (401|403)\b", flat):
        return _fail(target, f"index {target.where} refused the credentials",
                     f"check {target.credential_source}")
    if "credential not found" in flat:
        names = " or ".join(filter(None, [
            "/".join(credential_env_names(target.label)) if target.label != target.url else "",
            "TWINE_USERNAME/TWINE_PASSWORD"]))
        return _fail(target, f"no credentials for index {target.where}",
                     f"set {names}, or store them in keyring or ~/.pypirc")
    if (err := _reachability(target, flat)) is not None:
        return err
    status = re.search(r"httperror: (\d{3}) ([^\n]*?) from", " ".join(output.split()), re.IGNORECASE)
    if status:
        return _fail(target, f"index {target.where} answered HTTP {status.group(1)} {status.group(2)} "
                     f"to the upload of {wheel.name}",
                     "is that the upload URL? pypiserver: http://HOST:PORT/, devpi: https://HOST/USER/INDEX/, "
                     "Artifactory: https://HOST/artifactory/api/pypi/REPO")
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "(no output)")
    return _fail(target, f"uploading {wheel.name} to {target.label} failed: {last}")


class TwineBackend:
    """Any index that speaks the legacy upload API, through `python -m twine upload`."""

    def __init__(self, target: Target, *, python: str, env: Mapping[str, str], log_path: Path | None) -> None:
        self.target, self.python, self.env, self.log_path = target, python, env, log_path

    def put(self, wheel: Path, version: str, *, skip_existing: bool) -> str:
        t = self.target
        cmd: list[str | Path] = [self.python, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
                                 "--verbose"]
        cmd += ["--repository", t.label, "--config-file", t.pypirc] if t.pypirc else ["--repository-url", t.url]
        cmd.append(wheel)
        env = {**self.env, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "400"}
        env.pop("TWINE_REPOSITORY", None)
        env.pop("TWINE_REPOSITORY_URL", None)
        if t.username:
            env["TWINE_USERNAME"] = t.username
        if t.password:
            env["TWINE_PASSWORD"] = t.password
        code, output = _run(t, cmd, what=f"uploading {wheel.name} to {t.label}", env=env, log_path=self.log_path,
                            timeout=UPLOAD_TIMEOUT_S)
        if code == 0:
            return "uploaded"
        outcome = classify_upload_failure(t, wheel, version, output)
        if outcome == "exists":
            if skip_existing:
                return "skipped"
            raise _fail(t, f"version {version} is already on {t.label} ({wheel.name})",
                        "bump the build or pass --skip-existing")
        assert isinstance(outcome, PublishError)
        raise outcome


@contextlib.contextmanager
def _dir_lock(folder: Path) -> Iterator[None]:
    """flock on the folder itself: no lock file is left in the published folder."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _tree(folder: Path) -> tuple[dict[Path, bytes], set[Path]]:
    if not folder.is_dir():
        return {}, set()
    files = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    return files, {p for p in folder.rglob("*") if p.is_dir()} | {folder}


def _restore(folder: Path, files: dict[Path, bytes], dirs: set[Path]) -> None:
    """Put `folder` back exactly as it was: changed pages rewritten, new ones removed."""
    if folder.is_dir():
        for path in sorted(folder.rglob("*"), reverse=True):
            if path.is_file() and path not in files:
                path.unlink()
    for path, data in files.items():
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".restore", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    if folder.is_dir():
        for path in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
            if path not in dirs:
                path.rmdir()
        if folder not in dirs:
            folder.rmdir()


class StaticDirBackend:
    """A folder of wheels with its PEP 503 `simple/` pages; all or nothing per wheel."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def put(self, wheel: Path, version: str, *, skip_existing: bool) -> str:
        t = self.target
        root = t.path
        created = not root.exists()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fail(t, f"cannot create the static index folder {root}: {exc.strerror}",
                        "check the path and its permissions") from None
        with _dir_lock(root):
            dest = root / wheel.name
            if dest.exists():
                if skip_existing:
                    return "skipped"
                raise _fail(t, f"version {version} is already in {root} ({wheel.name})",
                            "bump the build or pass --skip-existing")
            simple = root / "simple"
            files, dirs = _tree(simple)
            fd, tmp = tempfile.mkstemp(prefix=f".{wheel.name}.", suffix=".tmp", dir=root)
            try:
                with os.fdopen(fd, "wb") as out, wheel.open("rb") as src:
                    shutil.copyfileobj(src, out)
                    out.flush()
                    os.fsync(out.fileno())
                os.chmod(tmp, 0o644)
                os.replace(tmp, dest)
                static_index.regenerate(root)
                for page in simple.rglob("index.html"):
                    page.chmod(0o644)  # mkstemp pages are 0600: a web server as another user could not read them
            except BaseException as exc:
                Path(tmp).unlink(missing_ok=True)
                dest.unlink(missing_ok=True)
                _restore(simple, files, dirs)
                if created and not any(root.iterdir()):
                    root.rmdir()
                if isinstance(exc, OSError):
                    raise _fail(t, f"writing {wheel.name} into {root} failed: {exc}; the folder is unchanged",
                                "free space or fix permissions, then publish again") from None
                raise
        return "copied"


# ---------------------------------------------------------------------------- install back


def _pip_env(base: Mapping[str, str]) -> dict[str, str]:
    """No pip config file and no PIP_* source settings: only the target's index counts."""
    env = {k: v for k, v in base.items() if not k.startswith("PIP_") or k in _PIP_ENV_KEPT}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _with_userinfo(url: str, username: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{quote(username, safe='')}:{quote(password, safe='')}@{parts.netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def wheel_modules(wheel: Path) -> list[str]:
    """Top-level importable names: `top_level.txt`, else the package dirs and modules."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = next((n for n in names if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                          and n.endswith("/top_level.txt")), None)
        if top_level:
            listed = [line.strip() for line in zf.read(top_level).decode().splitlines() if line.strip()]
            if listed:
                return sorted({m.replace("/", ".") for m in listed})
    found: set[str] = set()
    for name in names:
        head, _, rest = name.partition("/")
        if head.endswith((".dist-info", ".data")):
            continue
        if (rest and rest.endswith((".py", ".so"))) or (not rest and name.endswith(".py")):
            found.add(head if rest else head[:-3])
        elif not rest and name.endswith(".so"):
            found.add(head.split(".")[0])
    return sorted(m for m in found if m.isidentifier())


def install_back(target: Target, project: str, version: str, *, modules: Sequence[str], python: str,
                 env: Mapping[str, str], log_path: Path | None = None) -> tuple[str | None, dict[str, str]]:
    """pip-install exactly `project==version` from the target alone, then import `modules`.

    Returns the sha256 of the file pip fetched (None when pip's report lacks it) and the
    import outcome per module; raises PublishError when the round trip does not hold.
    """
    requirement = f"{project}=={version}"
    with tempfile.TemporaryDirectory(prefix="bk-install-back-") as tmp_str:
        tmp = Path(tmp_str)
        site, report, cwd = tmp / "site", tmp / "report.json", tmp / "cwd"
        cwd.mkdir()
        pip_env = _pip_env(env)
        cmd: list[str | Path] = [python, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--no-input",
                                 "--disable-pip-version-check", "--only-binary", ":all:", "--target", site,
                                 "--report", report]
        if target.username and target.password and target.kind == "index":
            # Credentials go through the environment, never the command line (ps, logs).
            pip_env["PIP_INDEX_URL"] = _with_userinfo(target.simple_url, target.username, target.password)
        else:
            cmd += ["--index-url", target.simple_url]
        cmd.append(requirement)
        code, output = _run(target, cmd, what=f"installing {requirement} back from {target.label}", env=pip_env,
                            cwd=cwd, log_path=log_path, timeout=INSTALL_TIMEOUT_S)
        if code != 0:
            flat = " ".join(output.split()).lower()
            if "no module named pip" in flat:
                raise _fail(target, f"{python} has no pip to install {requirement} back with",
                            f"{python} -m ensurepip")
            if (err := _reachability(target, flat)) is not None:
                raise err
            if "no matching distribution" in flat or "could not find a version" in flat:
                raise _fail(target, f"{requirement} was published but is not installable from {target.simple_url}",
                            "check the target's simple URL (devpi: …/+simple/; set `simple` in indexes.toml "
                            "or pass --install-url)")
            last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "(no output)")
            raise _fail(target, f"installing {requirement} back from {target.simple_url} failed: {last}")
        data = json.loads(report.read_text())
        installed = data.get("install") or [{}]
        info = installed[0].get("download_info", {}).get("archive_info", {})
        fetched = (info.get("hashes") or {}).get("sha256")
        got_version = installed[0].get("metadata", {}).get("version")
        if got_version != version:
            raise _fail(target, f"pip installed {project} {got_version} from {target.label}, not {version}")
        imports = _import_check(target, site, cwd, modules, python, env, log_path)
    return fetched, imports


def _import_check(target: Target, site: Path, cwd: Path, modules: Sequence[str], python: str,
                  env: Mapping[str, str], log_path: Path | None) -> dict[str, str]:
    if not modules:
        return {}
    import_env = {k: v for k, v in env.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    import_env["PYTHONPATH"] = str(site)
    import_env["PYTHONNOUSERSITE"] = "1"
    code, output = _run(target, [python, "-c", _IMPORT_PROBE, *modules], what="importing the installed wheel",
                        env=import_env, cwd=cwd, log_path=log_path, timeout=INSTALL_TIMEOUT_S)
    marker = next((line for line in output.splitlines() if line.startswith("@@RESULT@@")), None)
    if code != 0 or marker is None:
        tail = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "(no output)")
        raise _fail(target, f"import check of the installed wheel crashed: {tail}")
    results: dict[str, dict[str, Any]] = json.loads(marker[len("@@RESULT@@"):])
    outcome: dict[str, str] = {}
    problems = []
    for name, res in results.items():
        if not res["ok"]:
            problems.append(f"import {name}: {res['error']}")
        elif res["file"] and not Path(res["file"]).resolve().is_relative_to(site.resolve()):
            problems.append(f"import {name} came from {res['file']}, not from the installed wheel")
        else:
            outcome[name] = "ok"
    if problems:
        raise _fail(target, f"installed back from {target.label}, but {'; '.join(problems)}",
                    "the wheel on the index does not work here: fix it and publish a new build")
    return outcome


# ---------------------------------------------------------------------------- the stage


def _wheel_identity(wheel: Path) -> tuple[str, str]:
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise PublishError(f"{wheel}: not a wheel file name: {exc}", hint="publish the .whl that build produced") from None
    return str(canonicalize_name(name)), str(version)


def publish(
    wheels: Sequence[Path],
    target: Target,
    *,
    skip_existing: bool = False,
    force: bool = False,
    import_modules: Sequence[str] | None = None,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
) -> PublishResult:
    """Publish every wheel (all refused unless verified), then install each back and import it.

    `import_modules`: the recipe's [verify] import_modules; None takes them from each wheel.
    `python`: the interpreter that installs back and imports (the build env's, with its torch).
    """
    env = os.environ if env is None else env
    if not wheels:
        raise PublishError("no wheel to publish", hint="pass WHEEL… or --recipe NAME after a build")
    checked: list[tuple[Path, str, str, str, bool]] = []
    for wheel in wheels:
        if not wheel.is_file():
            raise PublishError(f"{wheel}: no such wheel", hint="build it first, or fix the path")
        project, version = _wheel_identity(wheel)
        verified = bool(verify.require_verified(wheel, force=force))
        if not verified:
            log.warn(f"PUBLISHING AN UNVERIFIED WHEEL: {wheel.name} goes to {target.label} without a passing "
                     f"verification record; the fleet will install it as if it were good")
        checked.append((wheel, project, version, hashlib.sha256(wheel.read_bytes()).hexdigest(), verified))
    backend: Backend = (StaticDirBackend(target) if target.kind == "static"
                        else TwineBackend(target, python=python, env=env, log_path=log_path))
    done: list[Published] = []
    for wheel, project, version, digest, verified in checked:
        status = backend.put(wheel, version, skip_existing=skip_existing)
        if status == "skipped":
            log.info(target.redact(f"{project} {version} is already on {target.label}: skipped (--skip-existing)"))
        else:
            log.info(target.redact(f"{wheel.name} -> {target.label} ({status})"))
        modules = list(import_modules) if import_modules is not None else wheel_modules(wheel)
        fetched, imports = install_back(target, project, version, modules=modules, python=python, env=env,
                                        log_path=log_path)
        if fetched is not None and fetched != digest:
            why = "it was skipped as already there, but " if status == "skipped" else ""
            raise _fail(target, f"{why}{target.label} serves other bytes for {project} {version} than {wheel.name} "
                        f"(sha256 {fetched[:12]}… vs {digest[:12]}…): the fleet would install that other build",
                        "bump the build (a new local version label) and publish again")
        log.info(target.redact(f"installed {project}=={version} back from {target.simple_url}"
                               + (f"; imported {', '.join(imports)}" if imports else "")))
        done.append(Published(wheel.name, project, version, digest, status, verified, target.simple_url,
                              fetched, imports))
    return PublishResult(target, done)
