"""What the trained tiny MoE learned, measured on text it never saw (issue 70 item 1), and its 64 prompts.

On the held-out docstrings (docstring_corpus.py): the loss (against the unigram model of the training text, the
best a model that learned no context can do), each expert's share of the routing decisions per layer, and, per
candidate prompt, the model's greedy continuation with each step's top-1 minus top-2 logit (exact ties counted).
The rules, fixed here before any model was measured:

- EXPERT_FLOOR: every expert of every layer gets at least 2 % of the held-out routing decisions (uniform: 1/8 =
  12.5 %); below it the model fails the check (`expert_load_ok` false).
- MARGIN_MIN: a prompt is kept when the first greedy step's top-1 minus top-2 logit (bf16, CPU) is at least 0.25:
  a gap bf16 rounding (~0.03 at these logits) cannot close, so two correct implementations pick the same first
  token. The first PROMPTS kept candidates, in the corpus's order, are the prompts; exact ties are counted at the
  first step here and at every step where the prompts run (token_agreement.py's reference keeps each step's
  margin), not filtered (vLLM's rule stops at the first divergence and allows top-k either way).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

EXPERT_FLOOR = 0.02
MARGIN_MIN = 0.25
PROMPTS = 64
EVAL_SEQ = 256
EVAL_TOKENS = 8192  # held-out tokens measured (the split's first this many; 2 shared cores)
TRAIN_SAMPLE = 4096  # training tokens whose loss is measured beside it (the text's first this many)


def loss_and_load(model: Any, ids: list[int], device: str, top_k: int, experts: int) -> tuple[float, list[list[float]]]:
    """Mean next-token loss over `ids` in windows of EVAL_SEQ, and per layer each expert's share of the top-k
    routing decisions (one pass: the router logits come with the logits)."""
    import torch

    total, count = 0.0, 0
    counts = [[0] * experts for _ in range(len(model.model.layers))]
    with torch.no_grad():
        for s in range(0, len(ids) - 1, EVAL_SEQ):
            window = ids[s:s + EVAL_SEQ + 1]
            if len(window) < 2:
                break
            x = torch.tensor([window], device=device)
            out = model(input_ids=x[:, :-1], output_router_logits=True)
            total += float(torch.nn.functional.cross_entropy(out.logits[0].float(), x[0, 1:], reduction="sum"))
            count += len(window) - 1
            for layer, logits in enumerate(out.router_logits):
                picked = torch.bincount(logits.topk(top_k, dim=-1).indices.flatten(), minlength=experts)
                counts[layer] = [a + int(b) for a, b in zip(counts[layer], picked.tolist(), strict=True)]
    return total / count, [[round(c / sum(row), 4) for c in row] for row in counts]


def unigram_loss(train_ids: list[int], ids: list[int], vocab: int) -> float:
    """The held-out cross-entropy of the training text's token frequencies (add-one smoothed)."""
    counts = Counter(train_ids)
    n = len(train_ids) + vocab
    return -sum(math.log((counts[t] + 1) / n) for t in ids[1:]) / (len(ids) - 1)


def first_margins(model: Any, prompts: list[list[int]], device: str) -> list[float]:
    """Each prompt's first greedy step: top-1 minus top-2 logit, in batches (right-padded, read at its last token)."""
    import torch

    out: list[float] = []
    with torch.no_grad():
        for s in range(0, len(prompts), 64):
            batch = prompts[s:s + 64]
            width = max(map(len, batch))
            x = torch.tensor([p + [1] * (width - len(p)) for p in batch], device=device)
            mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in batch], device=device)
            logits = model(input_ids=x, attention_mask=mask).logits.float()
            for row, p in enumerate(batch):
                top = logits[row, len(p) - 1].topk(2).values
                out.append(float(top[0] - top[1]))
    return out


def select_prompts(model: Any, tok: Any, candidates: list[str], device: str) -> dict[str, Any]:
    """Every candidate's first-step margin; the first PROMPTS with at least MARGIN_MIN are kept. Ties at later steps
    are measured where the prompts run (token_agreement.py's transformers reference records each step's margin)."""
    margins = first_margins(model, [tok.encode(t).ids for t in candidates], device)
    measured = [{"prompt": t, "first_margin": round(m, 4)} for t, m in zip(candidates, margins, strict=True)]
    kept = [m for m in measured if m["first_margin"] >= MARGIN_MIN][:PROMPTS]
    return {"margin_min": MARGIN_MIN, "candidates": measured, "prompts": [m["prompt"] for m in kept],
            "exact_ties_first_step_all": sum(1 for m in margins if m == 0.0),
            "exact_ties_first_step_kept": sum(1 for m in kept if m["first_margin"] == 0.0)}


def evaluate(model: Any, tok: Any, corpus: Any, shape: Any, device: str) -> dict[str, Any]:
    """The record's evaluation part: held-out loss, unigram baseline, expert load, prompts and ties."""
    train_ids = tok.encode("\n".join(corpus.train)).ids
    held_all = tok.encode("\n".join(corpus.held_out)).ids
    held_ids = held_all[:EVAL_TOKENS]
    loss, load = loss_and_load(model, held_ids, device, shape.top_k, shape.experts)
    return {"held_out_tokens": len(held_ids), "held_out_tokens_in_split": len(held_all),
            "held_out_loss": round(loss, 4),
            "train_sample_loss": round(loss_and_load(model, train_ids[:TRAIN_SAMPLE], device, shape.top_k,
                                                     shape.experts)[0], 4),
            "unigram_held_out_loss": round(unigram_loss(train_ids, held_ids, shape.vocab), 4),
            "expert_floor": EXPERT_FLOOR, "expert_share_per_layer": load,
            "expert_load_ok": all(share >= EXPERT_FLOOR for row in load for share in row),
            **select_prompts(model, tok, corpus.prompts, device)}
