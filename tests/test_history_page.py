"""The nightly history page in a real headless browser: the system's Chromium driven by Selenium through the
system's chromedriver (Selenium Manager downloads nothing), the page served by a real http.server.

The records are written through the contract's own writer (build_kernel/nightly/record.py), five nights that
cover every outcome a page shows: a build with tests and a wheel, nothing new, a conflict with its first bad
commit, a new series version with a retired patch, a failed build. The page is made by the CLI as a user runs it.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from build_kernel.nightly import record

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
INSTALL = "apt-get install chromium chromium-driver"


def _night(state: Path, night: str, commit: str, outcome: str, *, version: str | None = "v8",
           retired: list[str] | None = None, conflict: dict[str, Any] | None = None,
           build: tuple[float, float] | None = None, tests: tuple[int, int] | None = None,
           wheel: str | None = None, logs: dict[str, str] | None = None, reason: str = "") -> dict[str, Any]:
    rec: dict[str, Any] = {
        "schema": 1, "recipe": "nightly-demo", "night": night, "started": f"{night}T01:00:00+00:00",
        "finished": f"{night}T01:30:00+00:00", "outcome": outcome, "reason": reason or outcome,
        "upstream": {"ref": "main", "commit": commit, "previous_good": None, "commits_since": 3},
        "series": {"name": "sm120", "version": version, "retired": retired or [], "conflict": conflict},
        "lock_changes": [],
        "build": None if build is None else {"archs": ["12.0a"], "wall_s": build[0], "compiler_cpu_s": build[1],
                                             "peak_rss_mb": 2048.0},
        "tests": ({"ran": True, "why_not": None, "per_file": {"tests/test_a.py": {"passed": tests[0], "failed": tests[1],
                                                                                 "skipped": 1}}}
                  if tests else {"ran": False, "why_not": "no GPU on this host", "per_file": {}}),
        "wheel": None if wheel is None else {"name": wheel, "version": "0.3.21.dev20261201", "sha256": "0" * 64,
                                             "published_to": None},
        "logs": logs or {},
    }
    record.write(state, rec)  # type: ignore[arg-type]  # a dict built by hand, checked by the contract's writer
    return rec


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]]]:
    """A state folder of five nights, an index folder with the built nights' wheels, and the page made by the CLI
    (once for the module: the tests only read it)."""
    tmp_path = tmp_path_factory.mktemp("history")
    state, out = tmp_path / "state", tmp_path / "index"
    out.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("build-1.log", "verify-1.log", "build-4.log", "build-5.log"):
        (logs / name).write_text(f"{name}: the stage's output\n")
    wheels = ["sgl_kernel-0.3.21.dev20261201-cp312-abi3-linux_x86_64.whl",
              "sgl_kernel-0.3.21.dev20261204-cp312-abi3-linux_x86_64.whl"]
    for w in wheels:
        (out / w).write_bytes(b"a wheel")
    records = [
        _night(state, "2026-12-01", "a" * 40, "built", build=(1128.0, 1204.5), tests=(120, 2), wheel=wheels[0],
               logs={"build": str(logs / "build-1.log"), "verify": str(logs / "verify-1.log")}),
        _night(state, "2026-12-02", "b" * 40, "unchanged", reason="nothing new since a"),
        _night(state, "2026-12-03", "c" * 40, "conflict", version=None,
               conflict={"patch": "0005-prune-arch-dispatch.patch", "hunk": "CMakeLists.txt hunk 2 (line 120)",
                         "first_bad_commit": "d" * 40}),
        _night(state, "2026-12-04", "e" * 40, "built", version="v12", retired=["0009-cuda13-memcpy-batch.patch"],
               build=(1011.0, 1100.0), tests=(124, 0), wheel=wheels[1], logs={"build": str(logs / "build-4.log")}),
        _night(state, "2026-12-05", "f" * 40, "failed", version="v12", build=(300.0, 310.0),
               logs={"build": str(logs / "build-5.log"), "test": str(tmp_path / "gone.log")}),
    ]
    proc = subprocess.run([sys.executable, "-m", "build_kernel", "nightly-page", "--state-dir", str(state),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out / "history" / "nightly-demo" / "index.html")
    return state, out, records


@pytest.fixture
def served(history: tuple[Path, Path, list[dict[str, Any]]]) -> Iterator[str]:
    out = history[1]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(out), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _browser() -> Any:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(f"no system chromium/chromedriver: {INSTALL}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--window-size=1400,1200"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def test_the_page_in_headless_chromium(history: tuple[Path, Path, list[dict[str, Any]]], served: str) -> None:
    _, out, records = history
    driver = _browser()
    try:
        for url in (f"{served}/history/nightly-demo/index.html",
                    (out / "history" / "nightly-demo" / "index.html").as_uri()):  # a plain folder too
            driver.get(url)
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], f"{url}: console errors {errors}"
            rows = driver.execute_script(
                "return [...document.querySelectorAll('#nights tr[id]')].map(r => [r.id, r.className]);")
            assert sorted(rows) == sorted([f"night-{r['night']}-{r['upstream']['commit'][:12]}", r["outcome"]]
                                          for r in records)
            # Each picture drawn: the svg and what is in it have a size on the page.
            boxes = driver.execute_script("""return [...document.querySelectorAll('svg.plot')].map(s => {
                const r = s.getBoundingClientRect();
                const marks = [...s.querySelectorAll('polyline, circle, rect, path')].map(m => m.getBBox())
                    .filter(b => b.width > 0 && b.height > 0).length;
                return [s.closest('section').id, r.width, r.height, marks];});""")
            assert [b[0] for b in boxes] == ["timeline", "build", "tests"]
            assert all(w > 0 and h > 0 and marks > 0 for _, w, h, marks in boxes), boxes
            hrefs = driver.execute_script("return [...document.querySelectorAll('a')].map(a => a.href);")
            assert len(hrefs) == 2 + 2 + 4  # history.json, index; the two wheels; four logs that exist
            for href in hrefs:
                if href.startswith("http"):
                    with urllib.request.urlopen(href) as response:  # the test's own server
                        assert response.status == 200, href
                else:
                    assert Path(urllib.parse.urlparse(href).path).is_file(), href
        # The index of recipes links the page.
        driver.get(f"{served}/history/index.html")
        assert driver.find_element("css selector", "a").get_attribute("href").endswith("nightly-demo/index.html")
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        driver.quit()


def test_history_json_and_the_timeline(history: tuple[Path, Path, list[dict[str, Any]]]) -> None:
    _, out, records = history
    page = out / "history" / "nightly-demo"
    data = json.loads((page / "history.json").read_text())
    assert [n["night"] for n in data["nights"]] == [r["night"] for r in records]
    conflict = data["nights"][2]
    assert conflict["outcome"] == "conflict" and conflict["conflict"]["first_bad_commit"] == "d" * 40
    assert data["nights"][3]["retired"] == ["0009-cuda13-memcpy-batch.patch"]
    assert data["nights"][0]["tests_passed"] == 120 and data["nights"][0]["wheel_href"].startswith("../../")
    assert data["nights"][4]["logs"] == {"build": "logs/20261205-ffffffffffff/build.log", "test": ""}
    html = (page / "index.html").read_text()
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "conflict: 0005-prune-arch-dispatch.patch" in html and "retired 0009-cuda13-memcpy-batch.patch" in html


def test_the_same_records_make_the_same_bytes(history: tuple[Path, Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    from build_kernel.nightly import history_page

    state, out, _ = history
    again = tmp_path / "again"
    again.mkdir()
    for wheel in out.glob("*.whl"):
        shutil.copy(wheel, again)
    history_page.write(state, again)
    for name in ("index.html", "history.json"):
        assert (again / "history" / "nightly-demo" / name).read_bytes() == \
            (out / "history" / "nightly-demo" / name).read_bytes()


def test_a_broken_record_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "index"
    _night(state, "2026-12-01", "a" * 40, "unchanged")
    (state / "nights" / "20261202-bbbbbbbbbbbb.json").write_text('{"schema": 1, "recipe": "nightly-demo"}')
    proc = subprocess.run([sys.executable, "-m", "build_kernel", "nightly-page", "--state-dir", str(state),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 1
    line, = proc.stderr.strip().splitlines()
    assert "20261202-bbbbbbbbbbbb.json: not a night record" in line and "move it out of nights/" in line
    assert not out.exists()
