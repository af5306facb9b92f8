"""Publish: a real pypiserver with htpasswd auth, real twine uploads, real pip installs back.

No mocks. The one monkeypatch is a fault injection: a static index page write that fails
halfway, to prove the folder is left exactly as it was.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from build_kernel import static_index
from build_kernel.errors import DiskFullError, PublishError, VerifyError
from build_kernel.recipe import Publish
from build_kernel.stages import publish as pub
from build_kernel.stages.verify.report import RECORD_SUFFIX
from tests.conftest import run_cli, write_recipe, write_series

USER = "alice"
PASSWORD = "s3cret-Pa55/word!"  # a '/' so it must be percent-encoded inside a URL
WRONG = "not-the-Pa55word"
LOCAL = "+cu130.sm120a.g40ef116"


# ---------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Index:
    url: str
    simple: str
    packages: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pypiserver exited {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"pypiserver did not answer on port {port} in {timeout:g} s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def pypiserver(root: Path, password: str, authenticate: str = "update") -> Iterator[Index]:
    """A real pypiserver over `root/packages`: the actions in `authenticate` need alice's `password` (htpasswd)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # passlib imports the deprecated `crypt`
        from passlib.apache import HtpasswdFile
    packages = root / "packages"
    packages.mkdir()
    htpasswd = HtpasswdFile(str(root / "htpasswd"), new=True)
    htpasswd.set_password(USER, password)
    htpasswd.save()
    port = free_port()
    log = root / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1", "-a", authenticate,
             "-P", str(root / "htpasswd"), "--disable-fallback", str(packages)],
            stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_port(port, proc, log)
            yield Index(f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port}/simple/", packages)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def pypi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """A real pypiserver: uploads need alice's password (htpasswd), downloads are open."""
    with pypiserver(tmp_path_factory.mktemp("pypi"), PASSWORD) as index:
        yield index


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any credentials or index settings of the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TWINE_", "BUILD_KERNEL_INDEX"))}
    return {**env, **extra}


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_wheel(folder: Path, project: str, version: str, *, value: str = "42", top_level: bool = False,
               verified: bool = True, extra: dict[str, str] | None = None, requires: tuple[str, ...] = ()) -> Path:
    """A small real pure-Python wheel (RECORD with hashes) and, optionally, a passing record.
    `requires`: its Requires-Dist lines (`torch==2.14.1`)."""
    module = project.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f'VALUE = "{value}"\nVERSION = "{version}"\n',
        **(extra or {}),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: build-kernel-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if top_level:
        files[f"{dist_info}/top_level.txt"] = f"{module}\n"
    record = "".join(f"{name},sha256={_b64(hashlib.sha256(text.encode()).digest())},{len(text.encode())}\n"
                     for name, text in files.items())
    files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 2, 0, 0, 0)), text)
    if verified:
        write_record(wheel, passed=True)
    return wheel


def write_record(wheel: Path, *, passed: bool, sha256: str | None = None) -> None:
    """The shape verify.verify writes (Report.to_dict): what require_verified reads."""
    digest = sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest()
    failures = [] if passed else ["sm_120a: no FP4 instructions"]
    wheel.with_name(wheel.name + RECORD_SUFFIX).write_text(
        json.dumps({"wheel": wheel.name, "sha256": digest, "passed": passed, "failures": failures}))


def target_for(to: str, tmp_path: Path, env: dict[str, str], publish: Publish | None = None) -> pub.Target:
    """resolve_target with the user's real ~/.pypirc and indexes file kept out."""
    return pub.resolve_target(to, publish, env=env, indexes_file=tmp_path / "no-indexes.toml",
                              pypirc=tmp_path / "no-pypirc")


def pip_install_import(simple: str, requirement: str, module: str, tmp_path: Path) -> str:
    """Independent of the code under test: pip (no config, one index) installs, python imports."""
    site = tmp_path / "independent-site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
                    "--target", str(site), "--index-url", simple, requirement],
                   check=True, env=env, capture_output=True, text=True)
    proc = subprocess.run([sys.executable, "-c", f"import {module}; print({module}.VALUE, {module}.__file__)"],
                          check=True, env={**env, "PYTHONPATH": str(site)}, cwd=tmp_path, capture_output=True, text=True)
    value, where = proc.stdout.split()
    assert Path(where).is_relative_to(site)
    return value


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- upload index


def test_round_trip_upload_then_install_back(pypi: Index, tmp_path: Path) -> None:
    version = f"0.3.21{LOCAL}"
    wheel = make_wheel(tmp_path, "bk-roundtrip", version, value="round-trip")
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    target = target_for(pypi.url, tmp_path, env)
    assert (target.kind, target.simple_url) == ("index", pypi.simple)
    result = pub.publish([wheel], target, env=env, log_path=tmp_path / "publish.log")
    [done] = result.wheels
    assert (done.status, done.project, done.version, done.verified) == ("uploaded", "bk-roundtrip", version, True)
    assert (pypi.packages / wheel.name).read_bytes() == wheel.read_bytes()
    assert done.index_sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert done.imports == {"bk_roundtrip": "ok"}
    # And independently: the exact local version installs from that index alone and imports.
    assert pip_install_import(pypi.simple, f"bk-roundtrip=={version}", "bk_roundtrip", tmp_path) == "round-trip"
    data = result.to_dict()
    assert json.loads(json.dumps(data))["wheels"][0]["status"] == "uploaded"
    assert PASSWORD not in json.dumps(data) and PASSWORD not in (tmp_path / "publish.log").read_text()


def test_named_target_with_its_own_credentials_and_recipe_modules(pypi: Index, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "bk-named", f"1.0.0{LOCAL}", top_level=True)
    env = clean_env(BUILD_KERNEL_INDEX_INTERNAL_USERNAME=USER, BUILD_KERNEL_INDEX_INTERNAL_PASSWORD=PASSWORD)
    recipe_publish = Publish(target="internal", targets={"internal": pypi.url})
    target = target_for("", tmp_path, env, recipe_publish)  # no --to: the recipe's [publish] target
    assert (target.label, target.source, target.username) == ("internal", "recipe [publish.targets]", USER)
    result = pub.publish([wheel], target, env=env, import_modules=["bk_named"])
    assert result.wheels[0].status == "uploaded" and result.wheels[0].imports == {"bk_named": "ok"}
    assert PASSWORD not in repr(target) and target.to_dict()["password"] == "***"


def test_wrong_password_is_one_clear_line_and_uploads_nothing(pypi: Index, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "bk-wrongpw", f"0.1.0{LOCAL}")
    before = listing(pypi.packages)
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=WRONG)
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target_for(pypi.url, tmp_path, env), env=env, log_path=tmp_path / "publish.log")
    text = info.value.render()
    assert f"index {pypi.url} refused the credentials" in text
    assert "check TWINE_USERNAME/TWINE_PASSWORD" in text and "\n" not in text
    assert WRONG not in text and WRONG not in (tmp_path / "publish.log").read_text()
    assert listing(pypi.packages) == before


def test_wrong_password_in_the_url_is_never_shown(pypi: Index, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "bk-urlpw", f"0.1.0{LOCAL}")
    env = clean_env()
    url = pypi.url.replace("http://", f"http://{USER}:{WRONG}@")
    target = target_for(url, tmp_path, env)
    assert WRONG not in target.label and WRONG not in target.url and target.password == WRONG
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target, env=env)
    assert "refused the credentials" in str(info.value) and "the user:password in the target's URL" in str(info.value)
    assert WRONG not in str(info.value)


def test_server_down_says_so(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "bk-down", f"0.1.0{LOCAL}")
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    url = f"http://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{free_port()}/"
    started = time.monotonic()
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target_for(url, tmp_path, env), env=env)
    assert "cannot reach" in str(info.value) and "is the index running?" in str(info.value)
    assert PASSWORD not in str(info.value) and time.monotonic() - started < 30


def test_same_bytes_twice_is_a_success_other_bytes_are_refused(pypi: Index, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """pypiserver answers 409 to the second upload; its simple page's #sha256= tells the two cases apart."""
    version = f"0.3.21{LOCAL}"
    wheel = make_wheel(tmp_path, "bk-twice", version)
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    target = target_for(pypi.url, tmp_path, env)
    assert pub.publish([wheel], target, env=env).wheels[0].status == "uploaded"
    capsys.readouterr()
    again = pub.publish([wheel], target, env=env)
    assert again.wheels[0].status == "unchanged" and again.wheels[0].imports == {"bk_twice": "ok"}
    assert f"{wheel.name} is already published on {pypi.url} (same bytes)" in capsys.readouterr().err
    before = listing(pypi.packages)
    other = make_wheel(tmp_path / "other", "bk-twice", version, value="other")
    with pytest.raises(PublishError) as info:
        pub.publish([other], target, env=env)
    there, here = hashlib.sha256(wheel.read_bytes()).hexdigest(), hashlib.sha256(other.read_bytes()).hexdigest()
    assert info.value.render() == (
        f"version {version} is already on {pypi.url} with other bytes ({wheel.name}: sha256 {there[:12]}… there, "
        f"{here[:12]}… here) (bump the build (a new local version label) and publish again; the fleet installs "
        "the bytes already there)")
    assert listing(pypi.packages) == before
    skipped = pub.publish([wheel], target, env=env, skip_existing=True)
    assert skipped.wheels[0].status == "unchanged"


def test_the_hash_an_index_page_gives_for_a_file() -> None:
    """pypiserver's, devpi's and a static folder's link shapes: relative or absolute, `+` quoted or not."""
    from build_kernel.stages.publish.index_page import hashes_on_page

    page = ('<a href="/packages/bk_x-1.0%2Bcu130-py3-none-any.whl#sha256=AB12">x</a>\n'
            "<a href='../../bk_x-1.1+cu130-py3-none-any.whl#sha256=cd34'>y</a>\n"
            '<a href="https://h/bk_x-1.2-py3-none-any.whl#md5=ef">z</a><a href="bk_x-1.3.tar.gz">no hash</a>')
    assert hashes_on_page(page, "http://127.0.0.1:8080/simple/bk-x/") == {
        "bk_x-1.0+cu130-py3-none-any.whl": "ab12", "bk_x-1.1+cu130-py3-none-any.whl": "cd34"}


def test_skip_existing_still_refuses_other_bytes_under_the_same_version(pypi: Index, tmp_path: Path) -> None:
    version = f"0.3.21{LOCAL}"
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    target = target_for(pypi.url, tmp_path, env)
    pub.publish([make_wheel(tmp_path / "a", "bk-otherbytes", version, value="a")], target, env=env)
    other = make_wheel(tmp_path / "b", "bk-otherbytes", version, value="b")
    with pytest.raises(PublishError, match=r"serves other bytes.*the fleet would install that other build"):
        pub.publish([other], target, env=env, skip_existing=True)


def test_unverified_wheel_is_refused_and_force_overrides_loudly(pypi: Index, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    wheel = make_wheel(tmp_path, "bk-unverified", f"0.1.0{LOCAL}", verified=False)
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    target = target_for(pypi.url, tmp_path, env)
    before = listing(pypi.packages)
    with pytest.raises(VerifyError, match=r"has not been verified"):
        pub.publish([wheel], target, env=env)
    write_record(wheel, passed=False)
    with pytest.raises(VerifyError, match=r"failed verification: sm_120a: no FP4"):
        pub.publish([wheel], target, env=env)
    write_record(wheel, passed=True, sha256="0" * 64)
    with pytest.raises(VerifyError, match=r"changed since it was verified"):
        pub.publish([wheel], target, env=env)
    assert listing(pypi.packages) == before
    capsys.readouterr()
    result = pub.publish([wheel], target, env=env, force=True)
    assert result.wheels[0].status == "uploaded" and result.wheels[0].verified is False
    err = capsys.readouterr().err
    assert "going on because of --force" in err and "PUBLISHING AN UNVERIFIED WHEEL" in err


def test_all_wheels_are_checked_before_any_upload(pypi: Index, tmp_path: Path) -> None:
    good = make_wheel(tmp_path, "bk-batch-good", f"0.1.0{LOCAL}")
    bad = make_wheel(tmp_path, "bk-batch-bad", f"0.1.0{LOCAL}", verified=False)
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    before = listing(pypi.packages)
    with pytest.raises(VerifyError):
        pub.publish([good, bad], target_for(pypi.url, tmp_path, env), env=env)
    assert listing(pypi.packages) == before


# ---------------------------------------------------------------------------- static folder


def test_static_folder_is_a_valid_index_for_pip(tmp_path: Path) -> None:
    env = clean_env()
    folder = tmp_path / "static"
    target = target_for(folder.as_uri(), tmp_path, env)
    assert (target.kind, target.simple_url) == ("static", f"{folder.as_uri()}/simple/")
    first = make_wheel(tmp_path / "w1", "bk-static", f"0.3.20{LOCAL}", value="old")
    second = make_wheel(tmp_path / "w2", "bk-static", f"0.3.21{LOCAL}", value="new")
    assert pub.publish([first], target, env=env).wheels[0].status == "copied"
    assert pub.publish([second], target_for(str(folder), tmp_path, env), env=env).wheels[0].imports == {"bk_static": "ok"}
    page = (folder / "simple" / "bk-static" / "index.html").read_text()
    assert first.name in page and second.name in page
    assert oct((folder / second.name).stat().st_mode & 0o777) == oct(0o644)
    assert not [p for p in folder.rglob("*") if p.name.startswith(".")]
    assert pip_install_import(f"{folder.as_uri()}/simple", f"bk-static==0.3.20{LOCAL}", "bk_static", tmp_path) == "old"
    # The same bytes again: a success that changes nothing; other bytes under that version: refused.
    before = listing(folder)
    assert pub.publish([second], target, env=env).wheels[0].status == "unchanged"
    other = make_wheel(tmp_path / "w3", "bk-static", f"0.3.21{LOCAL}", value="other")
    with pytest.raises(PublishError, match=r"^version 0\.3\.21\S+ is already on \S+ with other bytes .*"
                                           r"\(bump the build \(a new local version label\) and publish again"):
        pub.publish([other], target, env=env)
    assert listing(folder) == before


@pytest.mark.parametrize("project", ["bk-interrupted", "bk-brand-new"])
def test_static_folder_unchanged_when_regeneration_is_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  project: str) -> None:
    env = clean_env()
    folder = tmp_path / "static"
    target = target_for(str(folder), tmp_path, env)
    pub.publish([make_wheel(tmp_path / "w1", "bk-interrupted", f"0.1.0{LOCAL}")], target, env=env)
    before = listing(folder)
    real_write = static_index._atomic_write
    calls = []

    def second_page_fails(path: Path, text: str) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_write(path, text)

    monkeypatch.setattr(static_index, "_atomic_write", second_page_fails)
    with pytest.raises(DiskFullError, match=rf"^no space left in {folder} \(the index\) during publishing .* needed "
                                            r"there \(the wheel and its pages, the folder unchanged\), .* free \(free space there"):
        pub.publish([make_wheel(tmp_path / "w2", project, f"0.2.0{LOCAL}")], target, env=env)
    assert len(calls) == 2
    assert listing(folder) == before  # same files, byte for byte: no new wheel, no temp files
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_dir()) == ["simple", "simple/bk-interrupted"]


# ---------------------------------------------------------------------------- targets and secrets


def test_target_resolution_precedence_and_sources(tmp_path: Path) -> None:
    indexes = tmp_path / "indexes.toml"
    indexes.write_text('internal = "https://user.example/pypi/"\n'
                       '[devpi]\nurl = "https://devpi.example/team/prod/"\nsimple = "https://devpi.example/team/prod/+simple/"\n')
    pypirc = tmp_path / "pypirc"
    pypirc.write_text("[distutils]\nindex-servers = corp\n[corp]\nrepository = https://corp.example/\n"
                      "username = bob\npassword = hunter2-secret\n")
    recipe_publish = Publish(target="internal", targets={"internal": "https://recipe.example/", "other": "./out"})
    env = clean_env(BUILD_KERNEL_INDEXES=str(indexes), HOME=str(tmp_path))
    # The user's file overrides the recipe's target of the same name; BUILD_KERNEL_INDEXES points at it.
    t = pub.resolve_target(None, recipe_publish, env=env, pypirc=pypirc)
    assert (t.url, t.simple_url, t.source) == ("https://user.example/pypi/", "https://user.example/pypi/simple/", str(indexes))
    assert pub.resolve_target("devpi", recipe_publish, env=env, pypirc=pypirc).simple_url.endswith("/team/prod/+simple/")
    static = pub.resolve_target("other", recipe_publish, env=env, pypirc=pypirc)
    # A recipe's relative folder is relative to where the user is, as --to's (test_publish_order.py).
    assert static.kind == "static" and static.path == (Path.cwd() / "out").resolve()
    corp = pub.resolve_target("corp", recipe_publish, env=env, pypirc=pypirc)
    assert (corp.url, corp.pypirc) == ("https://corp.example/", pypirc)
    assert "hunter2-secret" in corp.secrets and corp.redact("x hunter2-secret y") == "x *** y"
    with pytest.raises(PublishError, match=r"unknown index 'nope'.*known: devpi, internal, other"):
        pub.resolve_target("nope", recipe_publish, env=env, pypirc=pypirc)
    with pytest.raises(PublishError, match=r"no publish target"):
        pub.resolve_target(None, Publish(), env=env, pypirc=pypirc)
    named = pub.resolve_target("https://a:b%2Fc@idx.example/", env=clean_env(TWINE_PASSWORD="tw-pw"),
                               indexes_file=indexes, pypirc=pypirc)
    assert (named.url, named.username, named.password) == ("https://idx.example/", "a", "b/c")
    assert named.redact("see https://a:b%2Fc@idx.example/ and b/c and tw-pw") == "see https://a:***@idx.example/ and *** and ***"


def test_wheel_modules_from_top_level_or_package_dirs(tmp_path: Path) -> None:
    assert pub.wheel_modules(make_wheel(tmp_path / "a", "bk-mods", "1.0", top_level=True)) == ["bk_mods"]
    assert pub.wheel_modules(make_wheel(tmp_path / "b", "bk-mods", "1.0")) == ["bk_mods"]


def test_cli_has_the_publish_command() -> None:
    """The CLI tests below run `publish`; its absence is a failure, not a reason to skip them."""
    from build_kernel import cli

    assert "publish" in cli.cli.commands


def test_cli_publish_never_prints_the_password(pypi: Index, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "bk-cli", f"0.3.21{LOCAL}")
    home = {"HOME": str(tmp_path), "BUILD_KERNEL_INDEXES": str(tmp_path / "none.toml")}
    # The URL's (wrong) password wins over TWINE_PASSWORD (the right one): denied, and neither is shown.
    env = {**home, "TWINE_USERNAME": USER, "TWINE_PASSWORD": PASSWORD}
    denied = run_cli("publish", str(wheel), "--to", pypi.url.replace("http://", f"http://{USER}:{WRONG}@"),
                     env={**clean_env(), **env})
    assert denied.returncode == 8, denied.stderr
    assert "error: index" in denied.stderr and "refused the credentials" in denied.stderr
    assert PASSWORD not in denied.stderr + denied.stdout and WRONG not in denied.stderr + denied.stdout
    ok = run_cli("--json", "publish", str(wheel), "--to", pypi.url,
                 env={**clean_env(), **home, "TWINE_USERNAME": USER, "TWINE_PASSWORD": PASSWORD})
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["wheels"][0]["status"] == "uploaded" and data["wheels"][0]["imports"] == {"bk_cli": "ok"}
    assert PASSWORD not in ok.stdout + ok.stderr


def test_cli_publish_with_a_recipe_to_its_static_folder(project: Path, tmp_path: Path) -> None:
    write_series(project, "s", "v1", {})
    recipe_path = write_recipe(project, "shelf", f"""
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{'a' * 40}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["9.0a"]
        [verify]
        import_modules = ["bk_recipe", "bk_recipe.extra"]
        [publish]
        target = "shelf"
        [publish.targets]
        shelf = "shelf-dir"
        """)
    wheel = make_wheel(tmp_path / "w", "bk-recipe", f"0.3.21{LOCAL}", extra={"bk_recipe/extra.py": "X = 1\n"})
    env = {**clean_env(), "HOME": str(tmp_path), "BUILD_KERNEL_INDEXES": str(tmp_path / "none.toml")}
    # Run from the project: a relative target is relative to where the user is.
    proc = run_cli("--json", "publish", "--recipe", str(recipe_path), str(wheel), env=env, cwd=project)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["target"]["url"] == (project / "shelf-dir").as_uri()
    assert data["wheels"][0]["imports"] == {"bk_recipe": "ok", "bk_recipe.extra": "ok"}
    assert (project / "shelf-dir" / "simple" / "bk-recipe" / "index.html").is_file()
