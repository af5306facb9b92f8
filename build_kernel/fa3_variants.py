"""Which FA3 forward kernels a build compiles: all (upstream's default), the ones a model needs, or a list.

A 9.0a sgl-kernel compiles 250 FA3 instantiation units (head dims x dtypes x softcap x split / paged /
pack-GQA), ~54 minutes at 15 jobs on the H200 host against ~6 for the rest. A served model calls one dtype and
one head dim (MLA: two Q/K-V pairs), softcap only with logit softcapping; split, paged and pack-GQA kernels
are picked per call from the batch, so they always stay. Series sm120 v8 (0010-fa3-variants.patch) reads
the choice from SGL_KERNEL_FA3_HDIMS / _DTYPES / _SOFTCAP and the wheel raises one line for a call that
needs a kernel left out.

`[build] fa3 = "model"` derives the variants from the served model's config.json ([serve] model: a folder, or
the Hugging Face cache; never downloaded) and the serve flags (`--dtype`, `--kv-cache-dtype`), as SGLang's
FA3 backend calls them: the model's dtype, e4m3 when the KV cache is fp8_e4m3 (queries are cast to it), the
head dim (MLA: (qk_nope + qk_rope, v_head_dim) for prefill and (qk_rope, kv_lora_rank) for decode), softcap
when the config caps attention logits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_kernel.errors import RecipeError

HEAD_DIMS = ("64", "96", "128", "192", "256", "64_256", "64_512", "192_128")
DTYPES = ("bf16", "fp16", "e4m3")
MODES = ("all", "model", "listed")
# The define a patch series must read for a choice to mean anything (0010-fa3-variants.patch).
SERIES_MARK = "SGL_KERNEL_FA3_HDIMS"
_PLAIN = (64, 96, 128, 192, 256)


def series_reads_choice(patches: Sequence[Path]) -> bool:
    """Whether a series' patches read the choice (SERIES_MARK): only then does [build] fa3 leave kernels out."""
    return any(SERIES_MARK in path.read_text(errors="replace") for path in patches)
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "bf16", "float": "bf16"}


@dataclass(frozen=True)
class Variants:
    head_dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    softcap: bool
    why: str

    @property
    def everything(self) -> bool:
        return self.head_dims == HEAD_DIMS and self.dtypes == DTYPES and self.softcap

    def defines(self) -> dict[str, str]:
        if self.everything:
            return {}
        return {"SGL_KERNEL_FA3_HDIMS": ";".join(self.head_dims), "SGL_KERNEL_FA3_DTYPES": ";".join(self.dtypes),
                "SGL_KERNEL_FA3_SOFTCAP": "ON" if self.softcap else "OFF"}

    def to_dict(self) -> dict[str, Any]:
        return {"head_dims": list(self.head_dims), "dtypes": list(self.dtypes), "softcap": self.softcap,
                "why": self.why, "defines": self.defines()}


ALL = Variants(HEAD_DIMS, DTYPES, True, "all: every variant upstream compiles")


def kernel_head_dim(d: int, dv: int) -> str | None:
    """The head dim (or Q/K-V pair) of the kernel FA3 runs for Q/K width d and V width dv, as flash_api.cpp
    dispatches: a plain width rounds up to the next kernel; None where FA3 has none."""
    if d != dv:
        if d <= 64 < dv:
            return "64_512" if dv > 256 else "64_256"
        if 128 < d <= 192 and 96 < dv <= 128:
            return "192_128"
        return None
    return next((str(h) for h in _PLAIN if d <= h), None)


def _with_fallbacks(head_dims: Sequence[str]) -> tuple[str, ...]:
    """What compiles for these head dims (as cmake/fa3_variants.cmake widens them): one switch covers both
    64-wide pairs, and a pair falls back to its Q/K head dim's own kernels."""
    wanted = set(head_dims)
    if wanted & {"64_256", "64_512"}:
        wanted |= {"64_256", "64_512", "64"}
    if "192_128" in wanted:
        wanted.add("192")
    return tuple(h for h in HEAD_DIMS if h in wanted)


def _arg(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def from_config(config: Mapping[str, Any], serve_args: Sequence[str] = (), *, source: str = "config.json") -> Variants:
    """The variants SGLang's FA3 backend calls for this model config served with these flags."""
    # Vision-language wrappers (Qwen3.5, Llama 4) keep the language model's attention in text_config.
    text = config.get("text_config") or config
    problems: list[str] = []
    widths: list[tuple[int, int]] = []
    if text.get("kv_lora_rank"):  # MLA (DeepSeek V2/V3, Kimi K2)
        rope, nope = int(text.get("qk_rope_head_dim", 0)), int(text.get("qk_nope_head_dim", 0))
        widths += [(nope + rope, int(text.get("v_head_dim", 0))), (rope, int(text["kv_lora_rank"]))]
    else:
        head_dim = text.get("head_dim") or (int(text.get("hidden_size", 0)) // max(int(text.get("num_attention_heads", 1)), 1))
        widths.append((int(head_dim), int(head_dim)))
    head_dims: list[str] = []
    for d, dv in widths:
        kernel = kernel_head_dim(d, dv)
        if kernel is None:
            problems.append(f"FA3 has no kernel for head dim {d} (V {dv})")
        elif kernel not in head_dims:
            head_dims.append(kernel)
    dtype_name = _arg(serve_args, "--dtype") or str(text.get("torch_dtype") or text.get("dtype")
                                                    or config.get("torch_dtype") or "bfloat16")
    dtype = _TORCH_DTYPES.get(dtype_name.replace("torch.", ""), "bf16") if dtype_name != "auto" else "bf16"
    # bf16 always: flash_api.cpp has no switch that leaves it out.
    dtypes = ["bf16"] + ([dtype] if dtype != "bf16" else [])
    kv = _arg(serve_args, "--kv-cache-dtype") or "auto"
    if kv in ("fp8_e4m3", "fp8"):
        dtypes.append("e4m3")
    softcap = any(float(text.get(k) or 0) > 0 for k in ("attn_logit_softcapping", "attn_logit_softcap", "logit_cap"))
    if problems:
        raise RecipeError([f"build.fa3 = \"model\": {p} in {source}; set fa3 = \"all\" (or \"listed\" with fa3_head_dims)"
                           for p in problems])
    why = (f"model {source}: head dims {', '.join(head_dims)}, dtype {dtype}, KV cache {kv}, "
           f"softcap {'on' if softcap else 'off'}")
    return Variants(_with_fallbacks(head_dims), tuple(t for t in DTYPES if t in dtypes), softcap, why)


def find_config(model: str, env: Mapping[str, str]) -> tuple[Path | None, list[Path]]:
    """The model's config.json: `model` as a folder, else the Hugging Face cache's snapshot of that id (the
    one refs/main names, else the newest). Also the places looked at, for the error."""
    looked: list[Path] = []
    folder = Path(model).expanduser()
    looked.append(folder / "config.json")
    if (folder / "config.json").is_file():
        return folder / "config.json", looked
    hub = Path(env["HF_HUB_CACHE"]) if env.get("HF_HUB_CACHE") else (
        Path(env["HF_HOME"]) / "hub" if env.get("HF_HOME") else Path(env.get("HOME", "~")).expanduser() / ".cache" / "huggingface" / "hub")
    repo = hub / ("models--" + model.replace("/", "--"))
    looked.append(repo / "snapshots")
    ref = repo / "refs" / "main"
    if ref.is_file() and (repo / "snapshots" / ref.read_text().strip() / "config.json").is_file():
        return repo / "snapshots" / ref.read_text().strip() / "config.json", looked
    found = sorted((repo / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return (found[-1] if found else None), looked


def resolve(mode: str, *, head_dims: Sequence[str], dtypes: Sequence[str], softcap: bool, model: str,
            serve_args: Sequence[str], env: Mapping[str, str]) -> Variants:
    """The variants a recipe's [build] fa3* keys ask for (their spelling is checked by recipe.rules)."""
    if mode == "all":
        return ALL
    if mode == "listed":
        # bf16 is always there (cmake/fa3_variants.cmake).
        return Variants(_with_fallbacks(head_dims), tuple(t for t in DTYPES if t in ("bf16", *dtypes)), softcap,
                        "listed: [build] fa3_head_dims, fa3_dtypes, fa3_softcap")
    if not model:
        raise RecipeError(["build.fa3 = \"model\" needs [serve] model (a folder or a Hugging Face id); "
                           "or set fa3 = \"listed\" with fa3_head_dims"])
    path, looked = find_config(model, env)
    if path is None:
        raise RecipeError([f"build.fa3 = \"model\": no config.json of {model} here (looked in "
                           f"{', '.join(str(p) for p in looked)}); fetch it with `huggingface-cli download {model} "
                           "config.json`, or set fa3 = \"listed\" with fa3_head_dims"])
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RecipeError([f"build.fa3 = \"model\": {path} is no JSON config ({exc}); fetch it again, or set "
                           "fa3 = \"listed\" with fa3_head_dims"]) from None
    return from_config(config, serve_args, source=str(path))
