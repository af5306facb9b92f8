"""`sglang.bench_serving` against the running server, one run per concurrency.

The dataset is `random-ids` (random token ids of the given lengths): `random` samples
ShareGPT text and downloads it, which an offline GPU host cannot. The results go to a
JSON file beside the wheel's provenance, so a figure always names the build it measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from build_kernel import atomic, log, process
from build_kernel.errors import ServeError
from build_kernel.recipe import Serve
from build_kernel.stages.serve import api_key as api_key_mod
from build_kernel.stages.serve import launch

KEEP = ("output_throughput", "request_throughput", "input_throughput", "mean_ttft_ms", "median_ttft_ms",
        "p99_ttft_ms", "mean_itl_ms", "mean_e2e_latency_ms", "completed", "duration", "total_output_tokens")


def run(python: str, env: Mapping[str, str], *, host: str, port: int, model: str, serve: Serve, out_dir: Path,
        log_path: Path, api_key: str | None = None) -> list[dict[str, Any]]:
    """`api_key`: bench_serving sends it (it reads OPENAI_API_KEY: its environment, not its command line; hidden
    from the log)."""
    rows: list[dict[str, Any]] = []
    if api_key:
        env = {**env, api_key_mod.CLIENT_VAR: api_key}
    out_dir.mkdir(parents=True, exist_ok=True)
    for concurrency in serve.bench_concurrency:
        raw = out_dir / f"bench-c{concurrency}.jsonl"
        raw.unlink(missing_ok=True)
        prompts = max(serve.bench_prompts, concurrency)
        cmd: list[str | Path] = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--host",
               launch.reachable(host), "--port", str(port), "--model", model,
               "--tokenizer", model, "--dataset-name", "random-ids", "--random-input-len", str(serve.bench_input_len),
               "--random-output-len", str(serve.bench_output_len), "--random-range-ratio", "1.0",
               "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--output-file", raw]
        with log.step(f"bench_serving at concurrency {concurrency} ({prompts} prompts)"):
            process.run(cmd, error=ServeError, what=f"sglang.bench_serving at concurrency {concurrency}", env=env,
                        log=log_path, timeout=3600, fix=f"see {log_path}", secrets=(api_key,) if api_key else ())
        lines = [ln for ln in raw.read_text().splitlines() if ln.strip()] if raw.is_file() else []
        if not lines:
            raise ServeError(f"sglang.bench_serving wrote no results to {raw}", hint=f"see {log_path}")
        data = json.loads(lines[-1])
        rows.append({"concurrency": concurrency, **{k: data.get(k) for k in KEEP}})
        log.info(f"C={concurrency}: {data.get('output_throughput', 0):.1f} output tokens/s, "
                 f"mean TTFT {data.get('mean_ttft_ms', 0):.1f} ms")
    return rows


def write(path: Path, rows: list[dict[str, Any]], *, provenance: dict[str, Any], launched: dict[str, Any],
          argv: list[str], resolved: dict[str, Any] | None = None, ops: dict[str, Any] | None = None) -> None:
    """The bench rows beside what ran them: the server's resolved backends and the ops it called (ops.py)."""
    atomic.write_text(path, json.dumps({"provenance": provenance, "server": launched, "argv": argv, "bench": rows,
                                        "resolved": resolved, "ops": ops}, indent=2, default=str))
