"""A network that fails (issue 68 item 4), with real servers made to fail: `git daemon` behind a TCP proxy that
cuts a connection after a byte count (measured on an uncut run, halved) or accepts and never answers, a real
pypiserver SIGKILLed once an upload has passed a byte count, and a torch index over HTTP whose answers are
scripted request by request (500, not HTTP at all, silent) to the tool's own page read and to pip. Each fault
is placed by a byte or request count, never by timing; the timeouts are set small through the tool's one place
for them (build_kernel/network.py) and pip's own PIP_TIMEOUT / PIP_RETRIES.

Each case: one error line naming the server and what to do, the exit code of its kind, nothing half-written
(the mirror, the index, the recipe's lock as they were), and the same command succeeds once the server is back.
The servers and cases are the study's (bench/faults/network.py), which runs more of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_bench_script

study = load_bench_script("bench/faults/network.py", "network_faults")
pytestmark = pytest.mark.xdist_group(name="network_faults")


@pytest.fixture(scope="module")
def git_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    world = study.GitWorld(tmp_path_factory.mktemp("git-faults"))
    yield world
    world.close()


def test_git_remote_cut_mid_fetch_keeps_the_mirror_and_a_flaky_one_is_retried(git_world: Any) -> None:
    """The server dies during the commit's transfer, on the attempt and on the retry: exit 4, one line naming the
    remote, the mirror byte for byte as it was. Then the server is back but cuts once more during the files'
    transfer: the tool's one retry fetches it (a warning says so)."""
    first, second = git_world.commits
    cache = git_world.work / "cache-cut"
    assert git_world.fetch(cache, first).returncode == 0
    budget = git_world.half_of(second, first, "commit")
    before = study.snapshot(cache / "mirrors")
    git_world.proxy.set("cut", budget=budget, cuts=99)
    proc = git_world.fetch(cache, second)
    assert proc.returncode == 4, proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert f"cannot fetch {second} from {git_world.url}" in line
    assert "broke 2 times mid-transfer" in line and "run the same command again" in line
    assert sum(1 for c in git_world.proxy.counts if c["down"] == budget) == 2  # the attempt and the one retry
    assert study.snapshot(cache / "mirrors") == before and study.leftovers(cache / "mirrors") == []

    git_world.proxy.set("cut", budget=git_world.half_of(second, first, "files"), cuts=1)
    rerun = git_world.fetch(cache, second)
    assert rerun.returncode == 0, rerun.stderr
    assert "trying once more" in rerun.stderr and study.leftovers(cache / "mirrors") == []
    git_world.proxy.set("pass")


def test_git_server_that_never_answers_is_a_timeout_not_a_hang(git_world: Any) -> None:
    result = study.git_silent(git_world, cap_s=1.0)
    assert result.exit_code == 4
    assert result.error.startswith(f"error: cannot fetch {git_world.commits[0]} from {git_world.url}: fatal: no answer "
                                   "in 1 s (the fetch timeout, BUILD_KERNEL_FETCH_TIMEOUT)")
    assert "raise BUILD_KERNEL_FETCH_TIMEOUT" in result.error
    assert result.kept_unchanged and result.rerun_ok  # no mirror left behind; the server back, it is fetched


def test_pypiserver_killed_mid_upload(tmp_path: Path) -> None:
    world = study.PyPIWorld(tmp_path)
    try:
        result = study.pypiserver_killed_mid_upload(world)
    finally:
        world.close()
    assert result.exit_code == 8
    assert "broke during the upload of bk_faults-0.1.0+fault-py3-none-any.whl" in result.error
    assert "run the same command again" in result.error
    assert result.kept_unchanged  # nothing of the cut upload on the index
    assert result.rerun_ok and result.notes["on_index_after_rerun"]


@pytest.fixture(scope="module")
def index_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    world = study.IndexWorld(tmp_path_factory.mktemp("index-faults"))
    yield world
    world.close()


@pytest.mark.parametrize(("script", "env", "says"), [
    (["500"], {}, "cannot read the index {url}/torch/: HTTP 500 Internal Server Error; not locked"),
    (["not-http"], {}, "the index {url}/torch/ did not answer as an HTTP server does: BadStatusLine"),
    (["silent"], {"BUILD_KERNEL_NETWORK_TIMEOUT": "1"}, "the index {url}/torch/ did not answer in 1 s"),
    (["ok", "500"], {"PIP_RETRIES": "2", "PIP_TIMEOUT": "1"}, "{url} lists it, but pip found no file of it there"),
], ids=["500", "not-http", "silent", "500-to-pip"])
def test_torch_index_failing_is_one_line_and_writes_no_lock(index_world: Any, script: list[str], env: dict[str, str],
                                                            says: str) -> None:
    result = index_world.case("-".join(script), script, "", rerun=False, **env)
    assert result.exit_code == 3
    assert result.error.startswith("error: [toolchain.torch] torch 2.11.0+cu130"), result.error
    assert says.format(url=index_world.server.url) in result.error
    assert result.error.endswith(")")  # the fix, in parentheses
    assert result.kept_unchanged  # no lock written
    if script == ["ok", "500"]:
        assert result.notes["requests"] == 1 + 3 + 1  # the page, pip's 1 + PIP_RETRIES tries, the nearest listed


def test_torch_index_back_the_lock_is_written(index_world: Any) -> None:
    index_world.lock.unlink(missing_ok=True)
    index_world.server.answer("ok")
    proc = index_world.lock_cmd()
    assert proc.returncode == 0, proc.stderr
    assert index_world.lock.is_file()
