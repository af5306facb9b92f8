"""What the served model proves (issue 70): 64 distinct held-out prompts, and only the wheel's own ops counted.

The op test loads a real compiled extension module (gcc, Python's C API) the way sgl_kernel's load_utils does
(a spec built from the file's path), whose load registers an `sgl_kernel::` torch op, in a real Python process
with the op hook; a second op of the same namespace defined from Python is no library's and must not count.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from build_kernel.stages.serve import ops
from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench" / "serving"))
import docstring_corpus
import token_agreement

sys.path.remove(str(REPO_ROOT / "bench" / "serving"))


def test_the_64_prompts_are_64_distinct_held_out_texts() -> None:
    """The committed prompts (results/tiny_moe_model.json, kept by tiny_moe_report.py from the training log): 64,
    none repeated (issue 70: the old prompt_texts made 32 distinct of 64)."""
    prompts = token_agreement.prompt_texts(64)
    assert len(prompts) == 64
    repeated = sorted({p for p in prompts if prompts.count(p) > 1})
    assert not repeated, f"prompts repeat: {repeated[:3]}"


def test_asking_for_more_prompts_than_were_kept_is_refused() -> None:
    with pytest.raises(SystemExit, match="held-out prompts: ask for at most 64"):
        token_agreement.prompt_texts(65)


def test_a_prompt_seen_in_training_or_repeated_is_refused() -> None:
    train = ["Return the sum of two numbers. Both must be ints.", "Open a file."]
    docstring_corpus.check_disjoint(["Close the socket and free it.", "Return the product."], train)
    with pytest.raises(SystemExit, match="1 prompt\\(s\\) occur in the training text"):
        docstring_corpus.check_disjoint(["Return the sum of two numbers.", "Close it."], train)
    with pytest.raises(SystemExit, match="repeat"):
        docstring_corpus.check_disjoint(["Close it.", "Close it."], train)
    # a summary line is a short plain sentence; the split is by the module's path, whatever the files' order
    assert docstring_corpus.summary_line("Return the sum of two numbers.\n\nMore.") == "Return the sum of two numbers."
    assert docstring_corpus.summary_line(">>> f(1)") is None
    assert docstring_corpus.held_out("json/decoder.py") == docstring_corpus.held_out("json/decoder.py")

EXTENSION = r"""
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "common_ops", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_common_ops(void) {
  PyObject *m = PyModule_Create(&def);
  if (m == NULL) return NULL;
  /* the library's static registration: a torch op of the sgl_kernel namespace, defined while this file loads */
  if (PyRun_SimpleString(
        "import builtins, torch\n"
        "builtins._sgl_lib = torch.library.Library('sgl_kernel', 'DEF')\n"
        "builtins._sgl_lib.define('rmsnorm(Tensor x) -> Tensor')\n"
        "builtins._sgl_lib.impl('rmsnorm', lambda x: x * 2, 'CompositeExplicitAutograd')\n") != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
"""

SERVER = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("common_ops", sys.argv[1])  # as sgl_kernel's load_utils does
common_ops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common_ops)
shadow = torch.library.Library("sgl_kernel", "FRAGMENT")  # the same namespace, from Python: no library's
shadow.define("shadow(Tensor x) -> Tensor")
shadow.impl("shadow", lambda x: x + 1, "CompositeExplicitAutograd")
print(float(torch.ops.sgl_kernel.rmsnorm.default(torch.ones(1))[0]), float(torch.ops.sgl_kernel.shadow(torch.ones(1))[0]))
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to compile the extension module")
def test_only_ops_registered_by_the_wheels_library_are_the_wheels(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "sgl_kernel" / "sm90"
    package.mkdir(parents=True)
    so = package / f"common_ops{sysconfig.get_config_var('EXT_SUFFIX')}"
    (tmp_path / "ext.c").write_text(EXTENSION)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(tmp_path / "ext.c"), "-o",
                    str(so)], check=True, capture_output=True)
    folder = tmp_path / "ops"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "BUILD_KERNEL_OPS"))}
    env = ops.enable(env, folder)
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", SERVER, str(so)], capture_output=True, text=True,
                          env=env, timeout=180, check=False)
    assert (proc.returncode, proc.stdout.split()) == (0, ["2.0", "2.0"]), proc.stderr
    counts = ops.read(folder)
    real = os.path.realpath(so)
    assert counts.origins["sgl_kernel::rmsnorm"] == real and "sgl_kernel::shadow" not in counts.origins
    assert counts.libraries == {real: hashlib.sha256(so.read_bytes()).hexdigest()}
    found = ops.report(ops.Counts(), counts)
    assert found["sgl_kernel_ops"] == ["sgl_kernel::rmsnorm"]
    assert found["sgl_kernel_ops_not_the_wheels"] == {"sgl_kernel::shadow": None}
    # Against the wheel's RECORD: the library's hash must be among the wheel's files'.
    assert ops.report(ops.Counts(), counts, wheel_sha256={"0" * 64})["sgl_kernel_ops"] == []
    assert ops.report(ops.Counts(), counts, wheel_sha256=set(counts.libraries.values()))["sgl_kernel_ops"] == \
        ["sgl_kernel::rmsnorm"]


def test_the_wheels_record_hashes_are_compared_as_the_hook_writes_them() -> None:
    import base64

    data = b"common_ops.abi3.so bytes"
    record = {"sgl_kernel/common_ops.abi3.so": base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")}
    assert ops.wheel_sha256(record) == {hashlib.sha256(data).hexdigest()}
