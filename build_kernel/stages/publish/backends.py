"""Publish backends, two behind one Protocol (STYLE 9).

An index that speaks the upload API (pypiserver, devpi, Artifactory, Nexus), reached
through twine in a subprocess, and a static PEP 503 folder (a path or `file://` URL) that
any web server can serve. Twine's output on failure becomes one clear error here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from packaging.utils import canonicalize_name, parse_wheel_filename

from build_kernel import atomic, disk_space, process, static_index
from build_kernel.errors import BuildKernelError, PublishError
from build_kernel.stages.publish import index_page
from build_kernel.stages.publish.credentials import credential_env_names
from build_kernel.stages.publish.targets import Target
from build_kernel.stages.verify.report import sha256_of

UPLOAD_TIMEOUT_S = 600.0


# A version already there with the same bytes: publishing again is a no-op success (`make demo` twice).
UNCHANGED = "unchanged"


class Backend(Protocol):
    target: Target

    def put(self, wheel: Path, version: str, *, skip_existing: bool) -> str:
        """Publish one wheel; return `uploaded`/`copied`/`unchanged`/`skipped`; raise PublishError."""


def already_there(target: Target, wheel: Path, version: str, there: str | None, *, skip_existing: bool) -> str:
    """What a version already on the target means: the same bytes are a success (`unchanged`); other
    bytes are refused (or, with --skip-existing, `skipped` and refused by the install-back's comparison);
    unknown bytes (`there` None: the index gives no hash) are `unchanged` until the install-back compares."""
    if there is None or there == (here := sha256_of(wheel)):
        return UNCHANGED
    if skip_existing:
        return "skipped"
    raise target.fail(f"version {version} is already on {target.label} with other bytes ({wheel.name}: sha256 "
                      f"{there[:12]}… there, {here[:12]}… here)",
                      "bump the build (a new local version label) and publish again; the fleet installs the "
                      "bytes already there")


def run(target: Target, cmd: Sequence[str | Path], *, what: str, env: Mapping[str, str], cwd: Path | None = None,
        log_path: Path | None = None, timeout: float) -> tuple[int, str]:
    """process.run without its raise (we classify); the log and any error are redacted."""
    try:
        proc = process.run(cmd, error=PublishError, what=what, env=env, cwd=cwd, log=log_path, timeout=timeout,
                           check=False, secrets=target.secret_forms)
    except BuildKernelError as exc:
        raise target.fail(exc.message, exc.hint) from None
    return proc.returncode, proc.stdout + proc.stderr


def last_line(output: str) -> str:
    return next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "(no output)")


_CONNECT_ERRORS = ("connection refused", "failed to establish a new connection", "max retries exceeded",
                   "name or service not known", "temporary failure in name resolution", "nodename nor servname",
                   "no route to host", "connecttimeout", "connection timed out", "network is unreachable")


# A server that accepted the upload and went away before it answered (killed, restarted, a proxy's reset).
_BROKEN_MID_UPLOAD = ("connection aborted", "remotedisconnected", "connection reset by peer", "broken pipe")


def _already_there(flat: str) -> bool:
    return ("already exist" in flat or re.search(r"httperror: 409\b", flat) is not None
            or "overwrite artifact" in flat or "updating asset" in flat)


def reachability(target: Target, flat: str) -> PublishError | None:
    """The error for output (flattened, lower case) that says the index could not be reached."""
    if any(marker in flat for marker in _CONNECT_ERRORS):
        return target.fail(f"cannot reach {target.where}: is the index running?",
                           "check the URL, the network, and that the index server is up")
    return None


def classify_upload_failure(target: Target, wheel: Path, version: str, output: str) -> PublishError | str:
    """Turn twine's output into one clear error, or `exists` for a version already there."""
    flat = " ".join(output.split()).lower()
    if _already_there(flat):
        return "exists"
    if "no module named twine" in flat:
        return target.fail("twine is not installed in this environment",
                           "pip install 'build-kernel[publish]' (or pip install twine)")
    if re.search(r"httperror: (401|403)\b", flat):
        return target.fail(f"index {target.where} refused the credentials", f"check {target.credential_source}")
    if "credential not found" in flat:
        names = " or ".join(filter(None, [
            "/".join(credential_env_names(target.label)) if target.label != target.url else "",
            "TWINE_USERNAME/TWINE_PASSWORD"]))
        return target.fail(f"no credentials for index {target.where}",
                           f"set {names}, or store them in keyring or ~/.pypirc")
    if (err := reachability(target, flat)) is not None:
        return err
    if any(marker in flat for marker in _BROKEN_MID_UPLOAD):
        return target.fail(f"the connection to {target.where} broke during the upload of {wheel.name} (the server "
                           "went away?)", "check that the index server is up, then run the same command again")
    status = re.search(r"httperror: (\d{3}) ([^\n]*?) from", " ".join(output.split()), re.IGNORECASE)
    if status:
        return target.fail(f"index {target.where} answered HTTP {status.group(1)} {status.group(2)} "
                           f"to the upload of {wheel.name}",
                           "is that the upload URL? pypiserver: http://HOST:PORT/, devpi: https://HOST/USER/INDEX/, "
                           "Artifactory: https://HOST/artifactory/api/pypi/REPO")
    return target.fail(f"uploading {wheel.name} to {target.label} failed: {last_line(output)}",
                       "twine's whole output is in the publish log; fix what it names, then run the same command again")


class TwineBackend:
    """Any index that speaks the legacy upload API, through `python -m twine upload`."""

    def __init__(self, target: Target, *, python: str, env: Mapping[str, str], log_path: Path | None) -> None:
        self.target, self.python, self.env, self.log_path = target, python, env, log_path

    def _env(self) -> dict[str, str]:
        """Credentials in the environment, never on the command line; no TWINE_REPOSITORY* detour."""
        t = self.target
        env = {**self.env, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "400"}
        env.pop("TWINE_REPOSITORY", None)
        env.pop("TWINE_REPOSITORY_URL", None)
        if t.username:
            env["TWINE_USERNAME"] = t.username
        if t.password:
            env["TWINE_PASSWORD"] = t.password
        return env

    def put(self, wheel: Path, version: str, *, skip_existing: bool) -> str:
        t = self.target
        cmd: list[str | Path] = [self.python, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
                                 "--verbose"]
        cmd += ["--repository", t.label, "--config-file", t.pypirc] if t.pypirc else ["--repository-url", t.url]
        cmd.append(wheel)
        code, output = run(t, cmd, what=f"uploading {wheel.name} to {t.label}", env=self._env(),
                           log_path=self.log_path, timeout=UPLOAD_TIMEOUT_S)
        if code == 0:
            return "uploaded"
        outcome = classify_upload_failure(t, wheel, version, output)
        if outcome == "exists":
            # The index refused to overwrite (pypiserver: 409): its simple page says which bytes it holds.
            project = str(canonicalize_name(parse_wheel_filename(wheel.name)[0]))
            there = index_page.published_sha256(t, project, wheel.name)
            return already_there(t, wheel, version, there, skip_existing=skip_existing)
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
        atomic.write_bytes(path, data)
        path.chmod(0o644)
    if folder.is_dir():
        for path in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
            if path not in dirs:
                path.rmdir()
        if folder not in dirs:
            folder.rmdir()


def _sweep(root: Path) -> None:
    """What a killed publish left: temporary files of the wheel's copy and of the pages (under the folder's lock,
    so no other publish is writing them now)."""
    for folder in (root, root / "simple", *((root / "simple").glob("*/") if (root / "simple").is_dir() else ())):
        atomic.sweep_files(folder)


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
            raise t.fail(f"cannot create the static index folder {root}: {exc.strerror}",
                         "check the path and its permissions") from None
        with _dir_lock(root):
            _sweep(root)
            dest = root / wheel.name
            if dest.exists():
                status = already_there(t, wheel, version, sha256_of(dest), skip_existing=skip_existing)
                # A publish killed between the wheel's copy and its pages left the wheel unlisted: finished now
                # (the pages are written from the folder's wheels; unchanged pages are written byte for byte).
                self._pages(root)
                return status
            self._add(wheel, dest, created=created)
        return "copied"

    def _pages(self, root: Path) -> None:
        static_index.regenerate(root)
        for page in (root / "simple").rglob("index.html"):
            page.chmod(0o644)  # a web server running as another user must read the pages

    def remove(self, name: str) -> None:
        """Take a wheel this run copied in out again (it did not install back) and regenerate the pages."""
        root = self.target.path
        project = str(canonicalize_name(parse_wheel_filename(name)[0]))
        with _dir_lock(root):
            (root / name).unlink(missing_ok=True)
            if not any(str(canonicalize_name(parse_wheel_filename(w.name)[0])) == project for w in root.glob("*.whl")):
                shutil.rmtree(root / "simple" / project, ignore_errors=True)  # regenerate keeps no empty page
            static_index.regenerate(root)
            for page in (root / "simple").rglob("index.html"):
                page.chmod(0o644)

    def _add(self, wheel: Path, dest: Path, *, created: bool) -> None:
        """Copy the wheel in and regenerate the pages; on any failure the folder is as it was."""
        root, simple = dest.parent, dest.parent / "simple"
        files, dirs = _tree(simple)
        try:
            atomic.copy_file(wheel, dest)
            dest.chmod(0o644)
            self._pages(root)
        except BaseException as exc:
            dest.unlink(missing_ok=True)
            _restore(simple, files, dirs)
            if created and not any(root.iterdir()):
                root.rmdir()
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # The wheel and its pages (a few kB each) are what it needs there.
                need = disk_space.Need("index", root, wheel.stat().st_size + 64_000, "the wheel and its pages, "
                                       "the folder unchanged", "publish to a folder on a larger disk")
                raise disk_space.full_error(need, f"publishing {wheel.name}") from None
            if isinstance(exc, OSError):
                raise self.target.fail(f"writing {wheel.name} into {root} failed: {exc}; the folder is unchanged",
                                       "free space or fix permissions, then publish again") from None
            raise
