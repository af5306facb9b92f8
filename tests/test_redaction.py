"""Redaction hides whole secrets, never letters (issue 66 item 6), through the real publish path.

Seen: with `TWINE_PASSWORD=e`, every letter e of every message became `***` (`cannot r***ach
http://localhost:18090/: is th*** ind***x running?`), which also told anyone reading it the password. Now a secret
shorter than process.MIN_SECRET is warned of once, by name, and hidden only where it stands alone."""

from __future__ import annotations

from pathlib import Path

from build_kernel import process
from tests.conftest import run_cli
from tests.test_errors_publish_verify import VERSION, cli_env
from tests.test_publish import USER, Index, free_port, listing, make_wheel, pypi, write_record  # noqa: F401 (pypi)


def test_a_short_password_leaves_messages_whole_and_is_warned_of_by_name(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-short", VERSION)
    write_record(wheel, passed=True)
    url = f"http://localhost:{free_port()}/"  # nothing listens: twine really tries, and fails to connect
    proc = run_cli("publish", str(wheel), "--to", url, env=cli_env(tmp_path, TWINE_USERNAME=USER, TWINE_PASSWORD="e"))
    assert proc.returncode == 8, proc.stderr
    lines = proc.stderr.splitlines()
    assert f"error: cannot reach {url}: is the index running? (check the URL, the network, and that the index " \
           "server is up)" in lines
    assert "***" not in proc.stderr + proc.stdout
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert warnings == [f"warning: TWINE_PASSWORD is shorter than {process.MIN_SECRET} characters: messages and "
                        "logs hide it only where it stands alone, not inside other words (use a longer password or "
                        "an API token)"]


def test_a_short_password_in_the_url_is_hidden_there_and_where_it_stands_alone(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-short-url", VERSION)
    write_record(wheel, passed=True)
    port = free_port()
    proc = run_cli("publish", str(wheel), "--to", f"http://{USER}:pw@localhost:{port}/", env=cli_env(tmp_path))
    assert proc.returncode == 8, proc.stderr
    assert f"error: cannot reach http://localhost:{port}/: is the index running?" in proc.stderr
    assert ":pw@" not in proc.stderr + proc.stdout
    assert "warning: the password in the target's URL is shorter than" in proc.stderr


def test_a_real_index_refusing_a_short_password_is_said_in_whole_words(pypi: Index, tmp_path: Path) -> None:  # noqa: F811
    # The real pypiserver (tests/test_publish.py) wants alice's long password: "e" is refused, and the line that
    # says so, full of e's, arrives whole; the log of the upload too.
    wheel = make_wheel(tmp_path / "w", "bk-short-real", VERSION)
    write_record(wheel, passed=True)
    before = listing(pypi.packages)
    env = cli_env(tmp_path, TWINE_USERNAME=USER, TWINE_PASSWORD="e")
    proc = run_cli("publish", str(wheel), "--to", pypi.url, env=env)
    assert proc.returncode == 8, proc.stderr
    assert f"error: index {pypi.url} refused the credentials (check TWINE_USERNAME/TWINE_PASSWORD)" in \
        proc.stderr.splitlines()
    assert "***" not in proc.stderr + proc.stdout
    assert listing(pypi.packages) == before
