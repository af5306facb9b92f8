"""Wheel pins that age: a [toolchain] torch pin resolved from its index is locked with its file URL and
sha256, and reinstalls use the lock after the index stops listing the version.

PyTorch drops nightly wheels from its nightly index after about 60 days while the files stay
downloadable by URL. PyTorch's index is not reachable from here, so each test makes a local PEP 503
index (a `simple/torch/` page in a folder, read by pip as file://) whose small real wheels, named torch,
stand in for PyTorch's: the files live in `files/`, and a version is "dropped" by rewriting the page
without it while its file stays where its URL points. Nothing is mocked: pip resolves, downloads, checks
hashes and installs; the CLI runs as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest

from build_kernel import recipe
from build_kernel.errors import RecipeError, ToolchainError
from build_kernel.plan import Plan, resolve
from build_kernel.stages.builder import buildenv, wheelpins
from build_kernel.stages.fetch import pins
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe
from tests.test_publish import make_wheel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OLD, NIGHTLY, NEWER = "2.12.0.dev20260301+cu130", "2.12.0.dev20260307+cu130", "2.12.0.dev20260310+cu130"
RELEASE = "2.11.0+cu130"


class LocalIndex:
    """A PEP 503 index in a folder: wheels in `files/`, the listing in `simple/torch/index.html`."""

    def __init__(self, root: Path) -> None:
        self.files, self.simple = root / "files", root / "simple"
        self.url = self.simple.as_uri()

    def wheel(self, version: str) -> Path:
        return self.files / f"torch-{version}-py3-none-any.whl"

    def publish(self, *versions: str, hashes: bool = True) -> None:
        """List exactly these versions (making their wheels first); files of others stay, unlisted."""
        for version in versions:
            if not self.wheel(version).exists():
                make_wheel(self.files, "torch", version, value=version, verified=False)
        links = "".join(f'<a href="../../files/{quote(self.wheel(v).name)}'
                        + (f'#sha256={hashlib.sha256(self.wheel(v).read_bytes()).hexdigest()}' if hashes else "")
                        + f'">{self.wheel(v).name}</a><br/>\n' for v in versions)
        (self.simple / "torch").mkdir(parents=True, exist_ok=True)
        (self.simple / "torch" / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
        (self.simple / "index.html").write_text('<!DOCTYPE html>\n<html><body><a href="torch/">torch</a></body></html>\n')


@pytest.fixture
def index(tmp_path: Path) -> LocalIndex:
    made = LocalIndex(tmp_path / "index")
    made.publish(RELEASE, OLD, NIGHTLY)
    return made


@pytest.fixture
def served(index: LocalIndex) -> Iterator[str]:
    """The same index over HTTP (a real server on a free port), as PyTorch's is served."""
    root = index.simple.parent
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def pinned(project: Path, torch: str, torch_index: str) -> Path:
    if not (project / "patches" / "minikernel" / "v1").exists():
        copy_series(project, sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split()), "v1")
    text = demo_recipe_text().replace('torch = "existing"', f'torch = "{torch}"\ntorch_index = "{torch_index}"')
    return write_recipe(project, "r", text)


def plan_of(path: Path, cache: Path) -> Plan:
    return resolve(recipe.load(str(path)), env=dict(os.environ), cache_dir=cache)


def torch_in(python: str) -> str:
    return subprocess.run([python, "-c", "import importlib.metadata as m, torch; print(m.version('torch'), torch.VALUE)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def pins_of(path: Path, cache: Path, *args: str, command: str = "plan") -> tuple[int, list[dict[str, object]], str]:
    proc = run_cli("--cache-dir", str(cache), *args, command, "--recipe", str(path), "--json")
    data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, data.get("pins", []), proc.stderr


@pytest.mark.slow
def test_nightly_is_locked_then_reinstalled_from_the_lock_after_the_index_drops_it(project: Path, index: LocalIndex,
                                                                                   tmp_path: Path) -> None:
    """`torch = "nightly"` resolves once to the newest dev release listed; the lock then holds its URL and
    sha256 for this interpreter; after the index drops it (and lists a newer one), a reinstall takes the
    locked file; a tampered file is refused by pip's hash check; an exact pin of the dropped version, not
    locked, is one line naming the nearest listed versions."""
    path, cache = pinned(project, "nightly", index.url), tmp_path / "cache"
    python = buildenv.python_for(plan_of(path, cache))
    assert torch_in(python) == f"{NIGHTLY} {NIGHTLY}"  # the newest dev release, not the newer release 2.11.0
    lock = tomllib.loads(path.with_suffix(".lock").read_text())
    target = wheelpins.target()
    files = lock["toolchain"]["torch"].pop("wheel")
    assert lock["toolchain"]["torch"] == {"pin": "nightly", "index": index.url, "version": NIGHTLY}
    assert files == {target: {
        "file": index.wheel(NIGHTLY).name, "url": f"{index.files.as_uri()}/{quote(index.wheel(NIGHTLY).name)}",
        "sha256": hashlib.sha256(index.wheel(NIGHTLY).read_bytes()).hexdigest(),
        "python": f"cp{sys.version_info[0]}{sys.version_info[1]}", "platform": target.split("-", 1)[1]}}
    locked_text = path.with_suffix(".lock").read_text()

    index.publish(RELEASE, OLD, NEWER)  # NIGHTLY no longer listed; its file stays at its URL
    shutil.rmtree(cache / "envs")
    python = buildenv.python_for(plan_of(path, cache))
    assert torch_in(python) == f"{NIGHTLY} {NIGHTLY}"  # the lock's, not the newest listed
    assert path.with_suffix(".lock").read_text() == locked_text

    code, rows, err = pins_of(path, cache)
    assert code == 0, err
    assert "no longer listed on" in str(rows[0]["line"]) and f"nearest: {RELEASE}, {OLD}, {NEWER}" in str(rows[0]["line"])
    assert "the lock holds its file" in str(rows[0]["line"]) and rows[0]["problem"] is False

    make_wheel(index.files, "torch", NIGHTLY, value="tampered", verified=False)  # other bytes, same name
    shutil.rmtree(cache / "envs")
    with pytest.raises(ToolchainError) as caught:
        buildenv.python_for(plan_of(path, cache))
    message = caught.value.render()
    assert "\n" not in message and "does not match" in message and "nothing installed" in message, message
    assert f"sha256 {files[target]['sha256'][:16]}... locked" in message
    assert not [p for p in (cache / "envs").iterdir() if p.is_dir()]  # no half-made environment
    assert path.with_suffix(".lock").read_text() == locked_text

    pinned(project, NIGHTLY, index.url)  # the same version, pinned exactly: the lock holds no file of that pin
    with pytest.raises(ToolchainError) as caught:
        buildenv.python_for(plan_of(path, cache))
    message = caught.value.render()
    assert "\n" not in message and f"torch {NIGHTLY} is not listed on {index.url}" in message
    assert f"nearest listed: {RELEASE}, {OLD}, {NEWER}" in message, message


@pytest.mark.parametrize("over", ["file", "http"])
def test_plan_and_doctor_say_a_pin_is_no_longer_listed_and_name_the_nearest(project: Path, index: LocalIndex,
                                                                            served: str, tmp_path: Path,
                                                                            over: str) -> None:
    url = index.url if over == "file" else served
    path, cache = pinned(project, "2.12.0.dev20260305+cu130", url), tmp_path / "cache"
    code, rows, err = pins_of(path, cache)
    assert code == 3, err  # the toolchain cannot be installed: plan says so and exits non-zero
    assert rows[0]["listed"] is False and rows[0]["nearest"] == [RELEASE, OLD, NIGHTLY]
    assert f"no longer listed on {url}; nearest: {RELEASE}, {OLD}, {NIGHTLY}; not locked" in str(rows[0]["line"])
    proc = run_cli("--cache-dir", str(cache), "plan", "--recipe", str(path))
    first, *rest = proc.stdout.splitlines()
    # Said first, once, with the fix; the pin row below it keeps the detail.
    assert proc.returncode == 3 and first.startswith("problem") and "the toolchain cannot be installed" in first
    assert f"no longer listed on {url}" in first and f"fix: put the lock of someone who built this recipe at " \
        f"{path.with_suffix('.lock')}" in first and f"map {url} to a mirror in [mirrors] of the user config" in first
    assert "or build the default recipe nightly-cu130" in first
    assert sum("no longer listed" in line for line in rest) == 1, proc.stdout
    code, rows, err = pins_of(path, cache, command="doctor")
    assert code == 3 and rows[0]["problem"] is True, err  # a build could not install it
    path = pinned(project, NIGHTLY, url)
    code, rows, err = pins_of(path, cache)
    assert code == 0 and rows[0]["listed"] is True and "not locked yet" in str(rows[0]["line"]), err
    path = pinned(project, "nightly", url)
    code, rows, err = pins_of(path, cache)
    assert code == 0 and f"resolves it to {NIGHTLY}" in str(rows[0]["line"]), err


def test_offline_plan_says_whether_the_lock_or_a_wheelhouse_holds_the_pin(project: Path, index: LocalIndex,
                                                                         tmp_path: Path) -> None:
    path, cache = pinned(project, NIGHTLY, index.url), tmp_path / "cache"
    code, rows, err = pins_of(path, cache, "--offline")
    assert "neither the lock nor a wheelhouse holds it" in str(rows[0]["line"]) and rows[0]["problem"], err
    house = tmp_path / "house"
    house.mkdir()
    shutil.copy(index.wheel(NIGHTLY), house)
    proc = run_cli("--cache-dir", str(cache), "--offline", "plan", "--recipe", str(path), "--json",
                   env={"PIP_FIND_LINKS": str(house)})
    row = json.loads(proc.stdout)["pins"][0]
    assert row["wheelhouse"] == (house / index.wheel(NIGHTLY).name).as_uri() and not row["problem"], proc.stderr
    # Resolved (pip's report, this interpreter) and recorded as a build records it: the lock now holds it.
    plan = plan_of(path, cache)
    pin = wheelpins.of(plan)[0]
    (cache / "logs").mkdir(parents=True)
    wheelpins.record(plan, pin, wheelpins.resolve(plan, pin, NIGHTLY, sys.executable, cache / "logs" / "pip.log"))
    shutil.rmtree(index.simple)  # the index is gone: offline needs none of it
    code, rows, err = pins_of(path, cache, "--offline")
    assert code == 0 and "the lock holds its file" in str(rows[0]["line"]) and "not asked (--offline)" in str(rows[0]["line"]), err


def test_nightly_offline_without_a_lock_and_an_unreachable_index_are_one_line_each(project: Path, tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path, cache = pinned(project, "nightly", f"http://127.0.0.1:{port}/simple"), tmp_path / "cache"
    plan = plan_of(path, cache)
    with pytest.raises(ToolchainError) as caught:
        buildenv.python_for(plan, offline=True)
    assert "\n" not in caught.value.render() and '"nightly" is not in' in caught.value.message
    assert "--offline forbids asking" in caught.value.message and "build-kernel lock --recipe" in str(caught.value.hint)
    with pytest.raises(ToolchainError) as caught:
        buildenv.python_for(plan)
    assert "\n" not in caught.value.render() and f"127.0.0.1:{port}" in caught.value.message
    assert "unreachable" in caught.value.message and "--offline" in str(caught.value.hint)
    assert not (cache / "envs").exists() and not path.with_suffix(".lock").exists()  # nothing made, nothing written
    code, rows, err = pins_of(path, cache)
    assert code == 3 and "unreachable" in str(rows[0]["line"]) and rows[0]["problem"], err


def test_nightly_needs_an_index(project: Path) -> None:
    path = pinned(project, "nightly", "")
    with pytest.raises(RecipeError) as caught:
        recipe.load(str(path))
    assert '"nightly" needs torch_index' in caught.value.render()


def test_wheel_pins_share_the_lock_with_tag_pins(project: Path, index: LocalIndex, tmp_path: Path) -> None:
    """One writer of the lock: recording a wheel keeps the tag pins' tables, and a changed pin drops the old
    pin's files."""
    path, cache = pinned(project, NIGHTLY, index.url), tmp_path / "cache"
    plan = plan_of(path, cache)
    pins.record(plan, "deps.a.b", "tag", "https://example.invalid/a.git", "v1", "1" * 40)
    pin = wheelpins.of(plan)[0]
    found = wheelpins.Locked(NIGHTLY, "file:///x/torch.whl", "a" * 64, "torch.whl", "cp399-other_arch")
    wheelpins.record(plan, pin, found)
    assert wheelpins.locked(plan, pin, "cp399-other_arch") == found and wheelpins.locked(plan, pin) is None
    lock = tomllib.loads(path.with_suffix(".lock").read_text())
    assert lock["deps"]["a.b"]["commit"] == "1" * 40 and list(lock["toolchain"]["torch"]["wheel"]) == ["cp399-other_arch"]
    plan = plan_of(pinned(project, OLD, index.url), cache)
    wheelpins.record(plan, wheelpins.of(plan)[0], wheelpins.Locked(OLD, "file:///y.whl", "b" * 64, "y.whl", "cp398-x"))
    lock = tomllib.loads(path.with_suffix(".lock").read_text())
    assert list(lock["toolchain"]["torch"]["wheel"]) == ["cp398-x"] and lock["toolchain"]["torch"]["version"] == OLD
    assert lock["deps"]["a.b"]["tag"] == "v1"


def test_an_index_without_hashes_is_hashed_from_the_file_pip_downloads(project: Path, index: LocalIndex,
                                                                         tmp_path: Path) -> None:
    index.publish(RELEASE, OLD, NIGHTLY, hashes=False)
    path, cache = pinned(project, NIGHTLY, index.url), tmp_path / "cache"
    plan = plan_of(path, cache)
    (cache / "logs").mkdir(parents=True)
    found = wheelpins.resolve(plan, wheelpins.of(plan)[0], NIGHTLY, sys.executable, cache / "logs" / "pip.log")
    assert found.sha256 == hashlib.sha256(index.wheel(NIGHTLY).read_bytes()).hexdigest()
    assert found.url == f"{index.files.as_uri()}/{quote(index.wheel(NIGHTLY).name)}" and found.target == wheelpins.target()
