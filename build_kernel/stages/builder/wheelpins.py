"""Wheel pins of [toolchain] (torch first): resolved once from their index, then installed from the lock.

PyTorch drops nightly wheels from its nightly index after about 60 days, yet the files stay downloadable
by their URL (replicate/monobase#17 installs old nightlies that way). So the first time the build
environment installs a pin from the recipe's index, pip itself names the file (`pip install --dry-run
--report`: URL, sha256, and the interpreter it chose for) and the recipe's lock (stages/fetch/pins.py, its one
writer) records it:

    [toolchain.torch]                        pin = "nightly" | the version, index, version
    [toolchain.torch.wheel.cp311-linux_x86_64]   file, url, sha256, python, platform

A wheel's URL is per interpreter and platform, hence one file table per target. Every later install
of that pin there is `torch @ URL#sha256=...`: pip fetches that file whether the index lists it or not,
and refuses it when its bytes are not the locked ones. `torch = "nightly"` resolves once to the newest
development release the index lists and is then locked like a tag: later runs read the version here;
`build-kernel lock --recipe R --upgrade` (cli/lock.py) moves it to the newest listed.
A pin from pip's own index (no torch_index: PyPI, or its mirror) is not locked: PyPI never prunes a
release. `release()` names such a pin, so that `plan` and `doctor` can still say whether it installs.
Every index URL, and every locked file's URL, is read through the user config's `[mirrors]`
(mirrors.py): the recipe and the lock keep the public URLs, a site reads its mirror.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from packaging import markers

from build_kernel.errors import ToolchainError
from build_kernel.mirrors import PYPI, Mirrors
from build_kernel.plan import Plan, recipe_arg
from build_kernel.process import run
from build_kernel.stages.builder import wheelindex
from build_kernel.stages.fetch import pins

NIGHTLY = "nightly"
# The Makefile's RECIPE: its torch is a release on PyPI (no torch_index), so it installs on any date.
DEFAULT_RECIPE = "nightly-cu130"


@dataclass(frozen=True)
class WheelPin:
    key: str  # the recipe key: "toolchain.torch"
    name: str  # the distribution: "torch"
    pin: str  # a version, or "nightly"
    index: str  # as the recipe names it ("": pip's own index, which is never locked)
    fetch_index: str = ""  # what is really read: the index, or its mirror from the user config's [mirrors]

    @property
    def reads(self) -> str:
        """The index as the user should read it: the mirror, and what it stands for."""
        return f"{self.fetch_index} (mirror of {self.index})" if self.fetch_index != self.index else self.index

    @property
    def table(self) -> pins.Key:
        return tuple(self.key.split("."))

    def files(self, where: str = "") -> pins.Key:
        """The lock table of its file for one target (`where`), or the parent of them all."""
        return (*self.table, "wheel", where) if where else (*self.table, "wheel")


@dataclass(frozen=True)
class Locked:
    """One pinned file: what the lock holds for one target."""

    version: str
    url: str
    sha256: str
    file: str
    target: str

    def requirement(self, name: str, mirrors: Mirrors | None = None) -> str:
        """pip's requirement for exactly this file, fetched from its mirror where [mirrors] maps it."""
        url = (mirrors or Mirrors()).index(self.url.split("#", 1)[0]).fetch_url
        return f"{name} @ {url}#sha256={self.sha256}"


def of(plan: Plan) -> list[WheelPin]:
    """The [toolchain] wheel pins the build environment installs from an index the recipe names."""
    t = plan.recipe.toolchain
    if t.torch == "existing" or not t.torch_index:
        return []
    return [WheelPin("toolchain.torch", "torch", t.torch, t.torch_index, plan.mirrors.index(t.torch_index).fetch_url)]


def pip_index(plan: Plan) -> str:
    """The index pip installs from when the recipe names none: PyPI's mirror in [mirrors], else pip's own
    PIP_INDEX_URL, else PyPI (an index-url in pip.conf is pip's to apply; the build's pip reads it too)."""
    mapped = plan.mirrors.index(PYPI)
    return mapped.fetch_url if mapped.rewritten else plan.env.get("PIP_INDEX_URL") or PYPI


def release(plan: Plan) -> WheelPin | None:
    """A torch pinned without torch_index: a release from pip's own index, never locked (PyPI never prunes)."""
    t = plan.recipe.toolchain
    if t.torch == "existing" or t.torch_index:
        return None
    return WheelPin("toolchain.torch", "torch", t.torch, "", pip_index(plan))


def index_args(plan: Plan) -> list[str]:
    """pip's index options for the build environment: PyPI's mirror from [mirrors] (only when mapped: pip's
    own configuration stands otherwise), and the recipe's torch_index (read through its mirror)."""
    mapped = plan.mirrors.index(PYPI)
    pins = of(plan)
    return ([*(["--index-url", mapped.fetch_url] if mapped.rewritten else []),
             *(["--extra-index-url", pins[0].fetch_index] if pins else [])])


def unfound_fix(plan: Plan, pin: WheelPin) -> str:
    """What to do when a pin can be found neither on its index nor in the lock: the three ways out."""
    default = "" if plan.recipe.name == DEFAULT_RECIPE else (
        f", or build the default recipe {DEFAULT_RECIPE} (its torch is a release from PyPI, which never prunes)")
    return (f"put the lock of someone who built this recipe at {pins.lock_path(plan)} (its [{pin.key}] tables), "
            f"map {pin.index} to a mirror in {plan.mirrors.config_words()}{default}")


def target(environment: Mapping[str, str] | None = None) -> str:
    """`cp311-linux_x86_64`: the interpreter and platform a file was chosen for (pip's report's marker
    environment), or this interpreter's, of which the build environment is a venv."""
    m = environment or markers.default_environment()
    impl = {"cpython": "cp", "pypy": "pp"}.get(m["implementation_name"], m["implementation_name"])
    return f"{impl}{m['python_version'].replace('.', '')}-{m['sys_platform']}_{m['platform_machine']}"


def _pin_entry(plan: Plan, pin: WheelPin) -> dict[str, str]:
    """The lock's version of this pin: only when recorded for the same pin and index (else stale)."""
    entry = pins.entries(plan).get(pin.table, {})
    return entry if entry.get("pin") == pin.pin and entry.get("index") == pin.index and entry.get("version") else {}


def version(plan: Plan, pin: WheelPin) -> str | None:
    """The version to install: the pin itself, or the locked version of `nightly` (None: not resolved yet)."""
    return pin.pin if pin.pin != NIGHTLY else _pin_entry(plan, pin).get("version")


def locked(plan: Plan, pin: WheelPin, where: str | None = None) -> Locked | None:
    """The lock's file of this pin for a target (this interpreter's by default)."""
    entry = _pin_entry(plan, pin)
    where = where or target()
    file = pins.entries(plan).get(pin.files(where), {}) if entry else {}
    if not (file.get("url") and re.fullmatch(r"[0-9a-f]{64}", file.get("sha256", ""))):
        return None
    return Locked(entry["version"], file["url"], file["sha256"], file.get("file", ""), where)


def record(plan: Plan, pin: WheelPin, found: Locked) -> None:
    """Write the pin's version and file into the lock; a changed pin or index drops its old files."""
    all_entries = pins.entries(plan)
    head = {"pin": pin.pin, "index": pin.index, "version": found.version}
    changes: dict[pins.Key, dict[str, str] | None] = {}
    if all_entries.get(pin.table) != head:
        changes.update(dict.fromkeys((k for k in all_entries if k[:len(pin.table) + 1] == pin.files()), None))
    python, _, platform = found.target.partition("-")
    changes[pin.table] = head
    changes[pin.files(found.target)] = {"file": found.file, "url": found.url, "sha256": found.sha256,
                                                     "python": python, "platform": platform}
    pins.record_entries(plan, changes, what=f"[{pin.key}] {pin.name} {found.version} ({found.url})")


def _fix(plan: Plan) -> str:
    return f"`build-kernel lock --recipe {recipe_arg(plan.recipe)}` once with the network"


def newest(plan: Plan, pin: WheelPin, *, offline: bool) -> str:
    """`nightly` resolved: the newest development release the index lists for this interpreter."""
    if offline:
        raise ToolchainError(f"[{pin.key}] {pin.name} = \"nightly\" is not in {pins.lock_path(plan)} and --offline "
                             f"forbids asking {pin.index} for the newest", hint=f"run {_fix(plan)}, which locks it")
    found = wheelindex.newest_nightly(wheelindex.listed(pin.fetch_index, pin.name, plan.env))
    if found is None:
        raise ToolchainError(f"[{pin.key}] {pin.name} = \"nightly\": {pin.reads} lists no development release of "
                             f"{pin.name} for this Python and platform ({target()})",
                             hint="check [toolchain] torch_index (a nightly index, e.g. "
                                  "https://download.pytorch.org/whl/nightly/cu130)")
    return found


def not_listed(plan: Plan, pin: WheelPin, want: str, detail: str) -> ToolchainError:
    """A pin neither listed nor locked: one line with the nearest versions the index does list."""
    try:
        near = wheelindex.nearest(wheelindex.listed(pin.fetch_index, pin.name, plan.env), want)
    except ToolchainError:
        near = []
    shown = f"; nearest listed: {', '.join(near)}" if near else ""
    return ToolchainError(f"[{pin.key}] {pin.name} {want} is not listed on {pin.reads} for {target()} and "
                          f"{pins.lock_path(plan)} holds no file of it{shown}; {detail}",
                          hint="pin a listed version in [toolchain] torch (or \"nightly\"), or "
                               + unfound_fix(plan, pin))


def _from_report(report: dict[str, Any]) -> tuple[str, str | None, str]:
    """URL, sha256 (None when the index gave none) and target of the one file a `--report` names."""
    item = report["install"][0]["download_info"]
    info = item.get("archive_info", {})
    sha = info.get("hashes", {}).get("sha256") or (info.get("hash", "").partition("sha256=")[2] or None)
    return item["url"], sha, target(report["environment"])


def resolve(plan: Plan, pin: WheelPin, want: str, python: str, log: Path) -> Locked:
    """Ask pip (the build environment's) which file of `name==want` it installs from the pin's index, and
    its sha256: from the index's link, else by downloading the file and hashing it."""
    with tempfile.TemporaryDirectory(prefix="wheelpin-", dir=log.parent) as tmp:
        report = Path(tmp) / "report.json"
        argv = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet",
                "--disable-pip-version-check", "--report", str(report), "--index-url", pin.fetch_index,
                f"{pin.name}=={want}"]
        proc = run(argv, error=ToolchainError, what=f"resolving {pin.name} {want}", log=log, env=plan.env, check=False)
        output = proc.stderr + proc.stdout
        if proc.returncode != 0:
            if cause := wheelindex.network_cause(output, pin.fetch_index):
                raise ToolchainError(f"resolving [{pin.key}] {pin.name} {want}: {cause}; full log: {log}",
                                     hint="check the network and the proxy, or " + unfound_fix(plan, pin))
            raise not_listed(plan, pin, want, f"pip found no file of it; full log: {log}")
        url, sha, where = _from_report(json.loads(report.read_text()))
        if sha is None:  # an index without hashes: the file pip downloads is the one hashed
            run([python, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check", "-d", tmp,
                 f"{pin.name} @ {url}"], error=ToolchainError, what=f"downloading {url} to hash it", log=log,
                env=plan.env)
            wheel = next(Path(tmp).glob("*.whl"))
            sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    # A lock is committed: never a password in it (pip finds credentials for the host itself: netrc, keyring),
    # nor a site's mirror: the public URL the mirror's file stands for.
    parts = urlsplit(plan.mirrors.index_origin(url.split("#", 1)[0]))
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return Locked(want, bare, sha, unquote(parts.path.rsplit("/", 1)[-1]), where)


_MISMATCH = re.compile(r"Expected sha256 ([0-9a-f]{64})\s+Got\s+([0-9a-f]{64})")


def hash_mismatch(plan: Plan, pin: WheelPin, found: Locked, output: str, log: Path) -> ToolchainError | None:
    """pip refused the locked file: its bytes are not the ones locked."""
    m = _MISMATCH.search(output)
    if not m:
        return None
    return ToolchainError(f"[{pin.key}] {pin.name} {found.version}: the file at {found.url} does not match "
                          f"{pins.lock_path(plan)} (sha256 {m.group(1)[:16]}... locked, {m.group(2)[:16]}... "
                          f"downloaded); nothing installed; full log: {log}",
                          hint="the file was replaced or corrupted: find out why; to accept the new file, run "
                               f"`build-kernel lock --recipe {recipe_arg(plan.recipe)} --upgrade` online")
