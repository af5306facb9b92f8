"""`[serve] jit_prewarm`: sglang's JIT builders compiled ahead of time into the tvm-ffi cache, then
proven by their SASS (issue 25, item 3).

The sglang here is one the test writes: a package shaped like sglang's `jit_kernel` (its
`load_jit` passes `#include "<abs .cuh>"` sources to the real `tvm_ffi.cpp.load_inline` with
`TVM_FFI_CUDA_ARCH_LIST` from `override_jit_cuda_arch`, and its builder asks torch for the GPU
first, as `nvfp4._nvfp4_arch_env` does). It is a stand-in for the real sglang (which CI cannot
install), nothing else is: real tvm-ffi, ninja, nvcc, cuobjdump, the real CLI. The real sglang
at 0753182b is measured outside the repository (figures: bench/jit_prewarm/prewarm_report.py from bench/real_build/raw/local-2c-2026-12-02).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from build_kernel.archs import parse_arch_list
from build_kernel.stages.verify import jit_cache
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe

NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"

UTILS = '''
import contextlib, os, pathlib
KERNEL_PATH = pathlib.Path(__file__).parent.resolve()
_ARCH = (0, 0, "")

@contextlib.contextmanager
def override_jit_cuda_arch(major, minor, suffix=""):
    global _ARCH
    old, _ARCH = _ARCH, (major, minor, suffix)
    try:
        yield
    finally:
        _ARCH = old

def cache_once(fn):
    import functools
    seen = {}
    @functools.wraps(fn)
    def wrapper():
        if "r" not in seen:
            seen["r"] = fn()
        return seen["r"]
    return wrapper

def load_jit(*args, cuda_files, cuda_wrappers):
    from tvm_ffi.cpp import load_inline
    major, minor, suffix = _ARCH
    sources = [f'#include "{KERNEL_PATH / "csrc" / f}"' for f in cuda_files]
    sources += [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({e}, ({k}));" for e, k in cuda_wrappers]
    os.environ["TVM_FFI_CUDA_ARCH_LIST"] = f"{major}.{minor}{suffix}"
    return load_inline("sgl_kernel_jit_" + "_".join(args), cpp_sources=[], cuda_sources=sources,
                       extra_cuda_cflags=[f"-DSGL_CUDA_ARCH={major * 100 + minor * 10}", "-O3"])
'''
TINY = '''
import torch
from sglang.jit_kernel.utils import cache_once, load_jit, override_jit_cuda_arch

def _arch_env():
    if not torch.cuda.is_available():
        raise RuntimeError("NVFP4 JIT kernels require CUDA.")
    major, minor = torch.cuda.get_device_capability()
    return override_jit_cuda_arch(major, minor, suffix="a")

@cache_once
def _jit_tiny_fp4_module():
    with _arch_env():
        return load_jit("tiny_fp4", cuda_files=["tiny_fp4.cuh"], cuda_wrappers=[("tiny_pack", "tiny_pack")])

def _jit_templated_module(dtype):  # template arguments: not prewarmable, skipped for a module entry
    raise AssertionError("never called")
'''
TINY_CUH = r'''
#include <cuda_fp4.h>
#include <cstdint>
__global__ void pack_kernel(const float2* x, uint8_t* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __nv_cvt_float2_to_fp4x2(x[i], __NV_E2M1, cudaRoundNearest);
}
int64_t tiny_pack(int64_t n) {
  pack_kernel<<<1, 32>>>(nullptr, nullptr, 0);
  return n;
}
'''
BROKEN = '''
from sglang.jit_kernel.utils import load_jit, override_jit_cuda_arch

def _jit_broken_module():
    with override_jit_cuda_arch(12, 0, "a"):
        return load_jit("broken", cuda_files=["broken.cuh"], cuda_wrappers=[("f", "f")])
'''


def _sglang(root: Path) -> Path:
    """An sglang-shaped package under `root` (see the module docstring)."""
    jit = root / "sglang" / "jit_kernel"
    (jit / "csrc").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (jit / "__init__.py").write_text("")
    (jit / "utils.py").write_text(UTILS)
    (jit / "tiny.py").write_text(TINY)
    (jit / "broken.py").write_text(BROKEN)
    (jit / "csrc" / "tiny_fp4.cuh").write_text(TINY_CUH)
    (jit / "csrc" / "broken.cuh").write_text("int64_t f(int64_t n) { return not_declared_anywhere(n); }\n")
    return root


def _recipe(project: Path, tmp_path: Path, prewarm: list[str], *, env: dict[str, str] | None = None) -> Path:
    copy_series(project, (REPO_ROOT / "patches/minikernel/v1/series").read_text().split(), "v1")
    pkg = _sglang(tmp_path / "sgl")
    path = os.pathsep.join([str(pkg), *filter(None, [os.environ.get("PYTHONPATH", "")])])
    extra = "".join(f'{k} = "{v}"\n' for k, v in (env or {}).items())
    text = demo_recipe_text() + textwrap.dedent(f"""
        [serve]
        model = "tiny"
        jit_prewarm = {json.dumps(prewarm)}
        jit_archs = ["12.0a"]
        jit_cache_dir = "{tmp_path / 'cache'}"
        jit_sass = ['F2FP\\.\\S*E2M1']

        [serve.env]
        PYTHONPATH = "{path}"
        """) + extra
    return write_recipe(project, "jit", text)


def _prewarm(recipe: Path, *more: str) -> tuple[int, str, str]:
    proc = run_cli("--recipe", str(recipe), "jit-prewarm", "--python", sys.executable, *more)
    return proc.returncode, proc.stdout, proc.stderr


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.is_dir()) if cache.is_dir() else []


needs_tvm_ffi = pytest.mark.skipif(not NVCC.is_file(), reason=f"no nvcc at {NVCC}")


@pytest.mark.slow
@needs_tvm_ffi
def test_prewarm_compiles_for_the_asked_arch_and_the_server_finds_it(project: Path, tmp_path: Path) -> None:
    pytest.importorskip("tvm_ffi")
    recipe = _recipe(project, tmp_path, ["sglang.jit_kernel.tiny"])
    code, out, err = _prewarm(recipe, "--dry-run", "--json")
    assert code == 0, err
    assert [i["builder"] for i in json.loads(out)["items"]] == ["_jit_tiny_fp4_module"]  # the templated one skipped
    assert _entries(tmp_path / "cache") == []

    code, out, err = _prewarm(recipe, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert "JIT 1/1: sglang.jit_kernel.tiny:_jit_tiny_fp4_module for 12.0a" in err
    (module,) = result["modules"]
    assert module["fresh"] and Path(module["so"]).is_file()
    assert result["env"]["TVM_FFI_CACHE_DIR"] == str(tmp_path / "cache")
    (checked,) = result["verify"]["modules"]
    assert result["verify"]["passed"] and checked["cubins"] == {"sm_120a": 1}
    assert checked["sass"]["sm_120a:F2FP\\.\\S*E2M1"] > 0

    # Again: the same entry (same hash), ninja has nothing to do, the .so is untouched.
    before = Path(module["so"]).stat().st_mtime_ns
    code, out, err = _prewarm(recipe, "--json")
    assert code == 0, err
    (again,) = json.loads(out)["modules"]
    assert again["so"] == module["so"] and not again["fresh"]
    assert Path(module["so"]).stat().st_mtime_ns == before

    # Verified against another arch, the same cubins fail.
    other = jit_cache.verify(tmp_path / "cache", parse_arch_list(["10.0a"]), [], dict(os.environ))
    assert other.failures == ["sgl_kernel_jit_tiny_fp4: cubins for sm_120a, not the asked sm_100a"]


@needs_tvm_ffi
def test_a_compile_error_is_one_line_and_leaves_no_entry(project: Path, tmp_path: Path) -> None:
    pytest.importorskip("tvm_ffi")
    code, _, err = _prewarm(_recipe(project, tmp_path, ["sglang.jit_kernel.broken"]))
    assert code == 9
    line = err.strip().splitlines()[-1]
    assert "compiling sglang.jit_kernel.broken:_jit_broken_module for 12.0a" in line
    assert "not_declared_anywhere" in line and "error" in line
    assert _entries(tmp_path / "cache") == []


def test_an_unknown_module_and_builder_are_named_at_once(project: Path, tmp_path: Path) -> None:
    recipe = _recipe(project, tmp_path, ["sglang.jit_kernel.nope", "sglang.jit_kernel.tiny:_jit_missing_module",
                                         "sglang.jit_kernel.tiny:_jit_templated_module"])
    code, _, err = _prewarm(recipe, "--dry-run")
    assert code == 9
    (line,) = err.strip().splitlines()
    assert "no module 'sglang.jit_kernel.nope'" in line
    assert "has no builder '_jit_missing_module'" in line
    assert "_jit_templated_module needs arguments (dtype)" in line
    assert _entries(tmp_path / "cache") == []


def test_no_nvcc_is_one_line_with_the_fix(project: Path, tmp_path: Path) -> None:
    recipe = _recipe(project, tmp_path, ["sglang.jit_kernel.tiny"], env={"CUDA_HOME": str(tmp_path / "no-cuda")})
    code, _, err = _prewarm(recipe)
    assert code == 9
    (line,) = err.strip().splitlines()
    assert f"nvcc not found at {tmp_path / 'no-cuda' / 'bin' / 'nvcc'}" in line and "CUDA_HOME" in line
    assert not (tmp_path / "cache").exists()


def test_a_malformed_entry_is_a_recipe_error(project: Path, tmp_path: Path) -> None:
    code, _, err = _prewarm(_recipe(project, tmp_path, ["sglang jit"]))
    assert code == 2
    assert "serve.jit_prewarm" in err and "'sglang jit' is not `module` or `module:builder`" in err
