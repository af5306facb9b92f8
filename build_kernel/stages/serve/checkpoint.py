"""What a local checkpoint folder asks of the serve flags (ModelOpt NVFP4, FP8 KV cache).

- NVFP4 weights need `--quantization modelopt_fp4`.
- A checkpoint that declares an FP8 KV cache (`kv_cache_quant_algo: FP8`) but ships no
  `k_scale`/`v_scale` tensors runs with scales of 1.0: accuracy drops silently on long
  contexts. Then the KV cache stays bf16, and we say why.
A hub id (not a folder) is not read: nothing is downloaded here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel.errors import ServeError

FP8_KV_DTYPES = ("fp8_e4m3", "fp8_e5m2")


@dataclass
class Checkpoint:
    folder: Path
    quant_algo: str = ""
    kv_cache_quant_algo: str = ""
    has_kv_scales: bool = False
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
        q = _json(config).get("quantization_config") or {}
        ck.quant_algo = ck.quant_algo or str(q.get("quant_algo") or "")
        kv = q.get("kv_cache_quant_algo") or (q.get("kv_cache_scheme") or {}).get("type", "")
        if not ck.kv_cache_quant_algo and kv:
            ck.kv_cache_quant_algo = "FP8" if "float" in str(kv) and q.get("kv_cache_scheme", {}).get("num_bits") == 8 \
                else str(kv)
        ck.sources.append(config.name)
    if ck.kv_cache_quant_algo:
        ck.has_kv_scales = any(n.endswith(("k_scale", "v_scale")) for n in _tensor_names(folder))
    return ck


def advise(ck: Checkpoint, quantization: str | None, kv_cache_dtype: str | None) -> Advice:
    """What to add to the flags for this checkpoint, given what the recipe already says."""
    advice = Advice()
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
