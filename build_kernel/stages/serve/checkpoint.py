"""What a local checkpoint folder asks of the serve flags (ModelOpt NVFP4, FP8 KV cache).

- NVFP4 weights need `--quantization modelopt_fp4`.
- A checkpoint that declares an FP8 KV cache (`kv_cache_quant_algo: FP8`) but ships no
  `k_scale`/`v_scale` tensors runs with scales of 1.0: accuracy drops silently on long
  contexts. Then the KV cache stays bf16, and we say why.
- A context shorter than sglang's largest piecewise CUDA graph: sglang captures those graphs
  up to its chunked prefill size (8,192 tokens on an H100/H200, 16,384 on larger GPUs),
  whatever the model's context, and a capture past the context dies in its warm-up
  (`CUBLAS_STATUS_EXECUTION_FAILED`; sglang itself caps it at 4,096 only for model paths
  named llama-2). Then `--piecewise-cuda-graph-max-tokens` is the context, and we say why.
A hub id (not a folder) is not read: nothing is downloaded here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel.errors import ServeError

FP8_KV_DTYPES = ("fp8_e4m3", "fp8_e5m2")
# The largest chunked prefill size sglang picks by GPU memory (server_args._handle_gpu_memory_settings, 6ffc74ef
# and 0753182b alike), and so the largest piecewise CUDA graph it captures when not told otherwise.
SGLANG_MAX_DEFAULT_CHUNKED_PREFILL = 16384
# Measured: the tiny MoE at --context-length 4096 died capturing up to 8,192 tokens; at 32,768 it served, same wheel
# and flags (H100, 2026-12-05, bench/serving/results/moe-serve.json "piecewise_cuda_graph").
PIECEWISE_EVIDENCE = "bench/serving/results/moe-serve.json"


@dataclass
class Checkpoint:
    folder: Path
    quant_algo: str = ""
    kv_cache_quant_algo: str = ""
    has_kv_scales: bool = False
    context_length: int | None = None  # config.json's max_position_embeddings (or its text_config's)
    sources: list[str] = field(default_factory=list)


@dataclass
class Advice:
    """Flags to add, and why; `conflicts` are given flags the checkpoint contradicts."""

    add: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ServeError(f"{path} is not readable JSON: {exc}", hint="fix or re-download the checkpoint") from None
    return data if isinstance(data, dict) else {}


def _tensor_names(folder: Path) -> Iterator[str]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        yield from _json(index).get("weight_map", {})
        return
    for shard in sorted(folder.glob("*.safetensors")):
        # The safetensors header: 8 bytes of little-endian length, then JSON naming every tensor
        # (read directly: the library would need a tensor framework to open the file).
        with shard.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            yield from (k for k in json.loads(fh.read(length)) if k != "__metadata__")


def read(folder: Path) -> Checkpoint:
    if not (folder / "config.json").is_file():
        raise ServeError(f"{folder} has no config.json: not a Hugging Face checkpoint folder",
                         hint="pass --model with the folder that holds config.json and the *.safetensors files")
    ck = Checkpoint(folder)
    hf_quant = folder / "hf_quant_config.json"
    if hf_quant.is_file():
        q = _json(hf_quant).get("quantization", {})
        ck.quant_algo, ck.kv_cache_quant_algo = str(q.get("quant_algo") or ""), str(q.get("kv_cache_quant_algo") or "")
        ck.sources.append(hf_quant.name)
    config = folder / "config.json"
    if config.is_file():
        data = _json(config)
        ctx = data.get("max_position_embeddings") or (data.get("text_config") or {}).get("max_position_embeddings")
        ck.context_length = ctx if isinstance(ctx, int) and ctx > 0 else None
        q = data.get("quantization_config") or {}
        ck.quant_algo = ck.quant_algo or str(q.get("quant_algo") or "")
        kv = q.get("kv_cache_quant_algo") or (q.get("kv_cache_scheme") or {}).get("type", "")
        if not ck.kv_cache_quant_algo and kv:
            ck.kv_cache_quant_algo = "FP8" if "float" in str(kv) and q.get("kv_cache_scheme", {}).get("num_bits") == 8 \
                else str(kv)
        ck.sources.append(config.name)
    if ck.kv_cache_quant_algo:
        ck.has_kv_scales = any(n.endswith(("k_scale", "v_scale")) for n in _tensor_names(folder))
    return ck


def advise(ck: Checkpoint, quantization: str | None, kv_cache_dtype: str | None,
           given: Mapping[str, Any] | None = None) -> Advice:
    """What to add to the flags for this checkpoint, given what the recipe already says (`given`: sglang's parsed
    namespace of the flags, for the piecewise CUDA-graph rule; absent, that rule is not applied)."""
    advice = Advice()
    if given is not None:
        _piecewise(ck, given, advice)
    if ck.quant_algo.upper() == "NVFP4":
        if quantization is None:
            advice.add += ["--quantization", "modelopt_fp4"]
            advice.reasons.append(f"{ck.folder.name} holds NVFP4 weights ({', '.join(ck.sources)}): "
                                  "--quantization modelopt_fp4")
        elif quantization not in ("modelopt_fp4", "modelopt"):
            advice.conflicts.append(f"--quantization {quantization}, but {ck.folder.name} holds NVFP4 weights "
                                    "(use modelopt_fp4)")
    if ck.kv_cache_quant_algo.upper() == "FP8" and not ck.has_kv_scales:
        why = (f"{ck.folder.name} declares an FP8 KV cache but ships no k_scale/v_scale tensors: with scales of "
               "1.0 accuracy drops silently on long contexts")
        if kv_cache_dtype in (None, "auto"):
            advice.add += ["--kv-cache-dtype", "bf16"]
            advice.reasons.append(f"{why}; --kv-cache-dtype bf16")
        elif kv_cache_dtype in FP8_KV_DTYPES:
            advice.conflicts.append(f"--kv-cache-dtype {kv_cache_dtype}: {why} (use bf16)")
    return advice


def _piecewise(ck: Checkpoint, given: Mapping[str, Any], advice: Advice) -> None:
    """Cap sglang's piecewise CUDA graphs at the context where its default could capture past it."""
    if "piecewise_cuda_graph_max_tokens" not in given:  # an sglang without piecewise CUDA graphs
        return
    # On by default with --disable-piecewise-cuda-graph (sglang at 6ffc74ef, 0.4.x's), opt-in with
    # --enable-piecewise-cuda-graph (sglang 0.5.9's release).
    off = given.get("disable_piecewise_cuda_graph") or given.get("enable_piecewise_cuda_graph") is False
    if off or given.get("piecewise_cuda_graph_max_tokens") is not None or given.get("piecewise_cuda_graph_tokens"):
        return  # off, or sized by the user
    ctx = given.get("context_length") or ck.context_length
    chunked = given.get("chunked_prefill_size")
    largest = chunked if isinstance(chunked, int) and chunked > 0 else SGLANG_MAX_DEFAULT_CHUNKED_PREFILL
    if not isinstance(ctx, int) or ctx >= largest:
        return
    source = "--context-length" if given.get("context_length") else f"{ck.folder.name}'s max_position_embeddings"
    advice.add += ["--piecewise-cuda-graph-max-tokens", str(ctx)]
    advice.reasons.append(
        f"context {ctx} ({source}) is below the piecewise CUDA graphs sglang may capture (up to its chunked prefill "
        f"size, {largest if chunked else 'as much as ' + str(largest)} tokens), and a capture past the context dies "
        f"in cuBLAS at start ({PIECEWISE_EVIDENCE}): --piecewise-cuda-graph-max-tokens {ctx}")
