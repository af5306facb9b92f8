"""The tiny MoE served on the GPU host (H200 or H100: `host` names it) from the tool's wheel (issue 41), from the raw tarball of bench/serving/moe_serve_on_gpu_host.sh (`--bench`, or `SMOKE_ONLY=1`: `--launch --smoke-only`, no bench figures).

Per variant (bf16, block FP8): the server's resolved backends, the sgl_kernel ops it called for the requests
and those captured in CUDA graphs (the op report of `serve`), each of the issue's kernel families found or
not among them, the 64-prompt logprob-close verdicts against transformers on the bf16 weights with the
exact-id figure beside them, and C=1 / C=32 throughput. Plus the checkpoint's training record, the host,
each step's time and the notes (any backend asked for, and why). Nothing is typed by hand.

    python bench/serving/moe_serve_report.py moe-serve-raw.tar.gz [--out FILE] \
        [--throughput-pair moe-serve-raw-ours.tar.gz moe-serve-raw-reference.tar.gz] \
        [--run i54-raw.tar.gz] [--bisect moe-serve-raw-pcg-flashinfer.tar.gz]

--run (issue 54, bench/gpu_host/serve_probe_bisect.sh): the wheel that served (sha256, build and verify figures), the serve
environment's imports and bench/serving/cublas_capture_probe.py's rows. --bisect: the same bf16 start with another
attention backend and piecewise CUDA graphs left on, with no retry: whether that start lived. A start that died
and was retried (bench-first.err) is kept per variant with the server log's CUDA/cuBLAS lines.

The pair (issue 41 item 5): the same model and server, one attention backend for both (ATTENTION=flashinfer,
CHECKS=0, TAG=...), on this wheel and on another build of the same commit (the unpruned reference): output
tokens/s per concurrency and their ratio, ours over the reference.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from llama_serve_report import _json, _text
from raw_pack import ROOT

# The kernel families, matched on the counted names (sgl_kernel ops; flashinfer and deep_gemm entries).
FAMILIES = {
    "moe_routing": r"topk_softmax|topk_sigmoid|moe_fused_gate|fused_topk",
    "moe_alignment": r"moe_align_block_size",
    "fp8_gemm": r"fp8_blockwise_scaled_mm|fp8_scaled_mm|per_token_group_quant|deep_gemm\.|fp8_gemm",
    "rmsnorm": r"rmsnorm",
    "rotary": r"rope|rotary",
    "activation": r"silu_and_mul|gelu_and_mul",
    "sampling": r"sampling|renorm|min_p|top_k_mask",
    # FA3's op is sgl_kernel's flash_ops `fwd`: `sgl_kernel::fwd` exactly (an overload suffix allowed), never a
    # name that merely starts so (sglang's own wrapper `fwd_...` is no call of the wheel's FA3).
    "attention": r"prefill|decode|attention|merge_state|flash_attn|::fwd(?:\.\w+)?$",
}
# Issue 70: the wheel's own ops are torch ops of exactly the sgl_kernel namespace whose registering library is the
# wheel's (the op report's `origins`, recorded by the hook since then); a run whose hook recorded no origins can
# name that namespace's ops, but not prove they were the wheel's.
OWN_RULE = ("namespace exactly sgl_kernel:: and registered by a library of the served wheel (the hook's origins: "
            "the file whose load registered the op)")


# The packages of the served wheel that hold kernels, where the run kept no listing of the wheel (wheel-files.txt,
# whose top-level folders are used instead): sgl-kernel's build installs DeepGEMM's deep_gemm beside sgl_kernel.
WHEEL_PACKAGES = {"sgl_kernel", "deep_gemm"}


# Which library a counted name belongs to: its namespace (torch ops) or its module (Python entries).
def library(name: str) -> str:
    return re.split(r"::|\.", name, maxsplit=1)[0]


def by_library(ops: dict[str, Any], wheel_packages: set[str]) -> dict[str, Any]:
    """The distinct names called for the requests or captured in graphs, grouped by library; those of a package the
    served wheel ships (sgl_kernel, and deep_gemm, which sgl-kernel's build installs beside it) counted apart."""
    names = sorted(set(ops.get("eager_during_requests") or {}) | set(ops.get("graph_captured") or {}))
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(library(name), []).append(name)
    # deep_gemm's Python entry and its torch op are one kernel counted twice: the wheel's figure counts kernels.
    from_wheel = sorted({n.replace("::", ".") for n in names if library(n) in wheel_packages})
    return {"libraries": groups, "from_the_wheel_packages": from_wheel, "distinct_from_the_wheel_packages":
            len(from_wheel), "distinct_all": len({n.replace("::", ".") for n in names})}


def wheel_ops(ops: dict[str, Any]) -> dict[str, Any]:
    """The wheel's own ops by OWN_RULE, and the sgl_kernel namespace's names (what a name alone can say)."""
    names = sorted({n.split(".")[0] for n in (*(ops.get("eager_during_requests") or {}),
                                               *(ops.get("graph_captured") or {})) if n.startswith("sgl_kernel::")})
    recorded = "origins" in ops
    own = sorted(ops.get("sgl_kernel_ops") or []) if recorded else []
    return {"rule": OWN_RULE, "origins_recorded": recorded, "ops": own, "distinct": len(own),
            "families": {f: sorted(n for n in own if re.search(p, n)) for f, p in FAMILIES.items()},
            "sgl_kernel_namespace_by_name": names,
            "not_the_wheels": ops.get("sgl_kernel_ops_not_the_wheels") or {},
            "origins": {op: (ops.get("origins") or {}).get(op) for op in names} if recorded else None}


# sglang's log line for the token counts it captures in piecewise CUDA graphs, and the lines of a start that died.
PIECEWISE_SIZES = re.compile(r"Capture piecewise CUDA graph begin.*?\n.*?Capture cuda graph num tokens \[([0-9, ]+)\]",
                              re.DOTALL)
_DIED = re.compile(r"CUDA error|CUBLAS_STATUS|Piecewise CUDA Graph failed")


def _context(tar: tarfile.TarFile) -> int | None:
    """The served model's own context (config-bf16.json's max_position_embeddings)."""
    return (_json(tar, "config-bf16.json") or {}).get("max_position_embeddings")


def piecewise_starts(log: str, context_default: int | None) -> list[dict[str, Any]]:
    """Per server start of a serve log (each begins with the serve's `$ <argv>` line of sglang.launch_server; the
    checks' own `$` lines fall inside the start they ran against): its context length (--context-length, else the
    model's max_position_embeddings), the largest token count sglang captured in a piecewise CUDA graph, whether
    that is past the context, and the first CUDA error line if the start died."""
    out = []
    for segment in re.split(r"^(?=\$ .*launch_server)", log, flags=re.MULTILINE):
        if not segment.startswith("$ "):
            continue
        argv = segment.splitlines()[0][2:].split("  #")[0].split()
        ctx = next((int(argv[j + 1]) for j, a in enumerate(argv[:-1]) if a == "--context-length"), context_default)
        sizes = PIECEWISE_SIZES.search(segment)
        largest = int(sizes.group(1).split(",")[-1]) if sizes else None
        died = next((ln.strip()[:300] for ln in segment.splitlines() if _DIED.search(ln)), None)
        out.append({"argv": argv, "context_length": ctx, "largest_piecewise_tokens": largest,
                    "past_the_context": largest > ctx if largest and ctx else None,
                    "piecewise": "--disable-piecewise-cuda-graph" not in argv, "cuda_error": died})
    return out


def families(ops: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Per family: the counted names that match it, called for the requests and captured in graphs."""
    out: dict[str, dict[str, list[str]]] = {}
    for family, pattern in FAMILIES.items():
        out[family] = {kind: sorted(n for n in ops.get(key, {}) if re.search(pattern, n))
                       for kind, key in (("requests", "eager_during_requests"), ("graph", "graph_captured"))}
    return out


def _agreement(report: Any) -> dict[str, Any] | None:
    if not report:
        return None
    s = report["summary"]
    close = s.get("logprobs_close") or {}
    diverged = [p["logprobs_close"] for p in report.get("per_prompt", []) if p["logprobs_close"].get("tokens")]
    return {
        "logprobs_close": close,
        "exact_id_prompts": s.get("prompts_identical"), "prompts": s.get("prompts"),
        "max_new_tokens": s.get("max_new_tokens"), "prefix_match_fraction": s.get("prefix_match_fraction"),
        "logprob_max_abs_diff_on_agreeing_prefix": s.get("logprob_max_abs_diff_on_agreeing_prefix"),
        "hf_min_margin": s.get("hf_min_margin"),
        "first_divergences": [{k: d.get(k) for k in ("prompt", "first_divergence", "tokens", "passed",
                                                     "a_token_rank_in_b", "b_token_rank_in_a", "reason")}
                              for d in diverged],
    }


def _error_line(err: str) -> str | None:
    return next((ln for ln in reversed(err.splitlines()) if ln.startswith("error: ")), None)


# The server log's lines that say what failed in a start (the CUDA-graph failure of issue 54).
_FAILURE = re.compile(r"CUBLAS_STATUS|CUDA error|cudaError|RuntimeError|AssertionError|Capture .*cuda graph|"
                      r"piecewise|Exception|Error:|Traceback", re.IGNORECASE)


def failure_lines(log: str, limit: int = 40) -> list[str]:
    """The distinct lines of a server log that name an error or the CUDA-graph capture (first `limit`)."""
    seen: list[str] = []
    for line in log.splitlines():
        line = line.strip()
        if _FAILURE.search(line) and line not in seen:
            seen.append(line[:400])
    return seen[:limit]


def variant(tar: tarfile.TarFile, name: str, wheel_packages: set[str] = WHEEL_PACKAGES) -> dict[str, Any] | None:
    result = _json(tar, f"{name}/bench.json")
    err = _text(tar, f"{name}/bench.err")
    if result is None and not err:
        return None
    result = result or {}
    ops = result.get("ops") or {}
    server = result.get("server") or {}
    rows = {row["concurrency"]: row for row in result.get("bench", [])}
    error = _error_line(err)
    first = _text(tar, f"{name}/bench-first.err")
    found = families(ops)
    return {
        "error": error,
        "first_start": {"error": _error_line(first), "hint": next((ln.strip() for ln in first.splitlines()
                                                                    if ln.strip().startswith("hint")), None)}
        if first else None,
        "argv": result.get("argv"), "sglang": result.get("sglang"), "resolved": result.get("resolved"),
        "time_to_healthy_s": server.get("seconds_to_healthy"), "smoke": server.get("smoke"),
        "ops": {k: ops.get(k) for k in ("sgl_kernel_ops", "eager_during_requests", "graph_captured", "processes")},
        "families": found,
        "by_library": by_library(ops, wheel_packages),
        "wheel_ops": wheel_ops(ops),
        "families_missing": sorted(f for f, seen in found.items() if not (seen["requests"] or seen["graph"])),
        "agreement": _agreement(_json(tar, f"{name}/agreement.json")),
        "checks": [{k: c.get(k) for k in ("command", "returncode", "seconds")} for c in result.get("checks", [])],
        "bench": {f"C={c}": {k: r.get(k) for k in ("output_throughput", "request_throughput", "mean_ttft_ms",
                                                   "median_ttft_ms", "mean_itl_ms", "completed")}
                  for c, r in sorted(rows.items())},
    }


# How far the same wheel's two runs may differ before the first is taken for a cold start, not a measurement.
DRIFT_LIMIT = 0.10


def throughput_pair(ours: Path, reference: Path, ours_again: Path | None = None) -> dict[str, Any]:
    """bf16 output tokens/s per concurrency of runs of the same model and server, and ours / reference. With a
    third run (ours again, after the reference), the order's drift is measured, and the ratio is the mean of
    ours's two runs over the reference."""
    runs = {}
    given = (("ours", ours), ("reference", reference), *((("ours_again", ours_again),) if ours_again else ()))
    for label, path in given:
        with tarfile.open(path) as tar:
            run = variant(tar, "bf16") or {}
            host = _text(tar, "host.txt").splitlines()
            runs[label] = {"raw": path.name, "gpu": host[1] if len(host) > 1 else None,
                           "wheel": next((ln.removeprefix("wheel: ") for ln in host if ln.startswith("wheel: ")), None),
                           "error": run.get("error"), "attention": (run.get("resolved") or {}).get("resolved", {})
                           .get("attention_backend"), "bench": run.get("bench") or {}}

    def tokens(label: str, c: str) -> float | None:
        return (runs.get(label, {}).get("bench", {}).get(c) or {}).get("output_throughput")

    def ratios(num: str, den: str) -> dict[str, float]:
        return {c: round(a / b, 3) for c in runs[num]["bench"] if (a := tokens(num, c)) and (b := tokens(den, c))}

    result = {**runs, "ratio_ours_over_reference": ratios("ours", "reference")}
    if ours_again:
        result["ratio_ours_again_over_reference"] = ratios("ours_again", "reference")
        result["drift_ours_again_over_ours"] = ratios("ours_again", "ours")
        result["ratio_ours_mean_over_reference"] = {
            c: round((a + b) / 2 / r, 3) for c in runs["ours"]["bench"]
            if (a := tokens("ours", c)) and (b := tokens("ours_again", c)) and (r := tokens("reference", c))}
        # The ratio to read: the mean of ours's two runs where the order barely moved them; where it did, the first
        # run paid a one-time cost (the first server start fills flashinfer's JIT cache, so some of its requests
        # wait on compiles: its mean TTFT is then far above its median), and only the two warm runs compare.
        result["ratio"] = {}
        for c, drift in result["drift_ours_again_over_ours"].items():
            first = runs["ours"]["bench"].get(c) or {}
            cold = abs(drift - 1) > DRIFT_LIMIT
            result["ratio"][c] = {
                "ours_over_reference": (result["ratio_ours_again_over_reference"] if cold
                                        else result["ratio_ours_mean_over_reference"]).get(c),
                "basis": (f"ours again / reference: the first run is {drift:.2f}x off the same wheel's second "
                          f"(drift beyond {DRIFT_LIMIT:.0%}{_ttft(first)})") if cold
                else f"mean of ours's two runs / reference (drift {drift:.3f}, within {DRIFT_LIMIT:.0%})"}
    return result


def _ttft(run: dict[str, Any]) -> str:
    """A run's mean against median TTFT, where it has both: a mean far above the median is a few slow requests."""
    mean, median = run.get("mean_ttft_ms"), run.get("median_ttft_ms")
    return f"; its mean TTFT {mean:.0f} ms against a median of {median:.0f} ms" if mean and median else ""


def upstream_wheel(doctor: Path, sha256: Path | None) -> dict[str, Any]:
    """Whether upstream's own wheel of the same release loads on the host's torch, from `build-kernel doctor
    --installed --json` run on it beside that torch (and its `sha256sum; ls -l` line)."""
    record = json.loads(doctor.read_text())
    line = sha256.read_text().split() if sha256 else []
    origin = record.get("origin") or {}
    return {"raw": doctor.name, "distribution": f"{origin.get('distribution')} {origin.get('version')}",
            "from": origin.get("detail"), "torch": (record.get("torch") or {}).get("version"),
            "sha256": line[0] if line else None,
            "bytes": int(line[6]) if len(line) > 6 and line[6].isdigit() else None,
            "cuda_linked": record.get("cuda_linked"), "built_for": record.get("built_for"),
            "problems": [p.get("text") for p in record.get("problems") or []],
            "healthy": record.get("healthy"), "verdict": record.get("verdict")}


def wheel_top_levels(tar: tarfile.TarFile) -> set[str]:
    """The served wheel's top-level folders, from the run's listing of it (empty where it kept none)."""
    return {ln.split("/")[0] for ln in _text(tar, "./wheel-files.txt").split() if "/" in ln and ".dist-info/" not in ln}


def run_record(path: Path) -> dict[str, Any]:
    """bench/gpu_host/serve_probe_bisect.sh's own tarball: the wheel, its build and verify, the imports, the cuBLAS probe;
    or bench/gpu_host/nightly_build_test_serve.sh's (i55-raw: a wheel built elsewhere, so only its `sha256sum; ls -l` line)."""
    with tarfile.open(path) as tar:
        build = _json(tar, "./build.json") or {}
        verify = _json(tar, "./verify.json") or {}
        sha = (_text(tar, "./wheel.sha256") or _text(tar, "./wheel43.sha256")).split()
        probe = [json.loads(ln) for name in ("probe-torch.jsonl", "probe.jsonl")
                 for ln in _text(tar, f"./{name}").splitlines() if ln.startswith("{")]
        cut = _text(tar, "at-deadline/bf16/bench.err") or _text(tar, "at-deadline/server.log")
        prov = build.get("provenance") or {}
        return {
            "raw": path.name,
            "host": _text(tar, "./host.txt").splitlines(),
            "steps": _text(tar, "./steps.txt").splitlines(),
            "wheel": {"file": Path(build.get("wheel") or (sha[1] if len(sha) > 1 else "")).name or None, "sha256": sha[0] if sha else None,
                      "bytes": int(sha[6]) if len(sha) > 6 and sha[6].isdigit() else None},
            "build": {"recipe": prov.get("recipe"), "patch_series": prov.get("patch_series"),
                      "archs": prov.get("archs"), "commit": prov.get("commit"), "seconds": prov.get("seconds"),
                      "cpu_seconds": prov.get("cpu_seconds"), "jobs": build.get("jobs"),
                      "oom_kills": build.get("oom_kills"),
                      "fa3": {k: v for k, v in (prov.get("defines") or {}).items() if k.startswith("SGL_KERNEL_FA3")},
                      "error": _error_line(_text(tar, "./build.err"))},
            "verify": {"passed": verify.get("passed"), "error": _error_line(_text(tar, "./verify.err"))},
            "wheel_top_levels": sorted(wheel_top_levels(tar)) or None,
            "imports": _text(tar, "./imports.txt").strip().splitlines()[-3:],
            "cublas_capture_probe": probe,
            # A serve cut by the run's DEADLINE_S: what its start had said by then.
            "at_deadline": {"bench_err_tail": _text(tar, "at-deadline/bf16/bench.err").splitlines()[-5:],
                            "server_log_failures": failure_lines(_text(tar, "at-deadline/server.log"))}
            if cut else None,
        }


def bisect_record(path: Path) -> dict[str, Any]:
    """The bisect start: what it asked for (notes), whether it lived, its failure lines."""
    with tarfile.open(path) as tar:
        run = variant(tar, "bf16") or {}
        return {"raw": path.name, "starts": piecewise_starts(_text(tar, "server.log"), _context(tar)),
                "notes": _text(tar, "notes.txt").splitlines(),
                "steps": _text(tar, "steps.txt").splitlines(), "error": run.get("error"),
                "resolved": run.get("resolved"), "bench": run.get("bench"),
                "server_log_failures": failure_lines(_text(tar, "server.log"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path, help="moe-serve-raw.tar.gz from bench/serving/moe_serve_on_gpu_host.sh")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "serving" / "results" / "moe-serve.json")
    parser.add_argument("--throughput-pair", type=Path, nargs="+", metavar="RAW",
                        help="OURS REFERENCE [OURS_AGAIN]: the pair's tarballs, in the order they ran")
    parser.add_argument("--upstream-wheel", type=Path, nargs="+", metavar="FILE",
                        help="DOCTOR_JSON [SHA256]: `doctor --installed --json` on upstream's wheel beside the host's torch")
    parser.add_argument("--run", type=Path, help="i54-raw.tar.gz of bench/gpu_host/serve_probe_bisect.sh")
    parser.add_argument("--bisect", type=Path, help="the bisect start's tarball (piecewise on, another attention)")
    args = parser.parse_args()
    packages = WHEEL_PACKAGES
    if args.run:
        with tarfile.open(args.run) as tar:
            packages = wheel_top_levels(tar) or WHEEL_PACKAGES
    with tarfile.open(args.raw) as tar:
        training = _json(tar, "training.json") or {}
        runs = {name: v for name in ("bf16", "fp8") if (v := variant(tar, name, packages)) is not None}
        dry = _json(tar, "dry-run.json") or {}
        result = {
            "what": __doc__.split("\n\n")[0],
            "raw": args.raw.name,
            "host": _text(tar, "host.txt").splitlines(),
            "steps": _text(tar, "steps.txt").splitlines(),
            "notes": _text(tar, "notes.txt").splitlines(),
            "sglang": dry.get("sglang"), "sglang_from": dry.get("sglang_from"), "serve_argv": dry.get("argv"),
            "model": {"config": _json(tar, "config-bf16.json"),
                      "fp8_quantization_config": (_json(tar, "config-fp8.json") or {}).get("quantization_config"),
                      "training": {k: v for k, v in training.items() if k != "tokens_per_expert_per_layer"},
                      "tokens_per_expert_per_layer": training.get("tokens_per_expert_per_layer")},
            "variants": runs,
            "server_log_failures": failure_lines(_text(tar, "server.log")),
            "starts": piecewise_starts(_text(tar, "server.log"), _context(tar)),
        }
    if args.throughput_pair:
        if len(args.throughput_pair) not in (2, 3):
            parser.error("--throughput-pair takes OURS REFERENCE [OURS_AGAIN]")
        result["throughput_pair"] = throughput_pair(*args.throughput_pair)
    if args.upstream_wheel:
        result["upstream_wheel"] = upstream_wheel(*args.upstream_wheel[:2])
    if args.run:
        result["run"] = run_record(args.run)
    if args.bisect:
        result["bisect"] = bisect_record(args.bisect)
    # Issue 54's question: which starts died in a piecewise CUDA graph, and what they had in common.
    starts = result["starts"] + (result.get("bisect") or {}).get("starts", [])
    result["piecewise_cuda_graph"] = {
        "starts": [{k: s[k] for k in ("context_length", "largest_piecewise_tokens", "past_the_context", "piecewise",
                                      "cuda_error")} for s in starts],
        "died_only_past_the_context": bool(starts) and all(
            (s["cuda_error"] is not None) == bool(s["piecewise"] and s["past_the_context"]) for s in starts),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, r in runs.items():
        close = (r["agreement"] or {}).get("logprobs_close") or {}
        own = r["wheel_ops"]
        print(name, r["error"] or "", f"{own['distinct']} ops of the wheel (origins recorded: {own['origins_recorded']}),",
              f"{len(own['sgl_kernel_namespace_by_name'])} sgl_kernel:: names;",
              f"missing families: {r['families_missing']};",
              f"{r['by_library']['distinct_from_the_wheel_packages']} distinct from the wheel's packages by name,",
              f"{r['by_library']['distinct_all']} in all;",
              f"logprobs close {close.get('passed')}/{close.get('prompts')} ({close.get('verdict')}),",
              f"exact {(r['agreement'] or {}).get('exact_id_prompts')};",
              {c: row["output_throughput"] for c, row in r["bench"].items()})
    print(args.out)


if __name__ == "__main__":
    main()
