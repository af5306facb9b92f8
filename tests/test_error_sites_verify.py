"""Verify errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The prewarmed JIT cache's check (`jit_cache.verify`, what `serve --install` and `jit-prewarm` run on
the server's tvm-ffi cache) on real caches laid out as tvm-ffi lays them out: an empty one, a module
with no device code (a host-only library gcc builds here), and one whose SASS lacks what the recipe
asks for (a library of the session's demo wheel, real cubins; slow only because that wheel is built
once per session by the demo_build fixture). Each failure is one line naming the module and the fix.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from build_kernel.archs import parse_arch_list
from build_kernel.stages.verify import jit_cache
from tests.conftest import DemoBuild

ARCHS = parse_arch_list(["12.0a"])


def test_an_empty_cache_says_to_prewarm_it(tmp_path: Path) -> None:
    report = jit_cache.verify(tmp_path, ARCHS, [], dict(os.environ))
    assert not report.passed
    assert report.failures == [f"no JIT module in {tmp_path} (prewarm it: build-kernel jit-prewarm)"]


def test_a_module_without_device_code(tmp_path: Path) -> None:
    entry = tmp_path / "cache" / "host_only_0123abcd"
    entry.mkdir(parents=True)
    (tmp_path / "host.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(entry / "host_only.so"), str(tmp_path / "host.c")],
                   check=True, capture_output=True)
    report = jit_cache.verify(tmp_path / "cache", ARCHS, [], dict(os.environ))
    assert report.failures == ["host_only: no cubin (no device code)"]


@pytest.mark.slow
def test_a_module_whose_sass_lacks_the_asked_instructions(demo_build: DemoBuild, tmp_path: Path) -> None:
    with zipfile.ZipFile(demo_build.wheel) as wheel:
        name = "minikernel/sm100/common_ops.so"  # the library of the 10.0+ archs: 12.0a's cubin
        entry = tmp_path / "cache" / "common_ops_0123abcd"
        entry.mkdir(parents=True)
        (entry / "common_ops.so").write_bytes(wheel.read(name))
    report = jit_cache.verify(tmp_path / "cache", ARCHS, ["NO_SUCH_OPCODE"], dict(os.environ))
    assert report.failures == ["common_ops: none of NO_SUCH_OPCODE in its sm_120a SASS (not compiled for an `a` arch?)"]
