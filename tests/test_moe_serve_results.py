"""bench/serving/moe_serve_report.py: the H200 run's tarball (as moe_serve_on_gpu_host.sh packs it) into the results file:
each kernel family of issue 41 found among the ops the server called, or named missing; the logprob-close
verdict beside the exact-id figure; throughput per concurrency."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import REPO_ROOT


def _add(tar: tarfile.TarFile, name: str, data: object) -> None:
    raw = (data if isinstance(data, str) else json.dumps(data)).encode()
    info = tarfile.TarInfo(f"./{name}")
    info.size = len(raw)
    tar.addfile(info, io.BytesIO(raw))


def test_the_results_name_the_families_that_ran_and_those_that_did_not(tmp_path: Path) -> None:
    ops = {"sgl_kernel_ops": ["sgl_kernel::moe_align_block_size", "sgl_kernel::rmsnorm", "sgl_kernel::topk_softmax"],
           "eager_during_requests": {"sgl_kernel::rmsnorm": 40, "sgl_kernel::moe_align_block_size": 30,
                                     "flashinfer.sampling.top_k_top_p_sampling_from_probs": 8},
           "graph_captured": {"sgl_kernel::topk_softmax": 6, "sgl_kernel::fwd": 6},
           "eager_at_startup": {}, "processes": 1}
    bench = {"argv": ["python", "-m", "sglang.launch_server"], "sglang": "0.5.9", "ops": ops,
             "resolved": {"resolved": {"attention_backend": "fa3"}, "cuda_graph": "captured", "failures": []},
             "server": {"seconds_to_healthy": 41.5, "smoke": {"tokens": 32}},
             "checks": [{"command": "python bench/serving/token_agreement.py", "returncode": 0, "seconds": 20.0}],
             "bench": [{"concurrency": 1, "output_throughput": 480.0}, {"concurrency": 32, "output_throughput": 9100.0}]}
    verdict = {"prompt": 3, "passed": True, "identical": False, "first_divergence": 5, "tokens": [371, 268],
               "a_token_rank_in_b": 1, "b_token_rank_in_a": 2, "reason": ""}
    agreement = {"summary": {"prompts": 64, "prompts_identical": 63, "max_new_tokens": 32,
                             "logprobs_close": {"prompts": 64, "passed": 64, "identical": 63, "verdict": "pass"}},
                 "per_prompt": [{"logprobs_close": verdict}, {"logprobs_close": {**verdict, "prompt": 4,
                                                                                 "tokens": None}}]}
    raw = tmp_path / "moe-serve-raw.tar.gz"
    with tarfile.open(raw, "w:gz") as tar:
        _add(tar, "bf16/bench.json", bench)
        _add(tar, "bf16/bench.err", "✓ serve\n")
        _add(tar, "bf16/agreement.json", agreement)
        _add(tar, "training.json", {"last_loss": 0.04, "tokens_per_expert_per_layer": [[1, 2]]})
        _add(tar, "notes.txt", "attention: --attention-backend flashinfer: no flash_ops\n")
        _add(tar, "steps.txt", "40 s: checkpoints rc=0\n")
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(raw), "--out",
                           str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert list(result["variants"]) == ["bf16"]  # fp8 was not run: absent, not empty
    bf16 = result["variants"]["bf16"]
    assert bf16["families"]["moe_routing"] == {"requests": [], "graph": ["sgl_kernel::topk_softmax"]}
    # FA3 served from the wheel's flash_ops: the op's real name, `sgl_kernel::fwd`, is the attention family's.
    assert bf16["families"]["attention"] == {"requests": [], "graph": ["sgl_kernel::fwd"]}
    assert bf16["families"]["sampling"]["requests"] == ["flashinfer.sampling.top_k_top_p_sampling_from_probs"]
    assert bf16["families_missing"] == ["activation", "fp8_gemm", "rotary"]
    assert bf16["agreement"]["logprobs_close"]["verdict"] == "pass" and bf16["agreement"]["exact_id_prompts"] == 63
    assert [d["prompt"] for d in bf16["agreement"]["first_divergences"]] == [3]
    assert bf16["bench"] == {"C=1": {"output_throughput": 480.0, "request_throughput": None, "mean_ttft_ms": None,
                                     "median_ttft_ms": None, "mean_itl_ms": None, "completed": None},
                             "C=32": {"output_throughput": 9100.0, "request_throughput": None, "mean_ttft_ms": None,
                                      "median_ttft_ms": None, "mean_itl_ms": None, "completed": None}}
    assert result["notes"] == ["attention: --attention-backend flashinfer: no flash_ops"]
    assert result["model"]["training"] == {"last_loss": 0.04}


def test_the_throughput_pair_is_ours_over_the_reference_per_concurrency(tmp_path: Path) -> None:
    def raw(name: str, wheel: str, c1: float, c32: float) -> Path:
        path = tmp_path / f"moe-serve-raw-{name}.tar.gz"
        bench = {"resolved": {"resolved": {"attention_backend": "flashinfer"}},
                 "bench": [{"concurrency": 1, "output_throughput": c1}, {"concurrency": 32, "output_throughput": c32}]}
        with tarfile.open(path, "w:gz") as tar:
            _add(tar, "bf16/bench.json", bench)
            _add(tar, "bf16/bench.err", "✓ serve\n")
            _add(tar, "host.txt", f"NVIDIA H200\nwheel: /tmp/{wheel}\n")
        return path

    main = raw("main", "ours.whl", 500.0, 9000.0)
    ours, ref = raw("ours", "ours.whl", 490.0, 9100.0), raw("ref", "unpruned.whl", 500.0, 9000.0)
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(main), "--out", str(out),
                           "--throughput-pair", str(ours), str(ref)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    pair = json.loads(out.read_text())["throughput_pair"]
    assert pair["ratio_ours_over_reference"] == {"C=1": 0.98, "C=32": 1.011}
    assert (pair["ours"]["wheel"], pair["reference"]["wheel"]) == ("/tmp/ours.whl", "/tmp/unpruned.whl")
    assert pair["ours"]["attention"] == pair["reference"]["attention"] == "flashinfer"


def test_ours_again_measures_the_order_and_upstream_wheel_says_why_it_cannot_load(tmp_path: Path) -> None:
    """A third run (ours after the reference) gives the drift and the mean ratio; `doctor --installed --json` on
    upstream's wheel beside the host's torch is kept with its problems; a fourth tarball is refused."""
    def raw(name: str, c1: float, c32: float) -> Path:
        path = tmp_path / f"moe-serve-raw-{name}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            _add(tar, "bf16/bench.json", {"bench": [{"concurrency": 1, "output_throughput": c1},
                                                    {"concurrency": 32, "output_throughput": c32}]})
            _add(tar, "bf16/bench.err", "✓ serve\n")
        return path

    main, ours, ref, again = raw("main", 1, 1), raw("ours", 600.0, 3000.0), raw("ref", 500.0, 3000.0), raw("again", 400.0, 3150.0)
    doctor = tmp_path / "doctor.json"
    doctor.write_text(json.dumps({"origin": {"distribution": "sgl-kernel", "version": "0.3.21", "detail": "file:///x.whl"},
                                  "torch": {"version": "2.11.0+cu130"}, "cuda_linked": {"libcudart.so.12": "12"},
                                  "problems": [{"kind": "cuda", "text": "is a CUDA 12 build"}], "healthy": False}))
    sha = tmp_path / "sha256"
    sha.write_text("abc123  x.whl\n-rw-r--r-- 1 root root 535601072 Dec  5 19:37 x.whl\n")
    out = tmp_path / "result.json"
    bench = [sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(main), "--out", str(out)]
    proc = subprocess.run([*bench, "--throughput-pair", str(ours), str(ref), str(again), "--upstream-wheel", str(doctor),
                           str(sha)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    pair = result["throughput_pair"]
    assert pair["ratio_ours_over_reference"] == {"C=1": 1.2, "C=32": 1.0}
    assert pair["drift_ours_again_over_ours"] == {"C=1": 0.667, "C=32": 1.05}
    assert pair["ratio_ours_mean_over_reference"] == {"C=1": 1.0, "C=32": 1.025}
    # The ratio to read: where the order moved ours by more than 10 %, only the two later runs compare.
    assert pair["ratio"]["C=1"]["ours_over_reference"] == 0.8
    assert pair["ratio"]["C=1"]["basis"].startswith("ours again / reference: the first run is 0.67x")
    assert pair["ratio"]["C=32"] == {"ours_over_reference": 1.025,
                                     "basis": "mean of ours's two runs / reference (drift 1.050, within 10%)"}
    up = result["upstream_wheel"]
    assert (up["distribution"], up["sha256"], up["bytes"], up["healthy"]) == ("sgl-kernel 0.3.21", "abc123", 535601072, False)
    assert up["problems"] == ["is a CUDA 12 build"]
    four = subprocess.run([*bench, "--throughput-pair", str(ours), str(ref), str(again), str(again)],
                          capture_output=True, text=True, check=False)
    assert four.returncode == 2 and "OURS REFERENCE [OURS_AGAIN]" in four.stderr


def test_the_run_the_bisect_and_a_retried_start_are_kept(tmp_path: Path) -> None:
    """Issue 54: the wheel's sha256 and build figures, the cuBLAS probe's rows, the first start's error where a
    start was retried with sglang's advice, and the bisect start's outcome with its server log's failure lines."""
    bench = {"resolved": {"resolved": {"attention_backend": "fa3"}},
             "bench": [{"concurrency": 1, "output_throughput": 400.0}]}
    failure = ("[2026-12-05 14:00:01] Scheduler hit an exception: RuntimeError: CUDA error: "
               "CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(...)`")
    main = tmp_path / "moe-serve-raw.tar.gz"
    with tarfile.open(main, "w:gz") as tar:
        _add(tar, "bf16/bench.json", bench)
        _add(tar, "bf16/bench.err", "✓ serve\n")
        _add(tar, "bf16/bench-first.err", "error: the server exited early (code 1)\n  hint: add "
                                          "--disable-piecewise-cuda-graph\n")
        _add(tar, "server.log", f"loading\n{failure}\n{failure}\nCapture cuda graph end.\n")
    run = tmp_path / "i54-raw.tar.gz"
    build = {"wheel": "/tmp/bkw/sgl_kernel-0.3.21+x-cp310-abi3-linux_x86_64.whl", "jobs": [15], "oom_kills": 0,
             "provenance": {"recipe": "h9", "patch_series": "sm120/v8", "archs": ["9.0a"], "seconds": 401.2,
                            "cpu_seconds": 4000.0, "defines": {"SGL_KERNEL_FA3_HDIMS": "64", "Torch_DIR": "/x"}}}
    with tarfile.open(run, "w:gz") as tar:
        _add(tar, "build.json", build)
        _add(tar, "verify.json", "✓ verify\n" + json.dumps({"passed": True}))
        _add(tar, "wheel.sha256", "ab12  /tmp/bkw/x.whl\n-rw-r--r-- 1 root root 19000000 Dec  5 14:00 /tmp/bkw/x.whl\n")
        _add(tar, "probe.jsonl", '{"case": "torch", "m": 8192, "k": 256, "n": 8, "outcome": "ok"}\nnoise\n')
        _add(tar, "imports.txt", "imports ok\n")
    bisect = tmp_path / "moe-serve-raw-pcg-flashinfer.tar.gz"
    with tarfile.open(bisect, "w:gz") as tar:
        _add(tar, "bf16/bench.err", "error: the server exited early (code 1)\n")
        _add(tar, "notes.txt", "attention: --attention-backend flashinfer (ATTENTION: one backend for both wheels)\n")
        _add(tar, "server.log", failure + "\n")
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(main), "--out",
                           str(out), "--run", str(run), "--bisect", str(bisect)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["variants"]["bf16"]["first_start"] == {"error": "error: the server exited early (code 1)",
                                                         "hint": "hint: add --disable-piecewise-cuda-graph"}
    assert result["server_log_failures"] == [failure, "Capture cuda graph end."]  # each line once
    assert result["run"]["wheel"] == {"file": "sgl_kernel-0.3.21+x-cp310-abi3-linux_x86_64.whl", "sha256": "ab12",
                                      "bytes": 19000000}
    assert result["run"]["build"]["fa3"] == {"SGL_KERNEL_FA3_HDIMS": "64"}
    assert result["run"]["verify"] == {"passed": True, "error": None}
    assert result["run"]["cublas_capture_probe"] == [{"case": "torch", "m": 8192, "k": 256, "n": 8, "outcome": "ok"}]
    assert result["bisect"]["error"] == "error: the server exited early (code 1)"
    assert result["bisect"]["server_log_failures"] == [failure]


def test_each_start_says_whether_it_captured_past_its_context_and_ops_are_grouped_by_library(tmp_path: Path) -> None:
    """Issue 54's cause, read off the server logs: a start that died in cuBLAS captured piecewise CUDA graphs past its
    context, the ones that lived did not; the ops that ran are grouped by library, the served wheel's apart."""
    def start(ctx_flag: str, sizes: str, tail: str) -> str:
        return (f"$ /x/python -m sglang.launch_server --model-path /m --port 30000{ctx_flag}  # started 2026-12-05\n"
                "[t] Capture piecewise CUDA graph begin. avail mem=12 GB\n"
                f"[t] Capture cuda graph num tokens [{sizes}]\n$ /x/python bench/serving/token_agreement.py\n{tail}\n")
    log = (start("", "4, 8, 4096, 8192", "[t] Capture piecewise CUDA graph end.")
           + start(" --context-length 4096", "4, 8, 4096, 8192",
                   "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(...)`"))
    ops = {"eager_during_requests": {"sgl_kernel::rmsnorm": 4, "deep_gemm.fp8_gemm_nt": 2,
                                     "flashinfer.sampling.top_p_renorm_probs": 1},
           "graph_captured": {"deep_gemm::fp8_gemm_nt": 3, "sglang::apply_rope_inplace": 3}}
    main = tmp_path / "moe-serve-raw.tar.gz"
    with tarfile.open(main, "w:gz") as tar:
        _add(tar, "bf16/bench.json", {"ops": ops, "bench": []})
        _add(tar, "bf16/bench.err", "✓ serve\n")
        _add(tar, "config-bf16.json", {"max_position_embeddings": 32768})
        _add(tar, "server.log", log)
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(main), "--out",
                           str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    pcg = result["piecewise_cuda_graph"]
    assert [(s["context_length"], s["largest_piecewise_tokens"], s["past_the_context"]) for s in pcg["starts"]] == \
        [(32768, 8192, False), (4096, 8192, True)]
    assert pcg["starts"][0]["cuda_error"] is None and "CUBLAS_STATUS_EXECUTION_FAILED" in pcg["starts"][1]["cuda_error"]
    assert pcg["died_only_past_the_context"] is True
    lib = result["variants"]["bf16"]["by_library"]
    # deep_gemm's two names: one kernel
    assert lib["from_the_wheel_packages"] == ["deep_gemm.fp8_gemm_nt", "sgl_kernel.rmsnorm"]
    assert sorted(lib["libraries"]) == ["deep_gemm", "flashinfer", "sgl_kernel", "sglang"]
    assert (lib["distinct_from_the_wheel_packages"], lib["distinct_all"]) == (2, 4)
    # A hook that recorded no origins: the namespace's names, but none proven the wheel's (issue 70).
    own = result["variants"]["bf16"]["wheel_ops"]
    assert (own["origins_recorded"], own["ops"], own["sgl_kernel_namespace_by_name"]) == \
        (False, [], ["sgl_kernel::rmsnorm"])


def test_only_ops_registered_by_the_wheels_library_count_and_fwd_is_fwd_exactly(tmp_path: Path) -> None:
    """Issue 70: the op report's origins decide; `sgl_kernel::fwd_x` is no FA3 call, an sgl_kernel:: op of another
    library is listed apart."""
    so = "/env/site-packages/sgl_kernel/sm90/common_ops.abi3.so"
    ops = {"eager_during_requests": {"sgl_kernel::rmsnorm.default": 4, "sgl_kernel::fwd_decode": 2,
                                     "sgl_kernel::shadow": 1},
           "graph_captured": {"sgl_kernel::fwd": 3},
           "sgl_kernel_ops": ["sgl_kernel::fwd", "sgl_kernel::rmsnorm"],
           "sgl_kernel_ops_not_the_wheels": {"sgl_kernel::fwd_decode": None, "sgl_kernel::shadow": "/other/x.so"},
           "origins": {"sgl_kernel::rmsnorm": so, "sgl_kernel::fwd": so.replace("common_ops", "flash_ops"),
                       "sgl_kernel::shadow": "/other/x.so"}}
    raw = tmp_path / "moe-serve-raw.tar.gz"
    with tarfile.open(raw, "w:gz") as tar:
        _add(tar, "bf16/bench.json", {"ops": ops, "bench": []})
        _add(tar, "bf16/bench.err", "✓ serve\n")
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(raw),
                           "--out", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    own = json.loads(out.read_text())["variants"]["bf16"]["wheel_ops"]
    assert (own["ops"], own["distinct"]) == (["sgl_kernel::fwd", "sgl_kernel::rmsnorm"], 2)
    assert own["families"]["attention"] == ["sgl_kernel::fwd"] and own["families"]["rmsnorm"] == ["sgl_kernel::rmsnorm"]
    assert own["sgl_kernel_namespace_by_name"] == ["sgl_kernel::fwd", "sgl_kernel::fwd_decode", "sgl_kernel::rmsnorm",
                                                   "sgl_kernel::shadow"]
    assert own["not_the_wheels"] == {"sgl_kernel::fwd_decode": None, "sgl_kernel::shadow": "/other/x.so"}


def test_a_launch_only_start_and_a_wheel_built_elsewhere_are_kept(tmp_path: Path) -> None:
    """Issue 55: `SMOKE_ONLY=1` (`serve --launch --smoke-only`: health and smoke, no bench) of a wheel carried to the
    host, so nightly_build_test_serve.sh's run pack has only the wheel's `sha256sum; ls -l` line (wheel43.sha256)."""
    launch = {"mode": "launch", "server": {"seconds_to_healthy": 90.6, "smoke": {"tokens": 32, "tokens_per_s": 908.4}},
              "resolved": {"resolved": {"attention_backend": "fa3"}, "cuda_graph": "captured"}}
    main = tmp_path / "moe-serve-raw-t43.tar.gz"
    with tarfile.open(main, "w:gz") as tar:
        _add(tar, "bf16/bench.json", launch)
        _add(tar, "bf16/bench.err", "✓ serve (launch)\n")
    run = tmp_path / "i55-raw.tar.gz"
    with tarfile.open(run, "w:gz") as tar:
        _add(tar, "wheel43.sha256", "cd34  /tmp/w43/sglang_kernel-0.4.3+y-cp310-abi3-linux_x86_64.whl\n-rw-r--r-- 1 root "
                                    "root 10767861 Dec  6 10:00 /tmp/w43/sglang_kernel-0.4.3+y-cp310-abi3-linux_x86_64.whl\n")
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "serving" / "moe_serve_report.py"), str(main), "--out",
                           str(out), "--run", str(run)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["run"]["wheel"] == {"file": "sglang_kernel-0.4.3+y-cp310-abi3-linux_x86_64.whl", "sha256": "cd34",
                                      "bytes": 10767861}
    bf16 = result["variants"]["bf16"]
    assert (bf16["time_to_healthy_s"], bf16["smoke"]["tokens"], bf16["bench"]) == (90.6, 32, {})


def test_throughput_rounds_give_the_median_ratio_with_its_spread_and_keep_every_run(tmp_path: Path) -> None:
    """bench/throughput/rounds_report.py on a synthetic pack laid out as rounds_on_gpu_host.sh packs it (no GPU here:
    the figures are made up): ratios pair runs of one round; a failed serve and a short bench are excluded by the
    rule written before the runs, and listed; the bootstrap interval is the same for the same pack."""
    tps = {1: {"pruned": [500, 505, 498, 510, 502], "reference": [495, 500, 500, 500, 490]},
           32: {"pruned": [9000, 9100, 9050, 8900, 9000], "reference": [9000, 9000, 9000, 9000, 9000]}}
    raw = tmp_path / "rounds-raw.tar.gz"
    with tarfile.open(raw, "w:gz") as tar:
        for r in range(1, 6):
            for label in ("pruned", "reference"):
                rows = [{"concurrency": c, "output_throughput": float(tps[c][label][r - 1]),
                         "completed": 200 if (r, label, c) == (3, "reference", 32) else 256} for c in (1, 32)]
                rc = "1" if (r, label) == (5, "pruned") else "0"
                _add(tar, f"runs/r{r}-{label}/rc", rc + "\n")
                _add(tar, f"runs/r{r}-{label}/serve-bench.json", {"bench": rows})
    out = tmp_path / "rounds.json"
    cmd = [sys.executable, str(REPO_ROOT / "bench" / "throughput" / "rounds_report.py"), str(raw), "--out", str(out)]
    assert subprocess.run(cmd, capture_output=True, text=True, check=False).returncode == 0
    result = json.loads(out.read_text())
    c1, c32 = result["concurrency"]["C=1"], result["concurrency"]["C=32"]
    # Round 5's pruned serve failed: out at both concurrencies, kept in the list with why.
    assert c1["rounds_counted"] == 4 and c1["rounds"][4]["excluded"] == {"pruned": "serve exited 1"}
    assert [row["ratio"] for row in c1["rounds"]] == [round(500 / 495, 4), 1.01, 0.996, 1.02, None]
    assert c1["median_ratio"] == round((1.01 + 500 / 495) / 2, 4) and (c1["min_ratio"], c1["max_ratio"]) == (0.996, 1.02)
    low, high = c1["bootstrap_95"]
    assert c1["min_ratio"] <= low <= c1["median_ratio"] <= high <= c1["max_ratio"]
    assert c1["difference_real"] is (not low <= 1.0 <= high)
    # Round 3's reference bench completed 200 of 256 at C=32: that round is out there only.
    assert c32["rounds_counted"] == 3 and c32["rounds"][2]["excluded"] == {"reference": "completed 200 of 256 requests"}
    again = tmp_path / "again.json"
    subprocess.run([*cmd[:-1], str(again)], check=True, capture_output=True)
    assert again.read_text() == out.read_text()  # a fixed seed: the same pack, the same file
