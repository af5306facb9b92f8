"""The startup-log audit on recorded sglang logs (tests/serve_logs/, our own files shaped after
sglang 6ffc74ef's lines): what sglang resolved, and a silent fallback from what was asked."""

from __future__ import annotations

from pathlib import Path

from build_kernel.stages.serve import audit

LOGS = Path(__file__).resolve().parent / "serve_logs"
NIGHTLY_ARGS = ["--tp", "8", "--quantization", "modelopt_fp4", "--attention-backend", "triton",
                "--moe-runner-backend", "flashinfer_cutlass", "--fp4-gemm-backend", "flashinfer_cudnn",
                "--kv-cache-dtype", "bf16", "--disable-custom-all-reduce"]
# As sglang's parser reads NIGHTLY_ARGS (the fields that matter here).
PARSED = {"attention_backend": "triton", "moe_runner_backend": "flashinfer_cutlass",
          "fp4_gemm_runner_backend": "flashinfer_cudnn", "kv_cache_dtype": "bf16", "disable_cuda_graph": False,
          "tensor_parallel_size": 8}


def test_only_the_flags_the_recipe_gives_are_held_to() -> None:
    wanted = audit.asked(NIGHTLY_ARGS, PARSED, {"--tp": "--tp-size"})
    assert wanted == {"attention_backend": "triton", "moe_runner_backend": "flashinfer_cutlass",
                      "fp4_gemm_runner_backend": "flashinfer_cudnn", "kv_cache_dtype": "bf16"}
    # An abbreviation is the flag argparse took it for; `--flag=value` counts too.
    assert audit.asked(["--attention=fa3"], {"attention_backend": "fa3"}, {"--attention": "--attention-backend"}) == {
        "attention_backend": "fa3"}


def test_a_healthy_log_reports_what_sglang_resolved() -> None:
    wanted = audit.asked(NIGHTLY_ARGS, PARSED, {"--tp": "--tp-size"})
    found = audit.audit((LOGS / "qwen35-nvfp4-tp8-sm120.log").read_text(), wanted)
    assert found.failures == []
    assert found.resolved == {"attention_backend": "triton", "moe_runner_backend": "flashinfer_cutlass",
                              "fp4_gemm_runner_backend": "flashinfer_cudnn", "kv_cache_dtype": "bf16"}
    assert found.cuda_graph == "captured"
    assert found.summary() == ("sglang resolved --attention-backend triton, --moe-runner-backend flashinfer_cutlass, "
                               "--fp4-gemm-backend flashinfer_cudnn, --kv-cache-dtype bf16; CUDA graph: captured")


def test_a_fallback_log_fails_naming_what_was_asked_and_what_runs() -> None:
    wanted = audit.asked(NIGHTLY_ARGS, PARSED, {"--tp": "--tp-size"})
    found = audit.audit((LOGS / "qwen35-nvfp4-tp8-sm120-fallback.log").read_text(), wanted)
    assert found.resolved["moe_runner_backend"] == "triton" and found.cuda_graph == "disabled"
    assert found.failures == [
        "--moe-runner-backend flashinfer_cutlass was asked for, but sglang resolved moe_runner_backend='triton': a "
        "silent fallback",
        "sglang disabled CUDA graphs (disable_cuda_graph=True in its server_args) though the recipe did not pass "
        "--disable-cuda-graph: a silent fallback"]
    # Asked for, disabled graphs are what was asked.
    asked_off = audit.asked([*NIGHTLY_ARGS, "--disable-cuda-graph"], {**PARSED, "disable_cuda_graph": True}, {})
    text = (LOGS / "qwen35-nvfp4-tp8-sm120-fallback.log").read_text().replace("moe_runner_backend='triton'", "moe_runner_backend='flashinfer_cutlass'")
    assert audit.audit(text, asked_off).failures == []


def test_a_log_without_the_dump_or_without_capture_end_is_no_proof() -> None:
    text = (LOGS / "qwen35-nvfp4-tp8-sm120.log").read_text()
    no_dump = "\n".join(ln for ln in text.splitlines() if audit.DUMP not in ln)
    assert audit.audit(no_dump, {}).failures[0].startswith("sglang's startup log has no server_args=ServerArgs(...)")
    cut = "\n".join(ln for ln in text.splitlines() if audit.CAPTURE_END not in ln)
    found = audit.audit(cut, {})
    assert found.cuda_graph == "begun, never ended"
    assert found.failures == ["CUDA-graph capture was on but the log has no 'Capture cuda graph end' line (begun, "
                              "never ended)"]


def test_a_dump_with_a_field_that_is_no_python_is_still_read_for_the_audited_fields() -> None:
    text = (LOGS / "qwen35-nvfp4-tp8-sm120.log").read_text().replace(
        "lora_paths=None", "lora_paths=<LoRARef object at 0x7f3a>")
    assert audit.server_args(text) == {"attention_backend": "triton", "moe_runner_backend": "flashinfer_cutlass",
                                       "fp4_gemm_runner_backend": "flashinfer_cudnn", "kv_cache_dtype": "bf16",
                                       "disable_cuda_graph": False}
    assert audit.audit(text, {"attention_backend": "triton"}).failures == []
