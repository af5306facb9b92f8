"""Ctrl-C (issue 66, item 5): "interrupted during <step>; run the same command to resume", exit 130, nothing
half-written, and the same command resumes.

A real SIGINT to the process group of a real build (the miniature's CMake/nvcc build, forced, in a copy of the
session's cache), as a terminal sends it; and programs that really die of SIGINT, or say ninja's "interrupted by user", when the Ctrl-C
reached only them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_kernel.errors import Interrupted
from build_kernel.stages.builder import runner
from tests.conftest import REPO_ROOT, DemoBuild
from tests.test_build import BUILD_CACHE

# A terminal's Ctrl-C goes to the whole foreground group: the CLI, and the build's programs under it.
SAYS = "error: interrupted during build 12.0a with "


# SIGINT at its default, as in a shell, whatever this test process (an xdist worker) does with it: an ignored
# signal stays ignored across exec, and Python would then never raise KeyboardInterrupt.
AS_IN_A_SHELL = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                 "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"]


def _interrupt_when_compiling(cmd: list[str], env: dict[str, str], logs: Path) -> subprocess.CompletedProcess[str]:
    # Its own session: a group of its own, as a terminal's job.
    before = {log: log.stat().st_size for log in logs.glob("*.log")}  # what earlier builds wrote is not this one's
    proc = subprocess.Popen(AS_IN_A_SHELL + cmd[1:], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 900

    def compiling() -> bool:
        for log in logs.glob("*.log"):
            with log.open("rb") as fh:
                fh.seek(before.get(log, 0))
                if b"[1/" in fh.read():
                    return True
        return False

    # Compiling has started when ninja's first progress line is in the build log (a barrier, not a delay).
    while proc.poll() is None and time.monotonic() < deadline:
        if compiling():
            break
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.slow
def test_ctrl_c_during_a_real_build_says_interrupted_exits_130_and_the_same_command_resumes(demo_build: DemoBuild,
                                                                                          tmp_path: Path) -> None:
    """A forced rebuild in a copy of the session's cache (where a plain build is a cache hit), interrupted while it
    compiles, then the same command again: it recompiles everything, and the session's wheel (with its verify
    record) and the copy's cached wheel stay as they were. One real build where there were two: this test's own
    in a fresh cache, and test_build's forced rebuild, whose assertions are the second half here."""
    cache, out = tmp_path / "cache", tmp_path / "wheels"
    session_wheel = demo_build.wheel.read_bytes()
    for name in BUILD_CACHE:
        if (demo_build.cache / name).is_dir():
            shutil.copytree(demo_build.cache / name, cache / name, symlinks=True)
        elif (demo_build.cache / name).is_file():
            shutil.copy2(demo_build.cache / name, cache / name)
    env = {**os.environ, "NO_COLOR": "1", "BUILD_KERNEL_CACHE_DIR": str(cache),
           "BUILD_KERNEL_OUTPUT_DIR": str(tmp_path / "hit")}
    cmd = [sys.executable, "-m", "build_kernel", "build", "--recipe", "demo", "--arch", "12.0a"]
    hit = subprocess.run([*cmd, "--json"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert hit.returncode == 0 and json.loads(hit.stdout)["cached"] is True, hit.stdout + hit.stderr
    cached = {p: p.read_bytes() for p in (cache / "wheels").rglob("*.whl")}
    assert list(cached.values()) == [session_wheel]
    env["BUILD_KERNEL_OUTPUT_DIR"], cmd = str(out), [*cmd, "--force"]
    stopped = _interrupt_when_compiling(cmd, env, cache / "logs")
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    assert "Traceback" not in stopped.stderr and "build failed" not in stopped.stderr
    [said] = [line for line in stopped.stderr.splitlines() if line.startswith("error: ")]
    assert said.startswith(SAYS) and said.endswith("; run the same command to resume"), said
    # Nothing half-delivered: no wheel in the output folder, the cache's wheels as they were.
    assert not list(out.glob("*.whl"))
    assert {p: p.read_bytes() for p in (cache / "wheels").rglob("*.whl")} == cached
    again = subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    [wheel] = out.glob("*.whl")
    assert f"{wheel}  (built," in again.stdout
    # --force recompiled everything (this attempt's part of the log: each run appends to it).
    [log_path] = (cache / "logs").glob("demo-*.log")
    log = log_path.read_text().split("# build-kernel ")[-1]
    for source in ("activation.cu", "nvfp4_quant.cu", "common_extension.cc"):
        assert re.search(rf"-c \S*/csrc/{re.escape(source)}\b", log), source
    assert "ninja: no work to do" not in log
    assert demo_build.wheel.read_bytes() == session_wheel  # the session's wheel untouched
    assert json.loads(demo_build.wheel.with_name(demo_build.wheel.name + ".verify.json").read_text())["passed"]


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "build.py"
    path.write_text("import os, signal, sys\n" + body)
    return [sys.executable, str(path)]


@pytest.mark.parametrize("body", [
    # ninja's own words when the Ctrl-C reached it, and a front end (pypa/build) that then exits 1
    'print("[1/7] compiling"); print("ninja: build stopped: interrupted by user."); '
    'print("ERROR Backend subprocess exited when trying to invoke build_wheel"); sys.exit(1)\n',
    # a front end that dies of the SIGINT itself
    "signal.signal(signal.SIGINT, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGINT)\n",
], ids=["ninja-said-so", "died-of-sigint"])
def test_a_build_whose_programs_got_the_ctrl_c_is_interrupted_not_failed(tmp_path: Path, body: str) -> None:
    with pytest.raises(Interrupted) as caught:
        runner.build_with_retries(_script(tmp_path, body), lambda jobs: dict(os.environ), cwd=tmp_path,
                                  log_path=tmp_path / "build.log", jobs=2, max_oom_retries=2)
    assert caught.value.exit_code == 130 and "run the same command to resume" in caught.value.render()


def test_a_real_build_failure_is_still_a_build_error(tmp_path: Path) -> None:
    from build_kernel.errors import BuildError

    with pytest.raises(BuildError, match=r"build failed: x\.cu:1: error: nope"):
        runner.build_with_retries(_script(tmp_path, 'print("x.cu:1: error: nope"); sys.exit(1)\n'),
                                  lambda jobs: dict(os.environ), cwd=tmp_path, log_path=tmp_path / "build.log",
                                  jobs=2, max_oom_retries=2)
