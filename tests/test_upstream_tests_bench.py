"""bench/upstream_tests/tests_report.py's pruned-vs-unpruned comparison (issue 42 item 3): file by file, a stand-in only
for an unfinished file that calls no FA3, a timeout explained only when nothing failed; and its pack, which keeps a
module-level skip's reason (issue 70)."""

from __future__ import annotations

import io
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from build_kernel.stages.upstream_tests import runner
from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench" / "upstream_tests"))
from tests_report import _read_junit, _status, _test_seconds, pack, pruned_vs_unpruned


def _row(file: str, status: str = "passed", passed: int = 3, failed: int = 0, skipped: int = 0,
         seconds: float = 10.0) -> dict[str, Any]:
    return {"file": file, "status": status, "passed": passed, "failed": failed, "skipped": skipped,
            "seconds": seconds, "verdict": f"{status} {passed}"}


def test_identical_files_count_and_a_stand_in_covers_only_unfinished_non_fa3_files() -> None:
    pruned = [_row("a.py"), _row("b.py", "unfinished", 1), _row("test_flash_attention.py", "unfinished", 0)]
    unpruned = [_row("a.py"), _row("b.py"), _row("test_flash_attention.py", "failed", 0, 8)]
    later = [_row("b.py"), _row("test_flash_attention.py", "failed", 0, 8)]
    out = pruned_vs_unpruned(pruned, unpruned, later)
    assert out["same_verdict"] == 2 and out["stood_in_by_v8"] == {"b.py": "v8"}
    # v8 has FA3 on: it never stands in for test_flash_attention, which stays a difference to explain.
    assert list(out["different"]) == ["test_flash_attention.py"]
    assert "why" not in out["different"]["test_flash_attention.py"]


def test_a_timeout_is_explained_only_when_nothing_failed() -> None:
    pruned = [_row("k.py", passed=192, seconds=266)]
    out = pruned_vs_unpruned(pruned, [_row("k.py", "timeout", 191, seconds=420)], [])
    assert out["different"]["k.py"]["why"].startswith("cut by the per-file time limit (420 s) with nothing failed: "
                                                      "191 of the pruned run's 192 passed (it took 266 s there)")
    out = pruned_vs_unpruned(pruned, [_row("k.py", "timeout", 150, failed=1, seconds=420)], [])
    assert "why" not in out["different"]["k.py"]


def test_the_test_steps_seconds_need_one_verify_then_one_test() -> None:
    assert _test_seconds(b"build rc=0 432 s\nverify rc=0 442 s\ntest rc=11 776 s\ndone\n") == 334
    assert _test_seconds(b"verify rc=0 353 s\ntest rc=2 353 s\ndone\ntest rc=11 359 s\n") is None
    assert _test_seconds(None) is None
    assert _test_seconds(b"400 s: verify rc=0\n1010 s: test start\n1400 s: test rc=0\n1401 s: done\n") == 390


# pytest's JUnit XML (xunit1) of a module that skipped itself at import, and of a failure whose text quotes source.
_MODULE_SKIP = ("<testsuites><testsuite><testcase classname=\"\" name=\"tests.test_mla\" file=\"tests/test_mla.py\">"
                "<skipped message=\"collection skipped\">('/h/tests/test_mla.py', 12, 'Skipped: needs sm100')</skipped>"
                "</testcase></testsuite></testsuites>")
_FAILURE = ("<testsuites><testsuite><testcase classname=\"tests.test_x\" name=\"test_a\" file=\"tests/test_x.py\">"
            "<failure message=\"assert 1 == 2\">def test_a():\n    assert upstream_line</failure>"
            "</testcase></testsuite></testsuites>")


def _tar(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def test_pack_keeps_a_module_skips_reason_and_drops_failure_bodies(tmp_path: Path) -> None:
    # Issue 70: the module's reason is the skipped element's text; pack dropped every text (failure bodies quote
    # upstream source), so the reason was lost and the runner could only read 'collection skipped'.
    logs = _tar(tmp_path / "logs.tar.gz", {"run-1/out/tests__test_mla.py.xml": _MODULE_SKIP,
                                           "run-1/out/tests__test_x.py.xml": _FAILURE})
    pack("v9", _tar(tmp_path / "raw.tar.gz", {"test.json": "{}"}), logs, tmp_path / "out.tar.gz")
    with tarfile.open(tmp_path / "out.tar.gz") as tar:
        packed = {m.name: f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None}
    assert b"upstream_line" not in packed["v9/out/tests__test_x.py.xml"]
    xml = packed["v9/out/tests__test_mla.py.xml"]
    result = _read_junit(xml, runner.FileResult("tests/test_mla.py"))
    assert result.skipped == {"tests/test_mla.py": "needs sm100"}
    assert _status(ET.fromstring(xml), result) == "empty"
