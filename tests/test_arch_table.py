"""bench/arch_builds/arch_table.py: issue 53's table, every arch the toolkit lists planned from the shipped recipe (nothing
compiles), joined with the builds' results by arch list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_every_listed_arch_is_a_row_and_builds_join_by_arch_list(tmp_path: Path) -> None:
    builds = tmp_path / "builds.json"
    builds.write_text(json.dumps({"builds": [
        {"archs": ["12.1a"], "raw": "sm121a-raw.tar.gz", "jobs": [2],
         "build": {"tool_build_step_s": 1991.5, "compiler_cpu_s": 1640.3, "cores": 2, "oom_kills": 0},
         "verify": {"failures": [], "libraries": [{"applies": True, "path": "sgl_kernel/sm100/common_ops.abi3.so",
                                                   "archs": ["sm_121a"], "missing": [], "fp4": {"E2M1": 1064}}]}},
        {"archs": ["9.0a", "12.0a"], "raw": "multi-raw.tar.gz", "build": {}, "verify": {"failures": ["x"]}}]}))
    out = tmp_path / "table.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "arch_builds" / "arch_table.py"), "--builds", str(builds),
                           "--serve-run", str(tmp_path / "none.json"), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(out.read_text())
    rows = {r["arch"]: r for r in table["rows"]}
    assert {"8.0", "8.6", "8.9", "9.0a", "10.0a", "10.0f", "12.0a", "12.1a", "12.0a+PTX"} <= set(rows)
    assert rows["12.0a"]["plans"] and rows["12.0a"]["fp4"] == "yes" and rows["12.0a"]["FA3"] is False
    assert rows["9.0a"]["FA3"] is True and rows["9.0a"]["fp4"].startswith("no")
    assert all(r["plans"] or r["refused"].startswith("command line: arch:") for r in rows.values())
    assert rows["12.1a"]["built"]["verify_passed"] is True and rows["12.1a"]["built"]["tool_build_step_s"] == 1991.5
    assert rows["8.9"]["built"] is None
    assert table["multi_arch_builds"]["9.0a;12.0a"]["verify_passed"] is False
