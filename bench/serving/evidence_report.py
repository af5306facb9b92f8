"""The GPU host's evidence run (evidence_on_gpu_host.sh) into bench/serving/results/evidence-h100.json (issue 70).

From the run's raw tarball (and the first try's, with --first-try): the host and the wheel (sha256, verify), each
sglang start (its arguments and environment, seconds to healthy, CUDA graphs, the checks' return codes), the
sgl_kernel ops of the wheel's own libraries (an op counts only when the library that registered it is one of the
wheel's, verify.json's list; never another package's), per phase (startup, captured in CUDA graphs, eager during the
requests), the utility ops apart; the ops issue 70 names that did not run and why (sglang's source at the commit the
raw names, cited file:function; the raw's evidence beside each); logprob-close per start over the distinct prompt
texts, and the FP8 start's first divergences. Nothing is typed by hand: every number is read from the raw.

    python bench/serving/evidence_report.py bench/serving/raw/RUN/evidence-raw.tar.gz \
        [--first-try bench/serving/raw/RUN/try1-evidence-raw.tar.gz] --out bench/serving/results/evidence-h100.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_serve_report import PIECEWISE_SIZES  # the same capture line the MoE study reads

OUT = Path(__file__).resolve().parent / "results" / "evidence-h100.json"
# Ops of the wheel that do no model arithmetic (a CUDA-graph helper): listed apart from the count.
UTILITY = {"sgl_kernel::weak_ref_tensor"}
PHASES = {"startup": "eager_at_startup", "graph_captured": "graph_captured",
          "eager_during_requests": "eager_during_requests"}
# sglang at the raw's commit (preflight's sglang_from): why an op issue 70 names did not run. The evidence for each
# is read from the raw below; the reason is the source's, cited file:function.
NOT_RUN = {
    "sgl_kernel::fwd (FA3)": (
        "the wheel was built with FA3 off (the recipe h9nofa: no flash_ops library among the wheel's libraries), so "
        "sgl_kernel.flash_attn cannot run and the starts used --attention-backend flashinfer; sgl_kernel::fwd runs "
        "only under the fa3 backend (python/sglang/srt/layers/attention/flashattention_backend.py: "
        "FlashAttentionBackend.forward_extend/forward_decode call sgl_kernel.flash_attn's flash_attn_with_kvcache). "
        "What would run it: a wheel with FA3 for head dim 64 (.device/h9.toml) and ATTENTION=fa3"),
    "sgl_kernel::rotary_embedding": (
        "on CUDA sglang never calls the wheel's rotary op: RotaryEmbedding.__init__ "
        "(python/sglang/srt/layers/rotary_embedding/base.py) takes the fallback only for a head size outside "
        "64/128/256/512 (this model's is 64), and even that fallback is sglang.jit_kernel.pos_enc.rotary_embedding on "
        "CUDA (sgl_kernel's only on HIP); RotaryEmbedding.forward_cuda calls "
        "sglang.jit_kernel.rope.apply_rope_with_cos_sin_cache_inplace -> apply_rope_inplace "
        "(python/sglang/jit_kernel/rope.py), a kernel sglang compiles at run time (load_jit of elementwise/rope.cuh), "
        "registered as sglang::apply_rope_inplace. Nothing in sglang at this commit routes Mixtral's rotary to "
        "sgl_kernel on CUDA"),
    "sampling (sgl_kernel::top_k_renorm_probs, top_p_renorm_probs)": (
        "sampling is flashinfer's: python/sglang/srt/layers/sampler.py imports min_p_sampling_from_probs and "
        "top_k_top_p_sampling_from_probs from flashinfer.sampling and calls them in Sampler._sample_from_probs "
        "(sampling_backend flashinfer, server_args.py: ServerArgs._handle_sampling_backend, flashinfer being "
        "installed); the top_k_renorm_prob/top_p_renorm_prob it takes from sgl_kernel are Python wrappers that hand "
        "over to flashinfer.sampling whenever flashinfer imports (sgl-kernel/python/sgl_kernel/sampling.py: "
        "top_k_renorm_probs, top_p_renorm_probs), so the wheel's sampling ops are never called"),
}


def members(pack: Path) -> dict[str, bytes]:
    with tarfile.open(pack) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile()}


def text(files: dict[str, bytes], name: str) -> str:
    return files[name].decode() if name in files else ""


def steps(files: dict[str, bytes]) -> list[dict[str, Any]]:
    out = []
    for line in text(files, "steps.txt").splitlines():
        m = re.match(r"(\d+) s: (.*?)(?: rc=(-?\d+))?$", line)
        if m:
            out.append({"at_s": int(m[1]), "step": m[2], "rc": None if m[3] is None else int(m[3])})
    return out


def host(files: dict[str, bytes]) -> dict[str, Any]:
    lines = text(files, "host.txt").splitlines()
    gpu = next((x for x in lines if x.startswith("NVIDIA")), "")
    wheel = next((x for x in lines if x.startswith("wheel: ")), "").split()
    return {"date": lines[0] if lines else None, "gpu": gpu,
            "cpus": next((int(x) for x in lines if x.isdigit()), None),
            "mem_total": next((x.split(":", 1)[1].strip() for x in lines if x.startswith("MemTotal")), None),
            "nvcc": next((x for x in lines if x.startswith("Build cuda")), None),
            "torch_cuda_transformers_xgrammar": next((x for x in lines if re.match(r"\d+\.\d+\.\d+\+cu", x)), None),
            # HEAD.txt as carried to the host (the commit checked out there; the working tree may be newer)
            "head_txt_commit": next((x for x in lines if re.fullmatch(r"[0-9a-f]{40}", x)), None),
            "wheel_path": wheel[1] if len(wheel) > 1 else None, "wheel_sha256": wheel[2] if len(wheel) > 2 else None,
            "serve_env": next((x for x in lines if x.startswith("sglang ")), None)}


def wheel_libraries(verify: dict[str, Any]) -> list[str]:
    """The wheel's shared libraries (verify.json): an op's origin must be one of these to count as the wheel's."""
    return sorted(lib["path"] for lib in verify["libraries"])


def own(origin: str | None, libraries: list[str]) -> bool:
    return bool(origin) and any(origin.endswith(f"/site-packages/{p}") for p in libraries)  # type: ignore[union-attr]


def piecewise(log: str) -> dict[str, Any]:
    sizes = PIECEWISE_SIZES.search(log)
    max_tokens = re.search(r"piecewise_cuda_graph_max_tokens=(\d+)", log)
    return {"begin": "Capture piecewise CUDA graph begin" in log, "end": "Capture piecewise CUDA graph end" in log,
            "largest_captured_tokens": int(sizes[1].split(",")[-1]) if sizes else None,
            "server_args_max_tokens": int(max_tokens[1]) if max_tokens else None,
            "decode_graph_end": "Capture cuda graph end" in log}


def ops_of(serve: dict[str, Any], libraries: list[str]) -> dict[str, Any]:
    ops = serve["ops"]
    origins = ops.get("origins") or {}
    named = {n for phase in PHASES.values() for n in (ops.get(phase) or {}) if n.startswith("sgl_kernel::")}
    wheels = sorted(n for n in named if own(origins.get(n), libraries))
    return {"wheel_ops": wheels,
            "sgl_kernel_named_not_the_wheels": sorted(named - set(wheels)),
            "tool_not_the_wheels": ops.get("sgl_kernel_ops_not_the_wheels") or {},
            "tool_list_agrees": sorted(ops.get("sgl_kernel_ops") or []) == wheels,
            "origin_libraries": sorted({origins[n] for n in wheels}),
            "loaded_library_sha256": ops.get("libraries") or {},
            "processes": ops.get("processes"),
            "per_phase": {label: {n: c for n, c in sorted((ops.get(key) or {}).items()) if n in wheels}
                          for label, key in PHASES.items()}}


def agreement(doc: dict[str, Any]) -> dict[str, Any]:
    close = doc["summary"]["logprobs_close"]
    per = doc["per_prompt"]
    texts = [p["text"] for p in per]
    reasons = Counter(re.sub(r"^step \d+: .*", "step N: a token not in the other's top k", p["logprobs_close"]["reason"])
                      for p in per if not p["logprobs_close"]["passed"])
    gaps = [d["gap"] for d in doc["divergences"] if d.get("gap") is not None]
    first = [p["first_divergence"] for p in per if p["first_divergence"] is not None]
    return {"prompts": len(per), "distinct_prompt_texts": len(set(texts)), "passed": close["passed"],
            "identical": close["identical"], "k": close["k"], "min_pass_fraction": close["min_pass_fraction"],
            "verdict": close["verdict"], "tolerance": close["tolerance"], "failed": len(close["failed_prompts"]),
            "fail_reasons": dict(sorted(reasons.items())),
            "first_divergence_step_counts": {str(k): v for k, v in sorted(Counter(first).items())},
            "sglang_first_token_without_logprob": sum(1 for p in per if p["sglang_logprobs"]
                                                      and p["sglang_logprobs"][0] is None),
            "sglang_first_tokens": {str(k): v for k, v in sorted(Counter(p["sglang_tokens"][0] for p in per
                                                                         if p["sglang_tokens"]).items())},
            "divergence_gaps": {"what": "at each prompt's first divergence: transformers' (bf16 reference) logprob of "
                                        "its own token minus its logprob of sglang's token (token_agreement.py)",
                                "count": len(gaps), "min": round(min(gaps), 4) if gaps else None,
                                "median": round(statistics.median(gaps), 4) if gaps else None,
                                "max": round(max(gaps), 4) if gaps else None,
                                "near_tie": doc["summary"]["divergences_near_tie"],
                                "tie_gap": doc["summary"]["tie_gap"]},
            "prefix_match_fraction": doc["summary"]["prefix_match_fraction"],
            "positional_agreement": doc["summary"]["positional_agreement"],
            "teacher_forced_agreement": doc["summary"]["teacher_forced_agreement"],
            "server_model": doc["setup"]["server_model_info"]["model_path"], "reference": doc["setup"]["model"],
            "_texts": texts}


def check(c: dict[str, Any]) -> dict[str, Any]:
    script = next((Path(w).name for w in c["command"].split() if w.endswith(".py")), c["command"].split()[0])
    return {"script": script, "returncode": c["returncode"], "seconds": c["seconds"],
            "fail_not_close_passed": "--fail-not-close" in c["command"].split(),
            "flags": [w for w in c["command"].split() if w.startswith("--") and w not in ("--model", "--url", "--out")]}


def start(files: dict[str, bytes], name: str, libraries: list[str]) -> dict[str, Any]:
    serve = json.loads(files[f"{name}/serve.json"])
    # A start tried again under its name (fp8 after fp8-moe-cutlass) rewrote the recipe: none kept for the first.
    recipe = tomllib.loads(text(files, f"recipes/{name}.toml")).get("serve", {})
    entry: dict[str, Any] = {"recipe_args": recipe.get("args"), "env": recipe.get("env"), "argv": serve.get("argv"),
                             "added_by_serve": serve.get("added"), "model": serve.get("model")}
    if "error" in serve:  # a start that died, or served and failed a check (--fail-not-close): its agreement kept
        entry["error"] = {k: serve["error"].get(k) for k in ("kind", "exit_code", "message")}
        if f"{name}/agreement.json" in files:
            entry["logprobs_close"] = agreement(json.loads(files[f"{name}/agreement.json"]))
        return entry
    entry.update({
        "seconds_to_healthy": serve["server"]["seconds_to_healthy"],
        "resolved": serve["resolved"]["resolved"], "cuda_graph": serve["resolved"]["cuda_graph"],
        "resolved_failures": serve["resolved"]["failures"],
        "piecewise_cuda_graph": piecewise(text(files, f"{name}/server.log")),
        "smoke_text": serve["server"]["smoke"]["text"],
        "checks": [check(c) for c in serve.get("checks", [])],
        "ops": ops_of(serve, libraries)})
    if f"{name}/agreement.json" in files:
        entry["logprobs_close"] = lc = agreement(json.loads(files[f"{name}/agreement.json"]))
        rc = next((c["returncode"] for c in entry["checks"] if c["script"] == "token_agreement.py"), None)
        # token_agreement.py exits non-zero on a failed verdict only with --fail-not-close
        entry["agreement_check_rc_reflects_verdict"] = (rc == 0) == (lc["verdict"] == "pass")
    return entry


def starts_in(files: dict[str, bytes]) -> list[str]:
    """The starts in the order they ran (steps.txt); a folder the steps do not name last."""
    order = [x["step"] for x in steps(files)]
    return sorted({n.split("/")[0] for n in files if n.endswith("/serve.json")},
                  key=lambda s: (order.index(s) if s in order else len(order), s))


def report(run_pack: Path, try_pack: Path | None) -> dict[str, Any]:
    files = members(run_pack)
    verify = json.loads(files["verify.json"])
    libraries = wheel_libraries(verify)
    h = host(files)
    if h["wheel_sha256"] != verify["sha256"]:
        sys.exit(f"error: host.txt's wheel sha256 {h['wheel_sha256']} is not verify.json's {verify['sha256']}: "
                 "two wheels in one run; rerun evidence_on_gpu_host.sh")
    starts = {s: start(files, s, libraries) for s in starts_in(files)}
    union = sorted({op for s in starts.values() for op in s.get("ops", {}).get("wheel_ops", [])})
    texts = {s: v["logprobs_close"].pop("_texts") for s, v in starts.items() if "logprobs_close" in v}
    first_try = None
    build = None
    if try_pack:
        tfiles = members(try_pack)
        th = host(tfiles)
        if "build.json" in tfiles:
            b = json.loads(tfiles["build.json"])
            p = b["provenance"]
            build = {"from": f"{try_pack.name}: build.json", "recipe": p["recipe"], "version": p["version"],
                     "commit": p["commit"], "patch_series": p["patch_series"], "patches": sorted(p["patches"]),
                     "archs": p["archs"], "toolchain": {k: p["toolchain"][k] for k in ("nvcc_version", "torch", "gcc")},
                     "seconds": next((float(m[1]) for m in re.finditer(r"✓ build .*\(([\d.]+) s\)",
                                                                        text(tfiles, "build.err"))), None)}
        first_try = {"raw": try_pack.name, "host": th, "steps": steps(tfiles),
                     "same_wheel_sha256_as_the_run": th["wheel_sha256"] == h["wheel_sha256"],
                     "starts": {s: start(tfiles, s, libraries) for s in starts_in(tfiles)},
                     "notes": text(tfiles, "notes.txt").splitlines()}
    serve0 = json.loads(files[f"{next(iter(starts))}/serve.json"])
    return {
        "what": __doc__.split("\n\n")[0],
        "raw": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (run_pack, try_pack) if p},
        "host": h,
        "wheel": {"name": verify["wheel"], "sha256": verify["sha256"], "verify_passed": verify["passed"],
                  "verify_checks": verify["checks"], "libraries": libraries,
                  "flash_ops_library": any("flash_ops" in p for p in libraries), "build": build},
        "sglang": serve0["sglang_from"]["describe"], "sglang_commit": serve0["sglang_from"]["commit"],
        "model_config": {k: json.loads(files["config-bf16.json"])[k] for k in
                         ("architectures", "num_hidden_layers", "hidden_size", "head_dim", "num_local_experts",
                          "num_experts_per_tok", "vocab_size", "max_position_embeddings")},
        "checkpoints_sha256": dict(reversed(line.split()) for line in text(files, "checkpoints.sha256").splitlines()),
        "steps": steps(files),
        "notes": text(files, "notes.txt").splitlines(),
        "starts": starts,
        "wheel_ops": {
            "rule": "an sgl_kernel:: op counts when its origin (the library that registered it) is one of the "
                    "wheel's libraries (verify.json); utility ops listed apart",
            "distinct": union, "distinct_count": len(union),
            "utility": sorted(set(union) & UTILITY),
            "non_utility": sorted(set(union) - UTILITY), "non_utility_count": len(set(union) - UTILITY),
            "first_seen_in": {op: next(s for s, v in starts.items() if op in v.get("ops", {}).get("wheel_ops", []))
                              for op in union},
            "named_sgl_kernel_but_not_the_wheels": sorted({op for s in starts.values() for op in
                                                           s.get("ops", {}).get("sgl_kernel_named_not_the_wheels",
                                                                                [])})},
        "not_run": {op: {"why": why, "evidence": evidence(op, files, starts, libraries)} for op, why in NOT_RUN.items()},
        "prompts": {"same_texts_in_every_start": len({tuple(t) for t in texts.values()}) == 1,
                    "distinct": {s: len(set(t)) for s, t in texts.items()}},
        "first_try": first_try,
    }


def evidence(op: str, files: dict[str, bytes], starts: dict[str, Any], libraries: list[str]) -> dict[str, Any]:
    def calls(prefix: str) -> dict[str, dict[str, int]]:
        out = {}
        for s in starts:
            ops = json.loads(files[f"{s}/serve.json"])["ops"]
            names = {n for k in PHASES.values() for n in (ops.get(k) or {}) if n.startswith(prefix)}
            seen = {n: sum((ops.get(k) or {}).get(n, 0) for k in PHASES.values()) for n in names}
            if seen:
                out[s] = dict(sorted(seen.items()))
        return out
    if op.startswith("sgl_kernel::fwd"):
        return {"fa3_probe": (text(files, "fa3-probe.txt").strip().splitlines() or [""])[-1][:300],
                "flash_ops_among_the_wheels_libraries": any("flash_ops" in p for p in libraries),
                "attention_backend": {s: v.get("resolved", {}).get("attention_backend") for s, v in starts.items()},
                "sgl_kernel_fwd_calls": calls("sgl_kernel::fwd")}
    if "rotary" in op:
        return {"rotary_calls": calls("sglang::apply_rope"), "sgl_kernel_rotary_calls": calls("sgl_kernel::rotary"),
                "head_dim": json.loads(files["config-bf16.json"])["head_dim"]}
    return {"flashinfer_sampling_calls": calls("flashinfer.sampling."),
            "sgl_kernel_sampling_calls": calls("sgl_kernel::top_")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="evidence-raw.tar.gz of evidence_on_gpu_host.sh (raw)")
    parser.add_argument("--first-try", type=Path, default=None, help="an earlier try's tarball on the same host")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    result = report(args.run, args.first_try)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    ops = result["wheel_ops"]
    print(f"wheel ops: {ops['distinct_count']} distinct, {ops['non_utility_count']} without utilities")
    for s, v in result["starts"].items():
        lc = v.get("logprobs_close")
        print(f"{s}: healthy in {v.get('seconds_to_healthy')} s" + (
            f"; logprob-close {lc['passed']}/{lc['prompts']} ({lc['distinct_prompt_texts']} distinct): {lc['verdict']}"
            if lc else ""))
    print(args.out)


if __name__ == "__main__":
    main()
