"""Which kernels the server ran (stages/serve/ops.py and its hook op_hook/sitecustomize.py), on real processes.

The hook counts real torch op calls in real Python processes, the scheduler that the server starts with
multiprocessing's spawn included. The server is the TEST DOUBLE (tests/serve_double/sglang_double.py)
only because no GPU here runs sglang: serving a MoE-shaped checkpoint, its spawned scheduler defines ops
in the `sgl_kernel` namespace and calls them (the decode step's while "capturing a CUDA graph", the
prefill's per request); launch, health, the snapshots and the report are the stage's own code.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from build_kernel.stages.serve import launch, ops
from tests.conftest import REPO_ROOT

DOUBLE = REPO_ROOT / "tests" / "serve_double"
sys.path.insert(0, str(DOUBLE))
import sglang_double  # noqa: E402  (the double's op lists: what its scheduler calls)

sys.path.remove(str(DOUBLE))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _moe_checkpoint(folder: Path) -> Path:
    """The tiny MoE's config (bench/serving/tiny_moe.py), no weights: the double reads only config.json."""
    sys.path.insert(0, str(REPO_ROOT / "bench" / "serving"))
    try:
        import tiny_moe
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "serving"))
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_moe.config(tiny_moe.Shape())))
    return folder


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "BUILD_KERNEL_OPS"))}
    return {**env, **extra}


def test_the_moe_servers_spawned_scheduler_is_counted_graph_and_requests_apart(tmp_path: Path) -> None:
    model, folder, port = _moe_checkpoint(tmp_path / "moe"), tmp_path / "ops", _free_port()
    env = ops.enable(_env(PYTHONPATH=str(DOUBLE), DOUBLE_PIDS=str(tmp_path / "pids.json")), folder)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ops.HOOK), str(DOUBLE)]
    argv = [sys.executable, "-m", "sglang_double", "--model-path", str(model), "--host", "127.0.0.1",
            "--port", str(port)]
    before: list[ops.Counts] = []
    with launch.running(argv, env, host="127.0.0.1", port=port, timeout=60, log_path=tmp_path / "server.log",
                        before_smoke=lambda: before.append(ops.snapshot(folder))) as (_, launched):
        assert launched.smoke["tokens"] == 32
        after = ops.snapshot(folder)
    found = ops.report(before[0], after)
    kernel = {f"sgl_kernel::{n}" for n in (*sglang_double.PREFILL_OPS, *sglang_double.DECODE_OPS)}
    # The double defines its sgl_kernel ops in Python, so no library of a wheel registered them: none is the
    # wheel's (issue 70), each is listed apart with no origin.
    assert found["sgl_kernel_ops"] == []
    assert found["sgl_kernel_ops_not_the_wheels"] == dict.fromkeys(sorted(kernel))
    # Captured at start-up, two batch sizes: replayed in decode, never seen again by Python.
    assert found["graph_captured"] == {f"sgl_kernel::{n}": 2 for n in sglang_double.DECODE_OPS}
    # The one smoke request: each prefill op once, counted between the two snapshots.
    assert found["eager_during_requests"] == {f"sgl_kernel::{n}": 1 for n in sglang_double.PREFILL_OPS}
    # /health_generate ran a token (or more, as it was polled) before the first snapshot.
    assert set(found["eager_at_startup"]) == {f"sgl_kernel::{n}" for n in sglang_double.PREFILL_OPS}
    # One file per process that called an op: the scheduler; the HTTP process imported no torch.
    assert found["processes"] == 1
    [written] = [json.loads(p.read_text()) for p in folder.glob("ops-*.json")]
    assert written["process"] == "scheduler" and written["pid"] == json.loads((tmp_path / "pids.json").read_text())[1]
    lines = ops.summary(found)
    assert lines[0] == "sgl_kernel ops called for the requests: none"
    assert lines[2].startswith("0 distinct sgl_kernel ops of the wheel in 1 process(es); sgl_kernel ops of another "
                               "library: ")


HOOKED = """
import torch
lib = torch.library.Library("sgl_kernel", "DEF")
lib.define("rmsnorm(Tensor x) -> Tensor")
lib.impl("rmsnorm", lambda x: x * 2, "CompositeExplicitAutograd")
print(float(torch.ops.sgl_kernel.rmsnorm.default(torch.ones(1))[0]), float(torch.add(torch.ones(1), 1)[0]))
"""


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_a_hook_that_cannot_write_never_breaks_the_server(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = ops.enable(_env(), tmp_path / "ops")
    env[ops.FOLDER_VAR] = str(blocker / "below-a-file")  # no folder can be made there
    proc = _run(HOOKED, env)
    assert (proc.returncode, proc.stdout.split()) == (0, ["2.0", "2.0"]), proc.stderr
    assert proc.stderr == ""


def test_the_hook_is_inert_without_its_folder_and_aten_is_not_counted(tmp_path: Path) -> None:
    env = ops.enable(_env(), tmp_path / "ops")
    quiet = _run(HOOKED, {k: v for k, v in env.items() if k != ops.FOLDER_VAR})
    assert quiet.returncode == 0 and list((tmp_path / "ops").iterdir()) == []
    counted = _run(HOOKED, env)
    assert counted.returncode == 0, counted.stderr
    [written] = [json.loads(p.read_text()) for p in (tmp_path / "ops").glob("ops-*.json")]
    assert written["calls"] == {"sgl_kernel::rmsnorm": {"eager": 1, "graph": 0}}  # torch.add: aten, not counted


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    env = ops.enable(_env(PYTHONPATH=str(theirs)), tmp_path / "ops")
    proc = _run("import builtins; print(builtins.THEIRS)", env)
    assert (proc.returncode, proc.stdout.strip()) == (0, "ran"), proc.stderr


def test_the_report_subtracts_the_first_snapshot() -> None:
    before = ops.Counts({"sgl_kernel::rmsnorm": {"eager": 5, "graph": 2}, "sgl_kernel::topk_softmax":
                         {"eager": 0, "graph": 2}}, processes=1)
    after = ops.Counts({"sgl_kernel::rmsnorm": {"eager": 9, "graph": 2}, "sgl_kernel::topk_softmax":
                        {"eager": 0, "graph": 2}, "flashinfer.sampling.top_k_top_p_sampling_from_probs":
                        {"eager": 3, "graph": 0}}, processes=2)
    so = "/env/lib/site-packages/sgl_kernel/sm90/common_ops.abi3.so"
    after.origins = {"sgl_kernel::rmsnorm": so, "sgl_kernel::topk_softmax": so}
    found = ops.report(before, after)
    assert found["eager_during_requests"] == {"flashinfer.sampling.top_k_top_p_sampling_from_probs": 3,
                                              "sgl_kernel::rmsnorm": 4}
    assert found["graph_captured"] == {"sgl_kernel::rmsnorm": 2, "sgl_kernel::topk_softmax": 2}
    assert found["sgl_kernel_ops"] == ["sgl_kernel::rmsnorm", "sgl_kernel::topk_softmax"]
    assert ops.summary(found)[2].endswith("in 2 process(es); other counted namespaces: flashinfer")
    # Given the wheel's RECORD hashes, the library's own hash decides, not its folder.
    after.libraries = {so: "a" * 64}
    assert ops.report(before, after, wheel_sha256={"b" * 64})["sgl_kernel_ops"] == []
    assert ops.report(before, after, wheel_sha256={"a" * 64})["sgl_kernel_ops"] == found["sgl_kernel_ops"]


def test_flashinfer_entry_points_are_counted_and_its_jit_builders_are_not(tmp_path: Path) -> None:
    # A stand-in flashinfer package (its kernels are no torch ops): how sglang imports it, re-exports included.
    pkg = tmp_path / "site" / "flashinfer"
    (pkg / "jit").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sampling import top_k_top_p_sampling_from_probs\n")
    (pkg / "sampling.py").write_text("import functools\n\ndef top_k_top_p_sampling_from_probs(x):\n    return x\n\n"
                                     "@functools.cache\ndef get_sampling_module():\n    return 1\n\n"
                                     "class BatchDecodeWrapper:\n    def run(self):\n        return 2\n")
    (pkg / "jit" / "__init__.py").write_text("")
    (pkg / "jit" / "attention.py").write_text("def gen_batch_decode_module():\n    return 0\n")
    code = ("import flashinfer, flashinfer.sampling as s\nfrom flashinfer.jit.attention import gen_batch_decode_module\n"
            "from flashinfer import top_k_top_p_sampling_from_probs as f\n"
            "print(f(3), s.top_k_top_p_sampling_from_probs(4), s.BatchDecodeWrapper().run(), gen_batch_decode_module(),"
            " s.get_sampling_module(), s.get_sampling_module.cache_info().hits)")
    env = ops.enable(_env(PYTHONPATH=str(tmp_path / "site")), tmp_path / "ops")
    proc = _run(code, env)
    assert (proc.returncode, proc.stdout.split()) == (0, ["3", "4", "2", "0", "1", "0"]), proc.stderr
    [written] = [json.loads(p.read_text()) for p in (tmp_path / "ops").glob("ops-*.json")]
    assert written["calls"] == {"flashinfer.sampling.top_k_top_p_sampling_from_probs": {"eager": 2, "graph": 0},
                                "flashinfer.sampling.BatchDecodeWrapper.run": {"eager": 1, "graph": 0}}
