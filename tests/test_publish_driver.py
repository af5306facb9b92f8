"""Publish's install-back imports a wheel whose libraries link the CUDA driver on a host that has none.

The nightly of 2026-12-07 found it: `import sgl_kernel` loads libraries linking libcuda.so.1; verify passed on the
GPU-less host (it loads them with a stand-in driver, cuda_driver.for_load) but publish's import from the fresh
venv failed there, and the wheel was withdrawn. Real parts: a real wheel holding a real shared library compiled
here by cc and linked against a stub libcuda (cuda_driver.make_stub, as a build links the toolkit's stub), real pip,
a real venv, a static folder index. Without the fix the import fails ("libcuda.so.1: cannot open shared object
file"). On a host with a real driver the test proves nothing and is skipped.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel import cuda_driver
from build_kernel.stages import publish as pub
from build_kernel.stages.publish import install_back as back
from tests.test_publish import LOCAL, clean_env, target_for, write_record

VERSION = f"0.0.1{LOCAL}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def driver_wheel(tmp: Path, project: str) -> Path:
    """A verified wheel whose package, on import, ctypes-loads its own library, which links libcuda.so.1 and
    calls cuInit: the import answers only where a libcuda.so.1 loads (the stub's CUDA_ERROR_NO_DEVICE here)."""
    link = tmp / "link-stub"
    link.mkdir(parents=True)
    cuda_driver.make_stub(["cuInit"], link)
    src = tmp / "probe.c"
    src.write_text("int cuInit(unsigned int flags);\nint bk_probe(void) { return cuInit(0); }\n")
    lib = tmp / "libbkprobe.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src), f"-L{link}", f"-l:{cuda_driver.SONAME}"],
                   check=True, capture_output=True, text=True)
    module = project.replace("-", "_")
    dist_info = f"{module}-{VERSION}.dist-info"
    files: dict[str, bytes] = {
        f"{module}/__init__.py": (b"import ctypes, os\n"
                                  b"LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libbkprobe.so'))\n"
                                  b"assert LIB.bk_probe() == 100, 'not the stub driver'\n"),
        f"{module}/libbkprobe.so": lib.read_bytes(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {VERSION}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: build-kernel-tests\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={_b64(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    wheel = tmp / "w" / f"{module}-{VERSION}-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 2, 0, 0, 0)), data)
    write_record(wheel, passed=True)
    return wheel


def test_install_back_imports_a_wheel_linking_libcuda_on_a_host_without_a_driver(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if cuda_driver.driver_loadable():
        pytest.skip("this host has a real libcuda.so.1: the import would load it, proving nothing about the stub")
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build the wheel's library and the stub")
    wheel = driver_wheel(tmp_path, "bk-drv")
    env = clean_env()
    env.pop("LD_LIBRARY_PATH", None)  # nothing of this process's may hold a libcuda.so.1
    target = target_for(str(tmp_path / "static"), tmp_path, env)
    capsys.readouterr()
    [done] = pub.publish([wheel], target, env=env, python=sys.executable).wheels
    assert done.status == "copied" and done.imports == {"bk_drv": "ok"}
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if "back from" in line)
    assert "imported bk_drv (libcuda: " in line and "stub" in line.split("libcuda: ", 1)[1], line
    assert (tmp_path / "static" / wheel.name).is_file()  # not withdrawn


def test_the_driver_is_provided_for_the_wheels_own_libraries_and_said(tmp_path: Path) -> None:
    if cuda_driver.driver_loadable():
        pytest.skip("this host has a real libcuda.so.1: the import would load it, proving nothing about the stub")
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build the wheel's library and the stub")
    wheel = driver_wheel(tmp_path, "bk-drv2")
    env = clean_env()
    env.pop("LD_LIBRARY_PATH", None)
    target = target_for(str(tmp_path / "static"), tmp_path, env)
    pub.StaticDirBackend(target).put(wheel, VERSION, skip_existing=False)
    installed = back.install_back(target, "bk-drv2", VERSION, modules=["bk_drv2"], python=sys.executable, env=env)
    assert installed.imports == {"bk_drv2": "ok"}
    assert installed.driver is not None and "stub" in installed.driver, installed.driver
