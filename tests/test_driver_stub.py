"""Import on a host without a GPU driver, for libraries that link libcuda (sgl-kernel does).

The wheel here is real: a CUDA library compiled by nvcc for sm_120a that calls the driver
API (cuInit, cuDeviceGetCount) and links `-lcuda`. This machine has no driver; linking
needs a libcuda, so the test links against a stub it compiles (exactly what the
toolkit's stubs/libcuda.so is for). The nvcc is the one the build finds (CUDA_HOME, PATH,
/usr/local/cuda*): one small compile (seconds), skipped where there is no nvcc at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel import cuda_driver
from build_kernel.archs import parse_arch_list
from build_kernel.recipe import Verify
from build_kernel.stages.verify import checks as verify
from build_kernel.toolchain import find_nvcc

PROBE_CU = r"""
#include <cuda.h>
__global__ void touch(int* p) { p[threadIdx.x] = 1; }
extern "C" int probe(void) {
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  int n = 0;
  cuDeviceGetCount(&n);
  return n;
}
"""
INIT_PY = """
import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libprobe.so"))
STATUS = _lib.probe()
"""


@pytest.fixture(scope="module")
def driver_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if cuda_driver.driver_loadable():
        pytest.skip("this host has a CUDA driver: nothing to stand in for")
    nvcc = find_nvcc(os.environ)
    if not nvcc:
        pytest.skip("needs nvcc (CUDA_HOME, PATH or /usr/local/cuda*) to compile the probe library: none found")
    tmp = tmp_path_factory.mktemp("drv")
    link_stub = cuda_driver.make_stub(["cuInit", "cuDeviceGetCount"], tmp)
    (tmp / "libcuda.so").symlink_to(link_stub)
    (tmp / "probe.cu").write_text(PROBE_CU)
    lib = tmp / "libprobe.so"
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_120a,code=sm_120a",
                    str(tmp / "probe.cu"), f"-L{tmp}", "-lcuda", "-o", str(lib)], check=True, capture_output=True)
    wheel = tmp / "drvprobe-0.1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(lib, "drvprobe/libprobe.so")
        zf.writestr("drvprobe/__init__.py", INIT_PY)
        zf.writestr("drvprobe-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: drvprobe\nVersion: 0.1.0\n")
        zf.writestr("drvprobe-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")
        zf.writestr("drvprobe-0.1.0.dist-info/RECORD", "")
    return wheel


def test_library_linking_libcuda_does_not_load_here_by_itself(driver_wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(driver_wheel) as zf:
        zf.extractall(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "import drvprobe"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0 and "libcuda.so.1: cannot open shared object file" in proc.stderr


def test_verify_imports_it_against_a_generated_driver_stub(driver_wheel: Path) -> None:
    report = verify.verify(driver_wheel, Verify(import_modules=("drvprobe",)), parse_arch_list("12.0a"),
                           cuda_home="/nonexistent", env=os.environ)
    assert report.imports == {"drvprobe": "ok"}, report.failures
    assert report.passed and report.libraries[0].archs == ["sm_120a"]
    assert report.driver.startswith("a generated stub of 2 driver symbols")


def test_stub_exports_exactly_the_imported_driver_symbols(driver_wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(driver_wheel) as zf:
        zf.extractall(tmp_path)
    libs = [tmp_path / "drvprobe/libprobe.so"]
    assert cuda_driver.needs_driver(libs) == libs
    assert cuda_driver.driver_symbols(libs) == ["cuDeviceGetCount", "cuInit"]


def test_a_failing_c_compiler_is_one_line_verify_error(tmp_path: Path) -> None:
    from build_kernel.errors import VerifyError

    with pytest.raises(VerifyError) as exc:
        cuda_driver.make_stub(["cuInit"], tmp_path, cc=str(tmp_path / "no-cc"))
    assert str(exc.value) == f"compiling a stand-in libcuda: {tmp_path / 'no-cc'} not found (install a C compiler (cc))"
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: internal error' >&2\nexit 4\n")
    broken.chmod(0o755)
    with pytest.raises(VerifyError) as exc:
        cuda_driver.make_stub(["cuInit"], tmp_path, cc=str(broken))
    text = str(exc.value)
    assert "\n" not in text and text.startswith("compiling a stand-in libcuda: `") and "exited 4: cc: internal error" in text
