"""The model served with the wheel the tool built, on the H200 (issue 23 item 4), from the raw outputs.

The device calls' tarballs: the build (`<label>-raw.tar.gz`: the tool's build JSON and stderr,
`.ninja_log`, the profile rows, the memory sample, the verify JSON) and each serve run
(`build-kernel verify` / `serve --dry-run` / `serve --launch` / `serve --bench` outputs,
token_agreement.py's reports against transformers in bf16 and, where run, float32, the tiny
model's training record, the host line and each step's time). Nothing is typed by hand.

    python bench/serving/llama_serve_report.py BUILD-raw.tar.gz SERVE-raw.tar.gz [SERVE2-raw.tar.gz ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import ROOT, member, run_figures


def _json(tar: tarfile.TarFile, suffix: str) -> Any:
    raw = member(tar, suffix)
    if not raw:
        return None
    text = raw.decode(errors="replace")
    # verify's --json sits between its progress lines and the script's own when they share a stream.
    start, end = text.find("{"), text.rfind("}")
    try:
        return json.loads(text[start:end + 1]) if 0 <= start < end else None
    except json.JSONDecodeError:
        return None


def _text(tar: tarfile.TarFile, suffix: str) -> str:
    return (member(tar, suffix) or b"").decode(errors="replace")


AGREEMENT_KEYS = ("prompts", "max_new_tokens", "total_tokens", "prefix_match_fraction", "positional_agreement",
                  "teacher_forced_agreement", "prompts_identical", "divergences", "divergences_near_tie", "max_gap",
                  "median_gap", "hf_min_margin", "hf_steps_near_tie", "logprob_max_abs_diff_on_agreeing_prefix")


def _agreement(report: Any) -> dict[str, Any] | None:
    if not report:
        return None
    summary = report.get("summary", report)
    out = {k: summary.get(k) for k in AGREEMENT_KEYS}
    out["first_divergences"] = [{k: d.get(k) for k in ("prompt", "position", "hf_token", "sglang_token", "gap")}
                                for d in report.get("divergences", [])]
    return out


def serve_run(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        verify = _json(tar, "verify.json") or {}
        dry = _json(tar, "dry-run.json") or {}
        launch = _json(tar, "launch.json") or {}
        bench = _json(tar, "bench.json") or {}
        agreement = {"bf16": _agreement(_json(tar, "agreement.json")),
                     "fp32_reference": _agreement(_json(tar, "agreement-fp32.json"))}
        training = _json(tar, "training.json") or {}
        host = _text(tar, "host.txt").splitlines()
        steps = _text(tar, "steps.txt").splitlines()
        launch_err = _text(tar, "launch.err")
    rows = {row["concurrency"]: row for row in bench.get("bench", [])}
    healthy = re.search(r"healthy after ([\d.]+) s", launch_err)
    # `--launch` serves until stopped (its JSON is never written then): its stderr has the audit line.
    said = re.search(r"^sglang resolved (.*)$", launch_err, re.M)
    audit = bench.get("resolved") or launch.get("resolved") or ({"said": said.group(1)} if said else None)
    return {
        "raw": path.name, "host": host, "steps": steps,
        "verify_passed": verify.get("passed"), "imports": verify.get("imports"),
        "sglang": dry.get("sglang"), "sglang_from": dry.get("sglang_from"), "asked": dry.get("asked"),
        "serve_argv": dry.get("argv"), "preflight_notes": (dry.get("preflight") or {}).get("notes"),
        "time_to_healthy_s": (bench.get("server") or {}).get("seconds_to_healthy")
                             or (float(healthy.group(1)) if healthy else None),
        "smoke": (bench.get("server") or {}).get("smoke"),
        "resolved": audit,
        "training": training,
        "agreement": {k: v for k, v in agreement.items() if v},
        "bench": {f"C={c}": {k: r.get(k) for k in ("output_throughput", "mean_ttft_ms", "median_ttft_ms",
                                                   "p99_ttft_ms", "completed")} for c, r in sorted(rows.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", type=Path, help="the build call's <label>-raw.tar.gz")
    parser.add_argument("serve", type=Path, nargs="+", help="serve runs' <label>-raw.tar.gz, in order")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "serving" / "results" / "llama-serve.json")
    args = parser.parse_args()
    build = run_figures(args.build)
    with tarfile.open(args.build) as tar:
        built = _json(tar, "-build.json") or {}
        build_verify = _json(tar, "-after.txt") or {}
    prov = built.get("provenance", {})
    runs = {p.name.split("-raw")[0]: serve_run(p) for p in args.serve}
    result = {
        "what": __doc__.split("\n\n")[0],
        "recipe": prov.get("recipe"), "commit": prov.get("commit"), "archs": prov.get("archs"),
        "patch_series": prov.get("patch_series"), "wheel": Path(built.get("wheel", "")).name or None,
        "build": {k: build[k] for k in ("ninja_wall_s", "compiler_cpu_s", "peak_gb", "oom_kills", "lower_bound_s",
                                        "ratio_to_lower_bound", "tool_build_step_s", "cores")},
        "verify_in_build_call": build_verify.get("passed"),
        "serve_runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for label, r in runs.items():
        print(label, json.dumps({k: r[k] for k in ("sglang", "time_to_healthy_s", "bench")}),
              {k: (v["prefix_match_fraction"], v["prompts_identical"], v["max_gap"]) for k, v in r["agreement"].items()})


if __name__ == "__main__":
    main()
