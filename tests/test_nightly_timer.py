"""Scheduling and the morning report of `build-kernel nightly`: the systemd service + timer as written, checked by
the real `systemd-analyze verify`; the cron line run by a real /bin/sh; the report of a real (conflict) night
POSTed to a real local webhook named in the user config."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.conftest import REPO_ROOT, run_cli, write_recipe

needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


@needs_systemd
@pytest.mark.parametrize("scope", ["--user", "--system"])
def test_the_timer_units_are_written_and_verified(tmp_path: Path, scope: str) -> None:
    units, state = tmp_path / "units", tmp_path / "state"
    proc = run_cli("nightly", "--recipe", "demo-cppext", "--state-dir", str(state), "--install-timer", scope,
                   "--unit-dir", str(units), "--at", "03:15", "--json")
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert said["verified"] == "systemd-analyze verify passed"
    service = (units / "build-kernel-nightly-demo-cppext.service").read_text()
    timer = (units / "build-kernel-nightly-demo-cppext.timer").read_text()
    assert f"ExecStart={sys.executable} -m build_kernel nightly --recipe demo-cppext --state-dir {state}" in service
    assert "Type=oneshot" in service and "StandardOutput=journal" in service
    assert ("User=" in service) == (scope == "--system")
    assert "OnCalendar=*-*-* 03:15:00" in timer and "Persistent=true" in timer
    assert "Unit=build-kernel-nightly-demo-cppext.service" in timer
    # The files as written, verified again here by systemd itself (the timer with the service it starts).
    check = subprocess.run(["systemd-analyze", "verify", units / "build-kernel-nightly-demo-cppext.service",
                            units / "build-kernel-nightly-demo-cppext.timer"], check=False, capture_output=True,
                           text=True)
    assert check.returncode == 0 and "build-kernel-nightly" not in check.stdout + check.stderr, check.stderr
    assert said["enable"].endswith("enable --now build-kernel-nightly-demo-cppext.timer" +
                                   (" (and `loginctl enable-linger` so it runs while you are logged out)"
                                    if scope == "--user" else ""))


@needs_systemd
def test_a_unit_systemd_refuses_is_never_written(tmp_path: Path) -> None:
    """A unit whose ExecStart systemd cannot run (an interpreter path that is not there) is refused by verify."""
    from build_kernel.nightly import timer
    from build_kernel.stages.serve import unit

    service, timer_text = timer.render("demo-cppext", tmp_path / "state", REPO_ROOT, {"PATH": "/usr/bin"})
    broken = service.replace(f"ExecStart={sys.executable}", "ExecStart=relative/python")
    with pytest.raises(timer.TimerError, match="systemd-analyze verify refuses the unit"):
        unit.verify(broken, "build-kernel-nightly-demo-cppext", {"PATH": "/usr/bin:/bin"},
                    also={"build-kernel-nightly-demo-cppext.timer": timer_text}, error=timer.TimerError, hint="x")


def test_a_bad_time_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("nightly", "--recipe", "demo-cppext", "--state-dir", str(tmp_path), "--cron", "--at", "25:00")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: --at '25:00' is not a time of day (write HH:MM, e.g. --at 02:30)"


def test_the_cron_line_runs_in_sh(tmp_path: Path) -> None:
    """The printed line's command, run by /bin/sh as cron would (with --dry-run added: nothing is built)."""
    state, cache = tmp_path / "st%ate", tmp_path / "cache"
    proc = run_cli("nightly", "--recipe", "demo-cppext", "--state-dir", str(state), "--cron", "--at", "4:05")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    minute, hour, dom, month, dow, command = line.split(" ", 5)
    assert (minute, hour, dom, month, dow) == ("5", "4", "*", "*", "*")
    state.mkdir()
    runnable = command.replace(" >> ", " --dry-run >> ", 1).replace("\\%", "%")  # cron itself unescapes %
    done = subprocess.run(["/bin/sh", "-c", runnable], check=False, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BUILD_KERNEL_CACHE_DIR": str(cache)})
    assert done.returncode == 0, (state / "cron.log").read_text()
    # A dry run fetches nothing: the commit is asked of the server, the series is checked once a night fetched it.
    assert "tonight would: fetch 806180d73196, then choose the series and build" in (state / "cron.log").read_text()


class _Hook(http.server.BaseHTTPRequestHandler):
    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.got.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_conflict_night_reports_first_and_posts_to_the_webhook(tmp_path: Path, project: Path) -> None:
    """A real night on the bundled miniature whose only patch does not apply: no compile, exit 5, the report's
    first lines say no new wheel and why, and the user config's webhook receives the same as JSON. Its torch is
    `nightly` on a local PEP 503 index (PyTorch's is not reachable here): resolved through the lock's code by pip,
    recorded as moved, and not written to the lock, since the night built nothing with it."""
    from tests.test_wheel_pins import NIGHTLY, OLD, RELEASE, LocalIndex

    torch_index = LocalIndex(tmp_path / "torch-index")
    torch_index.publish(RELEASE, OLD, NIGHTLY)
    series = project / "patches" / "minicppext" / "v1"
    series.mkdir(parents=True)
    (series / "0001-title.patch").write_text("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# not the title\n"
                                             "+# the title\n")
    (series / "series").write_text("0001-title.patch\n")
    from build_kernel.series import write_lock

    write_lock(series)
    text = (REPO_ROOT / "recipes" / "demo-cppext.toml").read_text()
    recipe = write_recipe(project, "hooked", text.replace('torch = "existing"',
                                                          f'torch = "nightly"\ntorch_index = "{torch_index.url}"'))
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "config.toml"
    config.write_text(f'[nightly]\nwebhook = "http://127.0.0.1:{server.server_port}/hook"\n')
    try:
        proc = run_cli("nightly", "--recipe", str(recipe), "--state-dir", str(tmp_path / "state"),
                       "--night", "2026-02-01", env={"BUILD_KERNEL_CONFIG": str(config),
                                                     "BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")})
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 5, proc.stderr
    first = proc.stdout.splitlines()[:5]
    assert first[0] == "# hooked 2026-02-01: no new wheel, conflict"
    assert first[2].startswith("**Why:** no version of series minicppext applies at ")
    assert "0001-title.patch (README.md hunk #1 (line 1): expected '# not the title', found '# minicppext')" in first[2]
    assert first[4].startswith("**What changed:** upstream main: ")
    assert f"lock: toolchain.torch: none -> {NIGHTLY} (torch-{NIGHTLY}-py3-none-any.whl, sha256 " in first[4]
    [posted] = _Hook.got
    assert posted["headline"] == first[0][2:] and posted["new_wheel"] is False
    assert posted["record"]["series"]["conflict"]["first_bad_commit"] is None  # no good night to bisect from
    assert json.loads((tmp_path / "state" / "report.json").read_text())["headline"] == posted["headline"]
    [moved] = posted["record"]["lock_changes"]
    assert moved["pin"] == "toolchain.torch" and moved["from"] is None and moved["to"].startswith(NIGHTLY)
    assert not recipe.with_suffix(".lock").exists()  # moved only by a night that builds with it
