"""Greedy-token agreement between a running sglang server and transformers on one checkpoint.

Builds N fixed English prompts, tokenizes them with the model's tokenizer, asks the server's
`/generate` for T greedy tokens per prompt (temperature 0, ignore_eos, token logprobs), and
runs transformers' own greedy loop (AutoModelForCausalLM, --dtype, --device) on the same ids.
It measures: the matching prefix per prompt until the first divergence (as a fraction of all
N*T tokens), position-wise agreement over all T, prompts fully identical, teacher-forced
agreement (transformers' argmax given sglang's own prefix), the verdict of vLLM's check_logprobs_close
rule per prompt (logprobs_close.py: where the ids first diverge, each side's token must be in the other's
top-k logprobs, k=5; the server returns its top-k with `top_logprobs_num`), and at each first divergence the
gap between transformers' logprob of its own top token and of sglang's token (a gap near 0
is a near-tie broken differently by bf16 noise; a large one is a real disagreement), plus the
largest |sglang logprob - transformers logprob| of the same token on the agreeing prefix.
Runs offline (local files only). Writes JSON to --out and prints a short summary. With --served-fp8 the
server serves the block-FP8 copy of --model's bf16 weights, and the logprob-close verdict takes the FP8
tolerance (logprobs_close.py: at least 90 % of prompts pass the top-5 rule).

    python bench/serving/token_agreement.py --model DIR --url http://127.0.0.1:30000 \\
        [--prompts 64] [--max-new-tokens 32] [--top-k 5] [--served-fp8] [--device cuda] [--dtype bfloat16] \\
        [--wait-s 0] [--fail-below FRAC] [--fail-not-close] --out agreement.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import logprobs_close

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SENTENCES = [
    "The capital of France is Paris.",
    "The quick brown fox jumps over the lazy dog.",
    "GPUs run kernels; kernels are compiled for an architecture.",
    "One, two, three, four, five, six, seven.",
    "Serving a model means answering requests with generated tokens.",
    "In the morning the market opens and the traders start to shout.",
    "Water boils at one hundred degrees at sea level.",
    "She read the letter twice before she put it back in the drawer.",
    "A compiler turns source code into machine instructions.",
    "The train to the north leaves every hour from platform four.",
    "Rain fell on the roof all night, and the river rose.",
    "Matrix multiplication is the heart of every transformer layer.",
    "He planted tomatoes, beans and a row of sunflowers.",
    "The library closes at eight, but the reading room stays open.",
    "Light from the sun takes about eight minutes to reach the earth.",
    "Please write a short story about a robot who learns to paint.",
]

# No proxy for the server: it is local, and an http_proxy in the environment must not catch it.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# The prompts: held-out docstrings the tiny MoE never saw, each with a decisive first step (issue 70;
# tiny_moe_eval.py's rule), as tiny_moe_report.py keeps them from the training log.
PROMPTS_FILE = Path(__file__).resolve().parent / "results" / "tiny_moe_model.json"


def prompt_texts(n: int) -> list[str]:
    """The first N of the tiny MoE's held-out prompts: N distinct texts, or a one-line refusal."""
    kept: list[str] = json.loads(PROMPTS_FILE.read_text())["prompts"]
    if n > len(kept):
        raise SystemExit(f"token_agreement: {n} prompts asked, but {PROMPTS_FILE.name} keeps {len(kept)} held-out "
                         f"prompts: ask for at most {len(kept)} (--prompts)")
    if len(set(kept[:n])) != n:
        raise SystemExit(f"token_agreement: {PROMPTS_FILE.name}'s prompts repeat: remake it (tiny_moe_report.py)")
    return kept[:n]


@dataclass
class ServerOutput:
    tokens: list[int]
    logprobs: list[float | None]  # sglang's logprob of each of its tokens (None when not returned)
    ids_source: str  # "output_ids" or "output_token_logprobs"
    ids_disagree: bool  # output_ids and the logprob triples name different tokens
    finish_reason: Any = None
    top: list[dict[int, float]] = field(default_factory=list)  # per step: the server's top-k token -> logprob


def _http(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 600.0) -> Any:
    """`serve --check` hands a keyed server's API key over as OPENAI_API_KEY (as bench_serving reads it)."""
    data = None if body is None else json.dumps(body).encode()
    key = os.environ.get("OPENAI_API_KEY")
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{method} {url}: HTTP {e.code}: {e.read().decode(errors='replace')[:2000]}") from e


def wait_for_server(url: str, wait_s: float) -> None:
    """Poll GET /health until it answers 200, for at most wait_s seconds (0: do not wait)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with _OPENER.open(f"{url}/health", timeout=10) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            if wait_s > 0:
                raise RuntimeError(f"{url}/health did not answer 200 within {wait_s:.0f} s")
            return
        time.sleep(2)


def parse_generate_response(resp: Any) -> ServerOutput:
    """Token ids from an sglang /generate reply (0.5.9 shape).

    The reply is {"text"?, "output_ids": [...], "meta_info": {"output_token_logprobs":
    [[logprob, token_id, text|None], ...], ...}}; "text" is absent with --skip-tokenizer-init.
    A batch request answers a list of such dicts; we send single requests but accept a list of one.
    """
    if isinstance(resp, list):
        if len(resp) != 1:
            raise ValueError(f"expected one /generate result, got {len(resp)}")
        resp = resp[0]
    if not isinstance(resp, dict):
        raise ValueError(f"unexpected /generate reply: {str(resp)[:500]}")
    meta = resp.get("meta_info") or {}
    triples = meta.get("output_token_logprobs") or []
    lp_ids = [int(t[1]) for t in triples]
    lps: list[float | None] = [None if t[0] is None else float(t[0]) for t in triples]
    out_ids = resp.get("output_ids")
    if out_ids is not None:
        tokens = [int(t) for t in out_ids]
        source = "output_ids"
    elif triples:
        tokens = lp_ids
        source = "output_token_logprobs"
    else:
        raise ValueError(f"/generate reply has neither output_ids nor meta_info.output_token_logprobs: "
                         f"{json.dumps(resp)[:500]}")
    disagree = bool(triples) and lp_ids != tokens
    if len(lps) != len(tokens) or disagree:
        lps = [None] * len(tokens)
    # meta_info.output_top_logprobs: per output step, [[logprob, token_id, text|None], ...] (top_logprobs_num long).
    top = [{int(t[1]): float(t[0]) for t in step if t[0] is not None} for step in meta.get("output_top_logprobs") or []]
    return ServerOutput(tokens, lps, source, disagree, meta.get("finish_reason"), top)


def query_server(url: str, input_ids: list[int], max_new_tokens: int, timeout: float,
                 top_k: int = logprobs_close.TOP_K) -> ServerOutput:
    body = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
        "return_logprob": True,
        "top_logprobs_num": top_k,
        "logprob_start_len": -1,
    }
    return parse_generate_response(_http("POST", f"{url}/generate", body, timeout))


@dataclass
class Divergence:
    prompt: int
    position: int  # index into the generated tokens
    hf_token: int
    sglang_token: int
    hf_logprob_hf_token: float
    hf_logprob_sglang_token: float | None  # None: sglang's token is outside the model's vocab
    gap: float | None  # hf_logprob_hf_token - hf_logprob_sglang_token (>= 0); None when that is unknown
    sglang_logprob_sglang_token: float | None


@dataclass
class PromptResult:
    prompt: int
    text: str
    input_ids: list[int]
    hf_tokens: list[int]
    sglang_tokens: list[int]
    first_divergence: int | None  # None: identical over all max_new_tokens
    positional_matches: int
    teacher_forced_matches: int
    sglang_ids_source: str
    sglang_ids_disagree: bool
    finish_reason: Any = None
    hf_logprobs: list[float] = field(default_factory=list)
    hf_margins: list[float] = field(default_factory=list)  # transformers' top-1 minus top-2 logprob per step
    sglang_logprobs: list[float | None] = field(default_factory=list)
    logprobs_close: dict[str, Any] = field(default_factory=dict)  # logprobs_close.Verdict of this prompt


def load_model(model_dir: Path, device: str, dtype_name: str) -> tuple[Any, Any]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, dtype_name)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}  # 5.x deprecates torch_dtype
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, **dtype_kw)
    return tok, model.to(device).eval()


@dataclass
class GreedyRun:
    tokens: list[int]
    logprobs: list[float]  # logprob of each own token
    margins: list[float]  # top-1 minus top-2 logprob at each step
    other_logprobs: list[float | None]  # logprob of other[step] at each step
    top: list[dict[int, float]] = field(default_factory=list)  # per step: top-k token -> logprob


def hf_greedy(model: Any, input_ids: list[int], steps: int, device: str, other: list[int],
              top_k: int = logprobs_close.TOP_K) -> GreedyRun:
    """Greedy decode with the KV cache (argmax of the float32 log-softmax of each step's logits)."""
    import inspect

    import torch

    # transformers <= 5.x early: past_key_values=; later 5.x: cache= (past_key_values deprecated).
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    run = GreedyRun([], [], [], [])
    with torch.inference_mode():
        x = torch.tensor([input_ids], device=device)
        cache = None
        for step in range(steps):
            out = model(input_ids=x, use_cache=True, **({cache_kw: cache} if cache is not None else {}))
            cache = out.get("cache")
            if cache is None:
                cache = out.get("past_key_values")
            logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            top2 = torch.topk(logp, 2)
            best = torch.topk(logp, min(top_k, logp.numel()))
            run.top.append({int(t): float(v) for t, v in zip(best.indices.tolist(), best.values.tolist(), strict=True)})
            nxt = int(torch.argmax(logp))
            run.tokens.append(nxt)
            run.logprobs.append(float(logp[nxt]))
            run.margins.append(float(top2.values[0] - top2.values[1]))
            ok = step < len(other) and 0 <= other[step] < logp.numel()
            run.other_logprobs.append(float(logp[other[step]]) if ok else None)
            x = torch.tensor([[nxt]], device=device)
    return run


def hf_teacher_forced_argmax(model: Any, input_ids: list[int], continuation: list[int], device: str) -> list[int]:
    """transformers' argmax at each continuation position, given the prompt and continuation[:i]."""
    import torch

    if not continuation:
        return []
    with torch.inference_mode():
        x = torch.tensor([input_ids + continuation], device=device)
        logits = model(input_ids=x, use_cache=False).logits[0]
    start = len(input_ids) - 1
    return [int(t) for t in torch.argmax(logits[start:start + len(continuation)].float(), dim=-1)]


def compare(model: Any, tok: Any, url: str, n_prompts: int, max_new_tokens: int, device: str,
            timeout: float, top_k: int = logprobs_close.TOP_K) -> tuple[list[PromptResult], list[Divergence], list[float]]:
    results: list[PromptResult] = []
    divergences: list[Divergence] = []
    lp_diffs: list[float] = []
    for i, text in enumerate(prompt_texts(n_prompts)):
        ids = [int(t) for t in tok(text)["input_ids"]]
        srv = query_server(url, ids, max_new_tokens, timeout, top_k)
        sgl = srv.tokens[:max_new_tokens]
        run = hf_greedy(model, ids, max_new_tokens, device, sgl, top_k)
        close = logprobs_close.check(logprobs_close.Output(run.tokens, run.top),
                                     logprobs_close.Output(sgl, srv.top[:max_new_tokens]),
                                     k=top_k, prompt=i, names=("transformers", "sglang"))
        hf, hf_lp, hf_lp_of_sgl = run.tokens, run.logprobs, run.other_logprobs
        first = next((j for j in range(max_new_tokens) if j >= len(sgl) or hf[j] != sgl[j]), None)
        agree_to = max_new_tokens if first is None else first
        for j in range(agree_to):
            srv_lp = srv.logprobs[j]
            if srv_lp is not None:
                lp_diffs.append(abs(srv_lp - hf_lp[j]))
        if first is not None and first < len(sgl):
            lp_sgl = hf_lp_of_sgl[first]
            gap = None if lp_sgl is None else hf_lp[first] - lp_sgl
            divergences.append(Divergence(i, first, hf[first], sgl[first], hf_lp[first], lp_sgl, gap,
                                          srv.logprobs[first]))
        tf = hf_teacher_forced_argmax(model, ids, sgl, device)
        results.append(PromptResult(
            prompt=i, text=text, input_ids=ids, hf_tokens=hf, sglang_tokens=sgl, first_divergence=first,
            positional_matches=sum(1 for a, b in zip(hf, sgl, strict=False) if a == b),
            teacher_forced_matches=sum(1 for a, b in zip(tf, sgl, strict=False) if a == b),
            sglang_ids_source=srv.ids_source, sglang_ids_disagree=srv.ids_disagree,
            finish_reason=srv.finish_reason, hf_logprobs=hf_lp, hf_margins=run.margins,
            sglang_logprobs=srv.logprobs[:max_new_tokens], logprobs_close=asdict(close)))
    return results, divergences, lp_diffs


def close_summary(results: list[PromptResult], top_k: int, served_fp8: bool,
                  min_pass: float | None) -> logprobs_close.Summary:
    """vLLM's rule over all prompts, with the tolerance of what is served (logprobs_close.py)."""
    verdicts = [logprobs_close.Verdict(**r.logprobs_close) for r in results]
    if min_pass is None:
        min_pass = logprobs_close.FP8_MIN_PASS_FRACTION if served_fp8 else 1.0
    what = ("the server serves the block-FP8 copy of the bf16 reference" if served_fp8
            else "the server serves the reference's own weights")
    return logprobs_close.summarize(
        verdicts, k=top_k, min_pass_fraction=min_pass,
        tolerance=f"{what}: a prompt passes when, at its first divergence, each side's token is in the other's "
                  f"top {top_k} (vLLM's check_logprobs_close); the run passes when at least {min_pass:.0%} of "
                  "prompts pass")


def summarize(results: list[PromptResult], divergences: list[Divergence], lp_diffs: list[float],
              max_new_tokens: int, tie_gap: float) -> dict[str, Any]:
    total = len(results) * max_new_tokens
    prefix = sum(max_new_tokens if r.first_divergence is None else r.first_divergence for r in results)
    gaps = [d.gap for d in divergences if d.gap is not None]
    return {
        "prompts": len(results),
        "max_new_tokens": max_new_tokens,
        "total_tokens": total,
        "prefix_match_tokens": prefix,
        "prefix_match_fraction": prefix / total if total else None,
        "positional_agreement": sum(r.positional_matches for r in results) / total if total else None,
        "teacher_forced_agreement": sum(r.teacher_forced_matches for r in results) / total if total else None,
        "prompts_identical": sum(1 for r in results if r.first_divergence is None),
        "prompts_short": sum(1 for r in results if len(r.sglang_tokens) < max_new_tokens),
        "divergences": len(divergences),
        "divergences_without_gap": sum(1 for d in divergences if d.gap is None),
        "tie_gap": tie_gap,
        "divergences_near_tie": sum(1 for d in divergences if d.gap is not None and d.gap <= tie_gap),
        "divergences_beyond_tie": sum(1 for d in divergences if d.gap is None or d.gap > tie_gap),
        # How ill-conditioned greedy is here: transformers' own steps whose top-2 margin is <= tie_gap
        # (a random model in bf16 has many exact ties; any two implementations may break them differently).
        "hf_steps_near_tie": sum(1 for r in results for m in r.hf_margins if m <= tie_gap),
        # The smallest top-1/top-2 logprob margin of transformers' greedy steps over all prompts: how far
        # the closest call is from a tie (a trained model keeps it well above bf16 noise).
        "hf_min_margin": min((m for r in results for m in r.hf_margins), default=None),
        "max_gap": max(gaps) if gaps else None,
        "median_gap": statistics.median(gaps) if gaps else None,
        "logprob_max_abs_diff_on_agreeing_prefix": max(lp_diffs) if lp_diffs else None,
        "sglang_ids_disagree": sum(1 for r in results if r.sglang_ids_disagree),
    }


def server_info(url: str) -> Any:
    try:
        return _http("GET", f"{url}/get_model_info", timeout=30)
    except (RuntimeError, urllib.error.URLError, OSError, ValueError) as e:
        return {"error": str(e)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="HF folder: config, safetensors, tokenizer.")
    parser.add_argument("--url", required=True, help="sglang server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, required=True, help="JSON report.")
    parser.add_argument("--device", default=None, help="torch device for transformers (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--timeout-s", type=float, default=600.0, help="Per-request HTTP timeout.")
    parser.add_argument("--wait-s", type=float, default=0.0, help="Wait up to this long for GET /health to answer 200.")
    parser.add_argument("--tie-gap", type=float, default=0.05,
                        help="A first divergence whose logprob gap is at most this counts as a near-tie.")
    parser.add_argument("--fail-below", type=float, default=None,
                        help="Exit 1 if prefix_match_fraction is below this (e.g. 0.9).")
    parser.add_argument("--top-k", type=int, default=logprobs_close.TOP_K,
                        help="At a first divergence, each side's token must be in the other's top K logprobs.")
    parser.add_argument("--served-fp8", action="store_true",
                        help="The server serves the block-FP8 copy of --model: the FP8 tolerance (see logprobs_close.py).")
    parser.add_argument("--min-pass", type=float, default=None,
                        help="Fraction of prompts that must pass the top-K rule (default 1.0; 0.9 with --served-fp8).")
    parser.add_argument("--fail-not-close", action="store_true",
                        help="Exit 1 if the logprob-close verdict over all prompts is 'fail'.")
    parser.add_argument("--fail-beyond-tie", action="store_true",
                        help="Exit 1 if any first divergence has a gap above --tie-gap.")
    args = parser.parse_args(argv)

    import torch
    import transformers

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    url = args.url.rstrip("/")
    wait_for_server(url, args.wait_s)
    t0 = time.monotonic()
    tok, model = load_model(args.model, device, args.dtype)
    try:
        results, divergences, lp_diffs = compare(model, tok, url, args.prompts, args.max_new_tokens, device,
                                                 args.timeout_s, args.top_k)
    except (RuntimeError, ValueError, urllib.error.URLError, OSError) as e:
        print(f"token_agreement: {e}", file=sys.stderr)
        return 2
    summary = summarize(results, divergences, lp_diffs, args.max_new_tokens, args.tie_gap)
    close = close_summary(results, args.top_k, args.served_fp8, args.min_pass)
    summary["logprobs_close"] = close.to_dict()
    report = {
        "summary": summary,
        "setup": {"model": str(args.model), "url": url, "device": device, "dtype": args.dtype,
                  "torch": torch.__version__, "transformers": transformers.__version__,
                  "server_model_info": server_info(url), "seconds": round(time.monotonic() - t0, 2)},
        "divergences": [asdict(d) for d in divergences],
        "per_prompt": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))

    s = summary
    print(f"token agreement: {s['prompts']} prompts x {s['max_new_tokens']} tokens ({device}, {args.dtype})")
    print(f"  prefix match (until first divergence): {s['prefix_match_tokens']}/{s['total_tokens']}"
          f" = {s['prefix_match_fraction']:.3f}")
    print(f"  positional agreement: {s['positional_agreement']:.3f}   teacher-forced: {s['teacher_forced_agreement']:.3f}")
    print(f"  prompts identical: {s['prompts_identical']}/{s['prompts']}   short replies: {s['prompts_short']}")
    for d in divergences:
        lp = "?" if d.hf_logprob_sglang_token is None else f"{d.hf_logprob_sglang_token:.4f}"
        gap = "?" if d.gap is None else f"{d.gap:.4f}"
        print(f"  prompt {d.prompt:2d} pos {d.position:2d}: hf {d.hf_token} ({d.hf_logprob_hf_token:.4f})"
              f" vs sglang {d.sglang_token} ({lp}) gap {gap}")
    if s["max_gap"] is not None:
        print(f"  max gap {s['max_gap']:.4f}   median gap {s['median_gap']:.4f}   near-tie (gap <= {args.tie_gap})"
              f" {s['divergences_near_tie']}/{s['divergences']}")
    print(f"  transformers steps with top-2 margin <= {args.tie_gap}: {s['hf_steps_near_tie']}/{s['total_tokens']}")
    if s["logprob_max_abs_diff_on_agreeing_prefix"] is not None:
        print(f"  max |logprob sglang - hf| on agreeing prefix: {s['logprob_max_abs_diff_on_agreeing_prefix']:.4f}")
    print(f"  logprobs close (top {close.k}): {close.passed}/{close.prompts} prompts pass, {close.identical} identical"
          f" -> {close.verdict} ({close.tolerance})")
    for r in results:
        v = r.logprobs_close
        if not v["passed"]:
            print(f"  prompt {r.prompt:2d} NOT close: {v['reason']}")
    print(f"  report: {args.out}")
    if args.fail_below is not None and (s["prefix_match_fraction"] or 0.0) < args.fail_below:
        print(f"FAIL: prefix_match_fraction {s['prefix_match_fraction']:.3f} < {args.fail_below}", file=sys.stderr)
        return 1
    if args.fail_not_close and close.verdict != "pass":
        print(f"FAIL: {close.prompts - close.passed} prompt(s) not logprob-close ({close.tolerance})", file=sys.stderr)
        return 1
    if args.fail_beyond_tie and s["divergences_beyond_tie"]:
        print(f"FAIL: {s['divergences_beyond_tie']} divergence(s) with gap > {args.tie_gap}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
