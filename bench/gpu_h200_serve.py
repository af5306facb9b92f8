"""The model served with the wheel the tool built, on the H200 (issue 23 item 4), from the raw outputs.

Two device calls' tarballs: the build (`<label>-raw.tar.gz` of .h200's run.sh: the tool's build
JSON and stderr, `.ninja_log`, the profile rows, the memory sample, the verify JSON) and the
serve run (`serve9-raw.tar.gz`: `build-kernel verify` / `serve --dry-run` / `serve --launch` /
`serve --bench` JSON outputs, token_agreement.py's report, the tiny model's training record,
the host line and each step's time). Nothing in the result is typed by hand.

    python bench/gpu_h200_serve.py BUILD-raw.tar.gz SERVE-raw.tar.gz [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200_arch_pruning import ROOT, member, run_figures


def _json(tar: tarfile.TarFile, suffix: str) -> Any:
    raw = member(tar, suffix)
    if not raw:
        return None
    text = raw.decode(errors="replace")
    start = text.find("{")  # verify's --json follows its progress lines when they share a stream
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None


def _text(tar: tarfile.TarFile, suffix: str) -> str:
    return (member(tar, suffix) or b"").decode(errors="replace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", type=Path)
    parser.add_argument("serve", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_h200_serve.json")
    args = parser.parse_args()
    build = run_figures(args.build)
    with tarfile.open(args.build) as tar:
        built = _json(tar, "-build.json") or {}
        build_verify = _json(tar, "-after.txt") or {}
    with tarfile.open(args.serve) as tar:
        verify = _json(tar, "/verify.json") or _json(tar, "verify.json") or {}
        dry = _json(tar, "dry-run.json") or {}
        launch = _json(tar, "launch.json") or {}
        bench = _json(tar, "bench.json") or {}
        agreement = _json(tar, "agreement.json") or {}
        training = _json(tar, "training.json") or {}
        host = _text(tar, "host.txt").splitlines()
        steps = _text(tar, "steps.txt").splitlines()
        errors = {name: _text(tar, f"{name}.err").strip().splitlines()[-3:] for name in ("dry-run", "launch", "bench")}
    prov = built.get("provenance", {})
    summary = agreement.get("summary", agreement)
    rows = {row["concurrency"]: row for row in bench.get("bench", [])}
    server = bench.get("server") or launch.get("server") or {}
    result = {
        "what": __doc__.split("\n\n")[0],
        "host": host,
        "recipe": prov.get("recipe"), "commit": prov.get("commit"), "archs": prov.get("archs"),
        "patch_series": prov.get("patch_series"),
        "wheel": built.get("wheel", "").rsplit("/", 1)[-1] or None,
        "build": {k: build[k] for k in ("ninja_wall_s", "compiler_cpu_s", "peak_gb", "oom_kills", "lower_bound_s",
                                        "ratio_to_lower_bound", "tool_build_step_s")},
        "verify_on_gpu_host": {"build_call": build_verify.get("passed"), "serve_call": verify.get("passed"),
                               "imports": verify.get("imports"), "failures": verify.get("failures")},
        "sglang": dry.get("sglang") or launch.get("sglang"),
        "sglang_source": (dry.get("sglang_choice") or launch.get("sglang_choice")
                          or (dry.get("preflight") or {}).get("sglang_choice")),
        "serve_argv": dry.get("argv"),
        "time_to_healthy_s": server.get("seconds_to_healthy"),
        "smoke": server.get("smoke"),
        "resolved_backends": launch.get("resolved") or bench.get("resolved") or launch.get("audit"),
        "model": {"training": training},
        "agreement": {k: summary.get(k) for k in ("prompts", "max_new_tokens", "total_tokens", "prefix_match_fraction",
                                                   "positional_agreement", "prompts_identical", "divergences",
                                                   "max_gap", "hf_min_margin", "divergences_beyond_tie")},
        "bench": {f"C={c}": {k: r.get(k) for k in ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "completed")}
                  for c, r in sorted(rows.items())},
        "steps": steps,
        "errors": {k: v for k, v in errors.items() if v},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("wheel", "sglang", "time_to_healthy_s", "agreement", "bench")}, indent=1))


if __name__ == "__main__":
    main()
