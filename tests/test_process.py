"""The shared pieces: the process module (run, probe, stream, spawn, redact) and atomic writes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from build_kernel import atomic, process
from build_kernel.errors import BuildError, FetchError


def test_run_failure_is_the_domain_error_with_command_code_tail_and_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "x.log"
    script = "import sys; print('working'); print('the real reason', file=sys.stderr); sys.exit(3)"
    with pytest.raises(BuildError) as exc:
        process.run([sys.executable, "-c", script], error=BuildError, what="doing x", fix="do y", log=log)
    message = str(exc.value)
    assert message.startswith("doing x: `") and "exited 3: the real reason; full log: " in message
    assert message.endswith("(do y)") and "\n" not in message
    assert log.read_text().splitlines()[-1] == "[exit 3]" and "working" in log.read_text()


def test_run_missing_program_and_timeout_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match=r"^cloning: no-such-tool-here not found \(install no-such-tool-here"):
        process.run(["no-such-tool-here"], error=FetchError, what="cloning")
    with pytest.raises(BuildError, match=r"did not finish in 0.2 s"):
        process.run([sys.executable, "-c", "import time; time.sleep(5)"], error=BuildError, what="sleeping",
                    timeout=0.2)


def test_secrets_never_reach_the_log_or_the_message(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    script = "import sys; print('https://bob:hunter2@idx/ token s3cr3t'); sys.exit(1)"
    with pytest.raises(BuildError) as exc:
        process.run([sys.executable, "-c", script], error=BuildError, what="upload", log=log, secrets=["s3cr3t"])
    for text in (str(exc.value), log.read_text()):
        assert "hunter2" not in text and "s3cr3t" not in text and "bob:***@" in text


def test_probe_answers_none_for_missing_failing_or_hanging_tools() -> None:
    assert process.probe([sys.executable, "-c", "print('ok')"]) == "ok\n"
    assert process.probe(["no-such-tool-here"]) is None
    assert process.probe([sys.executable, "-c", "raise SystemExit(1)"]) is None
    assert process.probe([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2) is None


def test_stream_tees_lines_to_the_log_and_the_callback(tmp_path: Path) -> None:
    seen: list[str] = []
    log = tmp_path / "build.log"
    result = process.stream([sys.executable, "-c", "print('[1/2] a'); print('[2/2] b'); raise SystemExit(4)"],
                            on_line=seen.append, what="building", log=log)
    assert result.returncode == 4 and seen == ["[1/2] a\n", "[2/2] b\n"] and result.output == "".join(seen)
    assert log.read_text().endswith("[1/2] a\n[2/2] b\n[exit 4]\n")


def _still_running(pid: int, within: float = 10.0) -> bool:
    """Whether `pid` is still running (not gone, not a zombie) after waiting up to `within` seconds."""
    def running() -> bool:
        stat = Path(f"/proc/{pid}/stat")
        try:
            return "Z" not in stat.read_text().split()[2]
        except FileNotFoundError:
            return False
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and running():
        time.sleep(0.05)
    return running()


def test_spawn_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    # A "server" that starts a child of its own: stop() must end both.
    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(c.pid)); print('listening', flush=True); time.sleep(60)")
    server = process.spawn([sys.executable, "-c", script], what="serving", log=tmp_path / "server.log")
    deadline = time.monotonic() + 20
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert server.poll() is None and "listening" in "\n".join(server.tail())
    code = server.stop(grace=5)
    assert code != 0 and server.poll() is not None
    alive = _still_running(child)
    assert not alive, "the server's own child outlived stop()"


def test_spawn_stop_ends_the_children_of_a_leader_that_already_exited(tmp_path: Path) -> None:
    # sglang's launcher can die and leave its scheduler (holding GPU memory) running.
    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys; "
              f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(c.pid)); sys.exit(3)")
    server = process.spawn([sys.executable, "-c", script], what="serving", log=tmp_path / "server.log")
    assert server.wait(timeout=20) == 3
    child = int(pid_file.read_text())
    assert Path(f"/proc/{child}").exists()
    assert server.stop(grace=5) == 3
    alive = _still_running(child)
    assert not alive, "the exited leader's child outlived stop()"


def test_spawn_of_a_missing_program_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"^serving: no-such-server not found"):
        process.spawn(["no-such-server"], error=BuildError, what="serving", log=tmp_path / "s.log")


def test_atomic_folder_is_whole_or_absent(tmp_path: Path) -> None:
    final = tmp_path / "tree"
    with pytest.raises(RuntimeError), atomic.folder(final) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("interrupted")
    assert not final.exists() and not list(tmp_path.iterdir())
    with atomic.folder(final) as tmp:
        (tmp / "whole").write_text("1")
    with atomic.folder(final, replace=True) as tmp:
        (tmp / "new").write_text("2")
    assert sorted(p.name for p in final.iterdir()) == ["new"] and [p.name for p in tmp_path.iterdir()] == ["tree"]


def test_atomic_write_keeps_the_old_content_on_failure_and_the_usual_mode(tmp_path: Path) -> None:
    path = tmp_path / "index.html"
    atomic.write_text(path, "old")
    os.chmod(path, 0o644)

    with pytest.raises(TypeError):
        atomic.write_bytes(path, "not bytes")  # type: ignore[arg-type]  # fails mid-write
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["index.html"]
    atomic.write_text(path, "new")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o666 & ~mask


def test_a_program_that_is_not_executable_or_a_folder_that_is_gone_is_named(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\necho hi\n")  # no exec bit
    with pytest.raises(BuildError, match=rf"^running the tool: {script} is not executable \(Permission denied\) "
                                          rf"\(chmod \+x {script}, or reinstall it\)$"):
        process.run([script], error=BuildError, what="running the tool")
    gone = tmp_path / "gone"
    with pytest.raises(BuildError, match=rf"^building: the folder to run python3 in, {gone}, does not exist"):
        process.run(["python3", "-c", "pass"], error=BuildError, what="building", cwd=gone)


def test_lines_streams_stdout_and_fails_with_the_domain_error_unless_tolerated() -> None:
    from build_kernel.errors import VerifyError

    script = "import sys; print('a'); print('b'); print(sys.argv[1], file=sys.stderr); sys.exit(int(sys.argv[2]))"
    assert list(process.lines([sys.executable, "-c", script, "fine", "0"], what="x")) == ["a\n", "b\n"]
    # A failure a caller expects (cuobjdump: "does not contain device code") is no error.
    tolerated = process.lines([sys.executable, "-c", script, "no device code", "1"], what="x", tolerate="no device code")
    assert list(tolerated) == ["a\n", "b\n"]
    with pytest.raises(VerifyError, match=r"^dumping: `.*` exited 2: the reason \(install it\)$"):
        list(process.lines([sys.executable, "-c", script, "the reason", "2"], error=VerifyError, what="dumping",
                           fix="install it"))
    with pytest.raises(VerifyError, match=r"dumping: .*no-such-tool not found"):
        list(process.lines(["/no/such/dir/no-such-tool"], error=VerifyError, what="dumping"))


def test_redact_hides_whole_secrets_never_letters_inside_words() -> None:
    # Seen (issue 66): TWINE_PASSWORD=e turned every message into `cannot r***ach ... is th*** ind***x running?`.
    message = "cannot reach http://localhost:18090/: is the index running?"
    assert process.redact(message, ["e"]) == message
    assert process.redact("password e given, user:e, 'e'", ["e"]) == "password *** given, user:***, '***'"
    # A secret of MIN_SECRET characters or more is hidden wherever it is, also glued to other text.
    long = "s3cr3t-Pa55"
    assert len(long) >= process.MIN_SECRET
    assert process.redact(f"x{long}y and Bearer {long}", [long]) == "x***y and Bearer ***"
    # URL userinfo always goes, whatever the password's length; the longest secret first.
    assert process.redact("https://bob:e@idx/ and ab", ["e", "ab"]) == "https://bob:***@idx/ and ***"
    assert process.redact("a.b+c ab", ["a.b+c"]) == "*** ab"  # a secret's regex characters are literal
    assert process.redact("nothing", ["", "zz"]) == "nothing"
