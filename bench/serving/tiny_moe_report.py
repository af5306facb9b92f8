"""The tiny MoE's training log into bench/serving/results/tiny_moe_model.json (issue 70 item 1): what it learned.

From the record tiny_moe.py wrote beside the checkpoints (training.json, copied into a raw folder with the run's
stderr): the corpus (Python's own docstrings, docstring_corpus.py) and its held-out split, the loss curve, the
held-out loss beside the unigram baseline (a model that learned no context), each expert's share of the routing
decisions per layer against the floor, the prompts' first-step margins with exact ties counted, and the 64 prompts
kept (token_agreement.py prompts with them). The rules (floor, margin) are tiny_moe_eval.py's, written before the
model was measured. Nothing is typed by hand.

With --fp8-tolerance, fp8_tolerance.py's measurement (raw) goes in too: the min_pass_fraction the served FP8 run is
held to (evidence_on_gpu_host.sh reads it from the results file).

    python bench/serving/tiny_moe_report.py bench/serving/raw/RUN/training.json [--fp8-tolerance RAW/fp8-tolerance.json] \
        --out bench/serving/results/tiny_moe_model.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results" / "tiny_moe_model.json"


def tolerance(measured: dict[str, Any], raw_name: str) -> dict[str, Any]:
    return {"raw": raw_name, "rule": measured["rule"], "prompts": measured["prompts"], "passed": measured["passed"],
            "identical": measured["identical"], "min_pass_fraction": measured["min_pass_fraction"],
            "failed_prompts": [v["prompt"] for v in measured["verdicts"] if not v["passed"]],
            "first_divergence_steps": sorted(v["first_divergence"] for v in measured["verdicts"]
                                             if v["first_divergence"] is not None)}


def report(record: dict[str, Any], raw_name: str) -> dict[str, Any]:
    shares = record["expert_share_per_layer"]
    prompts = record["prompts"]
    candidates = record["candidates"]
    kept = [c for c in candidates if c["prompt"] in set(prompts)]
    return {
        "what": __doc__.split("\n\n")[0],
        "raw": raw_name,
        "shape": record["shape"], "device": record["device"], "torch": record["torch"],
        "corpus": record["corpus"],
        "training": {"steps": record["steps"], "tokens_in_corpus": record["tokens"],
                     "tokens_seen": record["steps"] * record["shape"]["batch"] * record["shape"]["seq"],
                     "first_loss": round(record["first_loss"], 4), "last_loss": round(record["last_loss"], 4),
                     "loss_every_10": record["loss_every_10"], "seconds": record["seconds"],
                     "seconds_with_eval": record["seconds_with_eval"]},
        "held_out": {"tokens": record["held_out_tokens"], "tokens_in_split": record["held_out_tokens_in_split"],
                     "loss": record["held_out_loss"],
                     "unigram_loss": record["unigram_held_out_loss"],
                     "train_sample_loss": record["train_sample_loss"],
                     "learned_beyond_unigram": record["held_out_loss"] < record["unigram_held_out_loss"]},
        "expert_load": {"floor": record["expert_floor"], "share_per_layer": shares,
                        "min_share": min(min(row) for row in shares), "max_share": max(max(row) for row in shares),
                        "ok": record["expert_load_ok"],
                        # the training's load-balancing term (recorded from run c on: tiny_moe.py's AUX_LOSS_*)
                        "load_balancing": record.get("load_balancing")},
        "margins": {"rule": f"keep a prompt when its first greedy step's top-1 minus top-2 logit is at least "
                            f"{record['margin_min']} (bf16, CPU); the first 64 kept, in the corpus's order",
                    "margin_min": record["margin_min"], "candidates_measured": len(candidates),
                    "candidates_kept": sum(1 for c in candidates if c["first_margin"] >= record["margin_min"]),
                    "exact_ties_first_step_all": record["exact_ties_first_step_all"],
                    "exact_ties_first_step_kept": record["exact_ties_first_step_kept"],
                    "kept_min_first_margin": min((c["first_margin"] for c in kept), default=None),
                    "ties_at_later_steps": "measured where the prompts run: token_agreement.py's hf_margins"},
        "prompts_distinct": len(set(prompts)),
        "prompts": prompts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("training", type=Path, help="training.json of a tiny_moe.py run (raw)")
    parser.add_argument("--fp8-tolerance", type=Path, default=None, help="fp8_tolerance.py's output (raw)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    record = json.loads(args.training.read_text())
    result = report(record, f"{args.training.parent.name}/{args.training.name}")
    if args.fp8_tolerance:
        name = f"{args.fp8_tolerance.parent.name}/{args.fp8_tolerance.name}"
        result["fp8_tolerance"] = tolerance(json.loads(args.fp8_tolerance.read_text()), name)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    h, e = result["held_out"], result["expert_load"]
    print(f"held-out loss {h['loss']} (unigram {h['unigram_loss']}); expert share {e['min_share']}..{e['max_share']} "
          f"(floor {e['floor']}: {'ok' if e['ok'] else 'BELOW'}); {result['prompts_distinct']} distinct prompts")
    print(args.out)


if __name__ == "__main__":
    main()
