"""An index with a lock on it: a real pypiserver whose uploads, downloads and listings all need alice's password
(htpasswd). `publish` without credentials is refused in one line (exit 8, nothing uploaded); with them from the
environment, the netrc file or keyring it uploads, and the install-back (pip, its own configuration switched off)
gets in with the same. No output, `--json`, log or file the run leaves holds the password.

Real pypiserver, twine and pip; keyring's backend is a TEST DOUBLE (tests/keyring_double: no Secret Service here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from build_kernel.errors import PublishError
from build_kernel.stages import publish as pub
from tests.conftest import REPO_ROOT, run_cli
from tests.test_publish import LOCAL, USER, Index, clean_env, listing, make_wheel, pypiserver

PASSWORD = "L0cked-index/pa55word!"  # a '/' and a '!': percent-encoded inside a URL, which is looked for too
SECRETS = (PASSWORD, quote(PASSWORD, safe=""))


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """pypiserver `-a update,download,list`: nothing, not even the simple page, without the password."""
    with pypiserver(tmp_path_factory.mktemp("locked-pypi"), PASSWORD, "update,download,list") as index:
        yield index


def _home(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user with no credentials anywhere (an empty HOME, keyring's null backend) but `extra`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return clean_env(**{"HOME": str(home), "BUILD_KERNEL_INDEXES": str(home / "none.toml"),
                        "NETRC": str(home / ".netrc"), "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
                        **extra})


def _no_secret_anywhere(tmp_path: Path, *outputs: str, allowed: tuple[Path, ...] = ()) -> None:
    """Every output, and every file the run left under tmp_path (logs, records, the wheel's folder), but the
    credential stores the test itself wrote (`allowed`), without the password."""
    for text in outputs:
        assert not any(s in text for s in SECRETS), text[-500:]
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and path not in allowed:
            data = path.read_bytes()
            assert not any(s.encode() in data for s in SECRETS), path


def test_without_credentials_the_locked_index_is_one_line_exit_8_nothing_uploaded(locked: Index,
                                                                                   tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-locked-none", f"0.1.0{LOCAL}")
    before = listing(locked.packages)
    proc = run_cli("--json", "publish", str(wheel), "--to", locked.url, env=_home(tmp_path))
    assert proc.returncode == 8, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == [f"error: no credentials for index {locked.url} (set TWINE_USERNAME/TWINE_PASSWORD, or store "
                      "them in keyring or ~/.pypirc)"], proc.stderr
    assert listing(locked.packages) == before


@pytest.mark.parametrize("source", ["env", "netrc", "keyring"])
def test_credentials_from_the_environment_netrc_or_keyring_open_the_lock_for_upload_and_install_back(
        locked: Index, tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    project = f"bk-locked-{source}"
    wheel = make_wheel(tmp_path / "w", project, f"0.2.0{LOCAL}", top_level=True)
    allowed: tuple[Path, ...] = ()
    if source == "env":
        env = _home(tmp_path, TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
        said = "TWINE_USERNAME/TWINE_PASSWORD"
    elif source == "netrc":
        netrc = tmp_path / "home" / ".netrc"
        env = _home(tmp_path)
        netrc.write_text(f"machine 127.0.0.1\n  login {USER}\n  password {PASSWORD}\n")
        netrc.chmod(0o600)
        allowed, said = (netrc,), f"{netrc} (machine 127.0.0.1)"
    else:
        store = tmp_path / "keyring.json"
        store.write_text(json.dumps({locked.url: {USER: PASSWORD}}))
        env = _home(tmp_path, PYTHON_KEYRING_BACKEND="file_keyring.FileKeyring", BK_TEST_KEYRING=str(store),
                    PYTHONPATH=str(REPO_ROOT / "tests" / "keyring_double"))
        allowed, said = (store,), f"keyring (service {locked.url})"
        # In this process too (keyring picks its backend from os.environ, as in the CLI's process below).
        import keyring.core

        monkeypatch.syspath_prepend(str(REPO_ROOT / "tests" / "keyring_double"))
        from file_keyring import FileKeyring  # type: ignore[import-not-found]

        monkeypatch.setenv("BK_TEST_KEYRING", str(store))
        monkeypatch.setattr(keyring.core, "_keyring_backend", FileKeyring())
    target = pub.resolve_target(locked.url, env=env)
    assert (target.username, target.password, target.credential_source) == (USER, PASSWORD, said)
    # The CLI, as text and as --json; then the library with a log file: the upload and the install-back.
    proc = run_cli("--json", "publish", str(wheel), "--to", locked.url, env=env)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)["wheels"][0]
    assert (done["status"], done["imports"]) == ("uploaded", {project.replace("-", "_"): "ok"})
    assert (locked.packages / wheel.name).read_bytes() == wheel.read_bytes()
    again = run_cli("publish", str(wheel), "--to", locked.url, env=env)
    assert again.returncode == 0 and "is already published on" in again.stderr and "(same bytes)" in again.stderr
    log = tmp_path / "publish.log"
    result = pub.publish([wheel], target, env=env, log_path=log)
    assert result.wheels[0].status == "unchanged" and "Looking in indexes" in log.read_text()
    _no_secret_anywhere(tmp_path, proc.stdout, proc.stderr, again.stdout, again.stderr,
                        json.dumps(result.to_dict()), allowed=allowed)


def test_a_wrong_netrc_password_is_refused_and_a_broken_netrc_is_one_line(locked: Index, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-locked-wrong", f"0.3.0{LOCAL}")
    env = _home(tmp_path)
    netrc = tmp_path / "home" / ".netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password not-{PASSWORD}\n")
    netrc.chmod(0o600)
    before = listing(locked.packages)
    proc = run_cli("publish", str(wheel), "--to", locked.url, env=env)
    assert proc.returncode == 8
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")] == [
        f"error: index {locked.url} refused the credentials (check {netrc} (machine 127.0.0.1))"]
    assert listing(locked.packages) == before and f"not-{PASSWORD}" not in proc.stderr + proc.stdout
    netrc.write_text(f"machine 127.0.0.1 login {USER} pasword {PASSWORD}\n")  # misspelt: the next word is quoted
    with pytest.raises(PublishError) as broken:
        pub.resolve_target(locked.url, env=env)
    assert broken.value.message == f"{netrc}: line 1: bad follower token (a word, not shown)"
    assert broken.value.hint is not None and broken.value.hint.startswith("fix it (machine HOST login USER password ")
