"""Make a tiny Llama checkpoint folder offline: a BPE tokenizer and (optionally) random weights.

For serving tests and GPU smoke runs where no hub is reachable. The tokenizer is trained
with the `tokenizers` library on a few sentences (byte-level BPE, so any text encodes);
the model is a few-layer Llama config with random bf16 weights saved by transformers, or,
with `--train-steps N`, trained for N steps (float32 AdamW, then saved in bf16) on a fixed text
(one fixed order, repeated) so that greedy decoding is decisive: a random model's top-2 logits are
near ties that any two implementations may break differently, a trained one's are not.

    python bench/serving/tiny_model.py OUT [--tokenizer-only] [--layers 2] [--hidden 256] [--seed 0]
                               [--train-steps 300] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from token_agreement import SENTENCES

CORPUS = [
    "The capital of France is Paris.", "The quick brown fox jumps over the lazy dog.",
    "GPUs run kernels; kernels are compiled for an architecture.", "One, two, three, four, five, six, seven.",
    "Serving a model means answering requests with generated tokens.",
] * 20


def make_tokenizer(out: Path, vocab: int = 1000, corpus: list[str] | None = None) -> None:
    """A byte-level BPE tokenizer of `vocab` tokens trained on `corpus` (default CORPUS), saved in `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS if corpus is None else corpus, trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 4096}))
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))


def make_config(out: Path, *, layers: int, hidden: int, vocab: int) -> dict[str, object]:
    config: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": hidden * 4, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": hidden // 4, "vocab_size": vocab, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False, "hidden_act": "silu",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return config


def dtype_kwarg(dtype: object) -> dict[str, object]:
    """`dtype=` for transformers >= 4.56 (5.x deprecates `torch_dtype=`), else `torch_dtype=`."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}


def make_weights(out: Path, seed: int, config: dict[str, object]) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), **dtype_kwarg(torch.bfloat16))
    model.save_pretrained(out, safe_serialization=True)
    # transformers 5 rewrites config.json (rope_theta -> rope_parameters, torch_dtype -> dtype); put
    # back the version-neutral one so the folder is the same whichever transformers made it.
    (out / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}, indent=2))


# The fixed training text: the sentences token_agreement.py prompts with, so the prompts it
# builds are in-distribution.
TRAIN_TEXT = SENTENCES


def train(model: Any, out: Path, steps: int, device: str, seq: int = 128, loss_of: Any = None,
          batch: int = 32, text: str | None = None) -> dict[str, Any]:
    """Train `model` (float32, on `device`) in place on TRAIN_TEXT (or `text`, e.g. tiny_moe.py's docstring corpus)
    tokenized by `out`'s tokenizer; the loss curve's ends. `loss_of(model, batch)` gives the loss (default: the
    causal LM loss). The caller seeds torch once, before making the model: its batches are drawn from the same
    generator."""
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    # One fixed order, repeated: every continuation is determined by what came before, so the
    # trained model's greedy choice is decisive everywhere (a shuffled order leaves ties between
    # the possible next sentences).
    ids = tok.encode(" ".join(TRAIN_TEXT) + " ").ids * 64 if text is None else tok.encode(text).ids
    data = torch.tensor(ids, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,), device=device)
        rows = torch.stack([data[s:s + seq + 1] for s in starts.tolist()])
        # transformers shifts the labels itself
        loss = loss_of(model, rows) if loss_of else model(input_ids=rows[:, :-1], labels=rows[:, :-1]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    # every 10th step's loss too: the curve, for the training log
    return {"steps": steps, "first_loss": losses[0], "last_loss": losses[-1], "tokens": len(ids),
            "loss_every_10": [round(x, 4) for x in losses[::10]]}


def train_weights(out: Path, seed: int, steps: int, device: str, seq: int = 128) -> dict[str, Any]:
    """Train the config in `out` on TRAIN_TEXT (a cycle of it) and save bf16 weights; the loss curve's ends."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), **dtype_kwarg(torch.float32)).to(device)
    record = train(model, out, steps, device, seq)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokenizer-only", action="store_true", help="Tokenizer and config.json, no weights.")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-steps", type=int, default=0, help="Train this many steps instead of random weights.")
    parser.add_argument("--device", default="cpu", help="torch device for training (e.g. cuda).")
    args = parser.parse_args()
    make_tokenizer(args.out, args.vocab)
    config = make_config(args.out, layers=args.layers, hidden=args.hidden, vocab=args.vocab)
    if args.train_steps and not args.tokenizer_only:
        trained = train_weights(args.out, args.seed, args.train_steps, args.device)
        (args.out / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}, indent=2))
        (args.out / "training.json").write_text(json.dumps(trained))
        print(json.dumps(trained))
    elif not args.tokenizer_only:
        make_weights(args.out, args.seed, config)
    print(args.out)


if __name__ == "__main__":
    main()
