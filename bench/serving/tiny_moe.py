"""A tiny trained mixture-of-experts checkpoint (Mixtral architecture), in bf16 and as block-wise FP8.

For serving a model that calls the wheel's MoE, FP8 GEMM, RMSNorm, rotary, attention and sampling kernels
(issue 41). Mixtral, because SGLang 0.5.9 serves `MixtralForCausalLM` with its fused MoE and its `fp8`
block loader, and transformers runs the same weights as the reference. The shape: a few layers, 8
experts, top-2 routing, GQA (4 query heads, 2 KV heads, head_dim 64), hidden and expert intermediate sizes
multiples of 128 (block FP8 scales 128x128 blocks, and SGLang refuses a merged QKV or gate/up whose parts
are not whole blocks). It trains on Python's own docstrings and is prompted with docstrings of modules it never
saw (docstring_corpus.py, issue 70: a model that recites its prompts proves little), with tiny_model.py's loop
plus Mixtral's load-balancing loss so that every expert is used; tiny_moe_eval.py measures what it learned (the
held-out loss, each expert's share, the prompts' top-2 margins and ties) into training.json, and the 64 prompts
kept go to prompts.json beside the checkpoints.

Saved by name, not by `save_pretrained`, so the folder does not depend on the transformers version:
`model.layers.L.block_sparse_moe.{gate,experts.E.w1,w2,w3}.weight`, the names SGLang's Mixtral loader
maps. The FP8 copy (fp8_block.py) quantizes every attention projection and expert weight (float8_e4m3fn
`weight` + float32 `weight_scale_inv` per 128x128 block); the router gate (SGLang runs it unquantized),
embeddings, norms and lm_head stay bf16; config.json gains `quantization_config`.

Seeded (bit-for-bit on CPU; on CUDA, Mixtral's index_add_ accumulates in a run-dependent order) and cached: CACHE/tiny-moe-KEY/{bf16,fp8}, KEY a hash of the shape, seed, steps,
device kind, torch and transformers versions and these scripts' sources; made in a partial folder and
renamed, so a folder that exists is whole.

    python bench/serving/tiny_moe.py CACHE [--layers 3] [--hidden 256] [--intermediate 256] [--experts 8]
                             [--top-k 2] [--device cpu|cuda] [--steps N] [--batch N] [--seq N] [--seed 0]

(steps, batch, seq default per device: TRAINING.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import docstring_corpus
import fp8_block
import tiny_model
import tiny_moe_eval

# Training defaults per device (steps, batch, seq): on CPU what 2 shared, busy cores do in ~30 min (20 s a step under
# a load of ~30, 2026-12-07); on a GPU, seconds.
TRAINING = {"cpu": {"steps": 80, "batch": 16, "seq": 64}, "cuda": {"steps": 1500, "batch": 32, "seq": 128}}
# The load-balancing term's weight, and its form. transformers' Mixtral loss (load_balancing_loss_func) pools every
# layer's routing before it multiplies, so expert e of one layer and expert e of another count as one: a layer may
# starve an expert that another layer feeds (transformers issue #28255). It did, at 0.02 (run a) and at 0.1 (run b):
# 80 CPU steps left layer 1's experts 1, 2, 6 at 0.45 %, 0.01 %, 0.02 % (a), layer 0's expert 0 at 0.1 % (b), under
# tiny_moe_eval.py's 2 % floor, while the pooled shares were all 7 % or more. So the term is computed per layer and
# summed, Switch Transformer's form (each MoE layer's auxiliary loss added to the model's), at 0.1 a layer; the rule
# was written before run b's result (bench/serving/raw/local-2c-2026-12-07-moe70b/README.md).
AUX_LOSS_COEF = 0.1
AUX_LOSS_FORM = "per layer, summed over the layers (Switch Transformer's); transformers' own pools the layers"
# The weights SGLang's Fp8LinearMethod / Fp8MoEMethod load as block FP8 in MixtralForCausalLM.
QUANTIZED = re.compile(r"\.(self_attn\.[qkvo]_proj|block_sparse_moe\.experts\.\d+\.w[123])\.weight$")


@dataclass(frozen=True)
class Shape:
    layers: int = 3
    hidden: int = 256
    intermediate: int = 256
    experts: int = 8
    top_k: int = 2
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 1000
    seed: int = 0
    steps: int = 80
    batch: int = 16
    seq: int = 64


    def check(self) -> None:
        head_dim = self.hidden // self.heads
        for what, size in (("hidden", self.hidden), ("intermediate", self.intermediate),
                           ("KV projection (kv_heads x head_dim)", self.kv_heads * head_dim)):
            if size % fp8_block.BLOCK[0]:
                raise SystemExit(f"tiny_moe: {what} {size} is not a multiple of {fp8_block.BLOCK[0]} (block FP8)")
        if self.heads % self.kv_heads or self.top_k > self.experts:
            raise SystemExit("tiny_moe: heads must be a multiple of kv_heads, and top_k at most experts")


# The context length: at least the largest prefill shape sglang captures in its piecewise CUDA graph (by default
# its chunked prefill size: 8,192 on an H200, 16,384 on larger GPUs). sglang at 6ffc74ef warms each captured shape
# up as ONE request of that many tokens, so a shorter context overruns the request's token table; the first
# failing call was cuBLAS's (CUBLAS_STATUS_EXECUTION_FAILED in piecewise_cuda_graph_runner.warmup_compile, H200,
# 2026-12-03, with 4,096). Upstream: sglang#21112, fixed by #22516 (clamp to the context) and #30206 (several
# requests per shape), both after the pin.
CONTEXT = 32768


def config(shape: Shape) -> dict[str, Any]:
    return {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.hidden // shape.heads, "num_local_experts": shape.experts,
        "num_experts_per_tok": shape.top_k, "vocab_size": shape.vocab, "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 0, "eos_token_id": 1,
        "torch_dtype": "bfloat16", "tie_word_embeddings": False, "hidden_act": "silu", "sliding_window": None,
        "router_aux_loss_coef": AUX_LOSS_COEF, "output_router_logits": False, "router_jitter_noise": 0.0,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
    }


def key(shape: Shape, device: str) -> str:
    import torch
    import transformers

    sources = [(HERE / name).read_bytes() for name in ("tiny_moe.py", "tiny_model.py", "fp8_block.py")]
    spec = {"shape": asdict(shape), "device": device.split(":")[0], "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sources": [hashlib.sha256(s).hexdigest() for s in sources],
            "text": docstring_corpus.build().sha256(),
            "eval": hashlib.sha256((HERE / "tiny_moe_eval.py").read_bytes()).hexdigest()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _aux_loss(model: Any, batch: Any) -> Any:
    """The causal LM loss (transformers' own, which shifts the labels) plus AUX_LOSS_COEF x Mixtral's load-balancing
    loss of each layer's router logits alone, summed over the layers (AUX_LOSS_FORM)."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    ids = batch[:, :-1]
    out = model(input_ids=ids, output_router_logits=True)  # no labels: the model adds no pooled term of its own
    lm = model.loss_function(out.logits, ids, model.config.vocab_size)
    cfg = model.config
    balance = sum(load_balancing_loss_func((layer,), cfg.num_local_experts, cfg.num_experts_per_tok)
                  for layer in out.router_logits)
    return lm + AUX_LOSS_COEF * balance


def _v4_names(state: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 keeps Mixtral's experts fused in memory (`mlp.experts.gate_up_proj` [E, 2I, H] with the
    gate first, `mlp.experts.down_proj` [E, H, I], `mlp.gate`); its own save_pretrained writes them back as the
    4.x per-expert names SGLang loads. The same split here (checked on the H200's transformers 5.17)."""
    out: dict[str, Any] = {}
    for k, v in state.items():
        m = re.match(r"(model\.layers\.\d+)\.mlp\.(gate\.weight|experts\.gate_up_proj|experts\.down_proj)$", k)
        if not m:
            out[k] = v
        elif m.group(2) == "gate.weight":
            out[f"{m.group(1)}.block_sparse_moe.gate.weight"] = v
        elif m.group(2) == "experts.gate_up_proj":
            half = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{m.group(1)}.block_sparse_moe.experts.{e}.w1.weight"] = v[e, :half]
                out[f"{m.group(1)}.block_sparse_moe.experts.{e}.w3.weight"] = v[e, half:]
        else:
            for e in range(v.shape[0]):
                out[f"{m.group(1)}.block_sparse_moe.experts.{e}.w2.weight"] = v[e]
    return out


def _canonical(state: dict[str, Any], shape: Shape) -> dict[str, Any]:
    state = _v4_names(state)
    want = f"model.layers.{shape.layers - 1}.block_sparse_moe.experts.{shape.experts - 1}.w2.weight"
    if want not in state:
        raise SystemExit(f"tiny_moe: this transformers names Mixtral's weights otherwise ({want} is missing; "
                         f"e.g. {sorted(state)[:3]}): SGLang's loader maps the 4.x names; use transformers 4.5x")
    return {k: v.detach().to("cpu") for k, v in state.items() if "rotary_emb" not in k}


def _save(folder: Path, tensors: dict[str, Any], cfg: dict[str, Any], tokenizer_from: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy2(tokenizer_from / name, folder / name)


def fp8_tensors(bf16: dict[str, Any]) -> dict[str, Any]:
    """The block-FP8 copy of a bf16 state dict: QUANTIZED weights as (weight, weight_scale_inv), the rest as is."""
    out: dict[str, Any] = {}
    for name, tensor in bf16.items():
        if QUANTIZED.search(name):
            out[name], out[name.removesuffix("weight") + "weight_scale_inv"] = fp8_block.quantize(tensor)
        else:
            out[name] = tensor
    return out


def fp8_folder(bf16: Path, out: Path) -> Path:
    """The block-FP8 copy of a bf16 checkpoint folder (the GPU host makes it from the carried bf16 one: the same
    quantisation, fp8_block.py, so the carry holds one copy)."""
    from safetensors.torch import load_file

    cfg = json.loads((bf16 / "config.json").read_text())
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _save(partial, fp8_tensors(load_file(str(bf16 / "model.safetensors"))),
          {**cfg, "quantization_config": fp8_block.QUANTIZATION_CONFIG}, bf16)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def make(cache: Path, shape: Shape, device: str = "cpu") -> dict[str, Any]:
    """{"bf16": folder, "fp8": folder, "key", "cached", "training"}: made once per key."""
    shape.check()
    root = cache / f"tiny-moe-{key(shape, device)}"
    if (root / "training.json").is_file():
        return {"bf16": str(root / "bf16"), "fp8": str(root / "fp8"), "key": root.name, "cached": True,
                "training": json.loads((root / "training.json").read_text())}
    import torch
    from tokenizers import Tokenizer
    from transformers import MixtralConfig, MixtralForCausalLM

    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    work = partial / "tokenizer"
    corpus = docstring_corpus.build()
    docstring_corpus.check_disjoint(corpus.prompts, corpus.train)
    tiny_model.make_tokenizer(work, shape.vocab, corpus.train)
    cfg = config(shape)
    t0 = time.monotonic()
    torch.manual_seed(shape.seed)
    model = MixtralForCausalLM(MixtralConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"}))
    model = model.to(device=device, dtype=torch.float32)
    record: dict[str, Any] = tiny_model.train(model, work, shape.steps, device, shape.seq, loss_of=_aux_loss,
                                              batch=shape.batch, text="\n".join(corpus.train))
    record["seconds"] = round(time.monotonic() - t0, 1)
    model = model.to(torch.bfloat16).eval()
    record["corpus"] = {"stdlib": corpus.stdlib, "python": sys.version.split()[0], "sha256": corpus.sha256(),
                        "modules_train_held_out": corpus.modules, "train_docstrings": len(corpus.train),
                        "held_out_docstrings": len(corpus.held_out), "candidate_prompts": len(corpus.prompts),
                        # check_disjoint ran above: no candidate repeats or occurs in the training text
                        "candidates_absent_from_training_text": True}
    record.update(tiny_moe_eval.evaluate(model, Tokenizer.from_file(str(work / "tokenizer.json")), corpus, shape,
                                         device))
    record["seconds_with_eval"] = round(time.monotonic() - t0, 1)
    bf16 = _canonical(model.state_dict(), shape)
    _save(partial / "bf16", bf16, cfg, work)
    _save(partial / "fp8", fp8_tensors(bf16), {**cfg, "quantization_config": fp8_block.QUANTIZATION_CONFIG}, work)
    record.update(shape=asdict(shape), device=device, torch=torch.__version__,
                  load_balancing={"coef": AUX_LOSS_COEF, "form": AUX_LOSS_FORM},
                  quantized_weights=sum(1 for n in bf16 if QUANTIZED.search(n)))
    (partial / "training.json").write_text(json.dumps(record, indent=1))
    (partial / "prompts.json").write_text(json.dumps(record["prompts"], indent=1))
    shutil.rmtree(work)
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return {"bf16": str(root / "bf16"), "fp8": str(root / "fp8"), "key": root.name, "cached": False,
            "training": record}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path)
    for field, default in asdict(Shape()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=int,
                            default=None if field in TRAINING["cpu"] else default)
    parser.add_argument("--device", default="cpu", help="torch device for training (e.g. cuda).")
    parser.add_argument("--fp8-from", type=Path, default=None, metavar="BF16_DIR",
                        help="Only write the block-FP8 copy of this bf16 folder to CACHE (a folder), and stop.")
    args = parser.parse_args()
    if args.fp8_from:
        print(fp8_folder(args.fp8_from, args.cache))
        return
    training = TRAINING["cpu" if args.device == "cpu" else "cuda"]  # the defaults of steps, batch, seq
    shape = Shape(**{f: training[f] if getattr(args, f) is None else getattr(args, f) for f in asdict(Shape())})
    made = make(args.cache, shape, args.device)
    print(json.dumps({k: made[k] for k in ("bf16", "fp8", "key", "cached")}))
    t = made["training"]
    print(f"loss {t['first_loss']:.3f} -> {t['last_loss']:.3f} in {t['steps']} steps ({t.get('seconds')} s); "
          f"held-out {t['held_out_loss']:.3f} (unigram {t['unigram_held_out_loss']:.3f}); "
          f"expert load ok: {t['expert_load_ok']}; prompts kept {len(t['prompts'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
