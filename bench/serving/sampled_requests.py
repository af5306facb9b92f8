"""Non-greedy requests to a running sglang server, so that its sampling kernels run (greedy decoding is an argmax).

The logprob check and sglang.bench_serving send temperature 0, which sglang answers with torch.argmax and
no sampling kernel; these requests ask for temperature, top-k, top-p and min-p, which go through the
sampling backend sglang chose (flashinfer's or sgl-kernel's sampling from probs). Each reply must hold
max_new_tokens ids inside the model's vocabulary. Exit 1 otherwise.

    python bench/serving/sampled_requests.py --url http://127.0.0.1:30000 [--requests 8] [--max-new-tokens 16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from token_agreement import _http, prompt_texts

# One request per variant: top-k alone, top-p alone, min-p, and all three (sglang picks a kernel per mix).
SAMPLING = [{"temperature": 0.8, "top_k": 20}, {"temperature": 0.8, "top_p": 0.9},
            {"temperature": 1.0, "min_p": 0.05}, {"temperature": 0.7, "top_k": 50, "top_p": 0.95, "min_p": 0.02}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    url = args.url.rstrip("/")
    try:  # sglang's /get_model_info may not say the vocabulary's size; then only the count is checked
        vocab = int((_http("GET", f"{url}/get_model_info", timeout=30) or {}).get("vocab_size") or 0) or None
    except (RuntimeError, OSError, ValueError):
        vocab = None
    bad = []
    for i, text in enumerate(prompt_texts(args.requests)):
        params = {**SAMPLING[i % len(SAMPLING)], "max_new_tokens": args.max_new_tokens, "ignore_eos": True}
        reply = _http("POST", f"{url}/generate", {"text": text, "sampling_params": params})
        reply = reply[0] if isinstance(reply, list) else reply
        ids = reply.get("output_ids") or []
        ok = len(ids) == args.max_new_tokens and all(0 <= t < (vocab or 1 << 31) for t in ids)
        print(json.dumps({"request": i, "sampling": params, "tokens": len(ids), "ok": ok}))
        if not ok:
            bad.append(i)
    print(f"sampled requests: {args.requests - len(bad)}/{args.requests} well-formed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
