"""An OOM-killed compile is survived: the build resumes with fewer jobs in the same folder.

The kill is real: the kernel's OOM killer ends a real cc1plus inside a memory-capped
cgroup. What is arranged is *which* compile meets the cap: a compiler launcher puts the
heaviest TU (the torch binding, ~0.9 GB) into a 300 MB cgroup on its first run only, as
memory pressure from parallel jobs would on a real machine.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe

pytestmark = pytest.mark.slow
PATCHES = sorted(p.name for p in (REPO_ROOT / "patches/minikernel/v1").glob("*.patch"))
CAP = 300 * 1024 * 1024


@pytest.fixture
def capped_cgroup() -> Iterator[Path]:
    """A memory cgroup of 300 MB (v1 here; v2 where that is the hierarchy)."""
    v1 = Path("/sys/fs/cgroup/memory")
    base = v1 if v1.is_dir() else Path("/sys/fs/cgroup")
    group = base / f"build-kernel-oom-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / ("memory.limit_in_bytes" if base == v1 else "memory.max")).write_text(str(CAP))
        if base != v1:
            (group / "memory.swap.max").write_text("0")
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup here ({exc}); run as root on a cgroup host")
    yield group
    group.rmdir()


def oom_kills(group: Path) -> int:
    for name in ("memory.oom_control", "memory.events"):
        path = group / name
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    return 0


def test_oom_killed_compile_resumes_with_fewer_jobs(project: Path, tmp_path: Path, capped_cgroup: Path) -> None:
    marker = tmp_path / "capped-once"
    launcher = tmp_path / "cap-launcher.sh"
    launcher.write_text(f"""#!/bin/sh
case "$*" in
  *common_extension.cc*)
    if [ ! -e {marker} ]; then
      touch {marker}
      echo $$ > {capped_cgroup}/cgroup.procs
    fi;;
esac
exec "$@"
""")
    launcher.chmod(0o755)
    copy_series(project, PATCHES, "v1")
    write_recipe(project, "r", demo_recipe_text().replace(
        "[build.defines]\n", f'[build.defines]\nCMAKE_CXX_COMPILER_LAUNCHER = "{launcher}"\n'))
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--output-dir", str(project / "wheels"), "--jobs", "2",
                   "--json", "build", "--recipe", str(project / "recipes/r.toml"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert marker.exists() and oom_kills(capped_cgroup) >= 1  # the kernel really killed it
    assert result["jobs"] == [2, 1] and result["oom_kills"] == 1
    assert "OOM kill detected (Killed signal terminated program cc1plus)" in proc.stderr
    log = Path(result["log"]).read_text()
    assert "resuming in the same build folder with 1 job(s) (retry 1/3)" in log
    # ninja resumed: the second pass had fewer steps and did not recompile activation.cu.
    first, second = log.split("# OOM kill detected")
    steps = [re.findall(r"(?m)^\[\d+/(\d+)\] (.*)$", part) for part in (first, second)]
    assert int(steps[1][0][0]) < int(steps[0][0][0])
    compiled = [[cmd for _, cmd in part if "activation.cu -o" in cmd] for part in steps]
    assert compiled[0] and not compiled[1]
    verify = run_cli("--json", "verify", result["wheel"], "--recipe", str(project / "recipes/r.toml"))
    assert verify.returncode == 0, verify.stdout
