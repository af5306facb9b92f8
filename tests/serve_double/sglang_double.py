"""A TEST DOUBLE of `python -m sglang.launch_server`: no GPU here can run sglang.

It speaks the endpoints build-kernel uses, as sglang does: `/health` (200 once up),
`/health_generate` (503 while "loading", then 200), `/generate` (JSON, or server-sent
events with `stream: true`, cumulative text and `meta_info.completion_tokens`, then
`data: [DONE]`), and 200 `{}` for anything else bench_serving asks. Like sglang it runs
child processes (a "scheduler"), so a stop must reach the whole process group.

With `--api-key KEY` it refuses, as sglang's auth middleware does (sglang/srt/utils/auth.py), every
request but `/health*` and `/metrics` without `Authorization: Bearer KEY`: 401 `{"error": "Unauthorized"}`.

Like sglang it logs its resolved arguments (`server_args=ServerArgs(...)`, the audited fields
and, as sglang's dataclass repr does, `api_key`) and `Capture cuda graph begin/end` unless --disable-cuda-graph; DOUBLE_RESOLVE
(`dest=value,...`) makes it resolve a field otherwise than asked (a silent fallback).

Serving a mixture-of-experts checkpoint (a config.json with `num_local_experts`), its scheduler is a
Python process started as sglang starts its own (multiprocessing, spawn) that defines ops in the
`sgl_kernel` namespace (torch.library, CPU stand-ins named as the wheel's) and calls them for real: the
decode step's while "capturing a CUDA graph" at start-up (torch.cuda's capture predicate made true
there, as on a GPU during capture), the prefill's once per /generate and per /health_generate, as
sglang's health check runs one token. So the op-count hook `serve` puts into the server counts real
calls in a real spawned process; only the GPU is stood in for.

Knobs (environment): DOUBLE_READY_AFTER_S, DOUBLE_EXIT_AFTER_S + DOUBLE_EXIT_CODE (+ DOUBLE_EXIT_LOG: its lines) (die
early), DOUBLE_PIDS (file: our pid and the child's), DOUBLE_ARGV (file: the argv we got).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

START = time.monotonic()
READY_AFTER = float(os.environ.get("DOUBLE_READY_AFTER_S", "0"))
# What sglang's Mixtral with block-FP8 weights calls per step (sgl_kernel's names); decode's is captured.
PREFILL_OPS = ("rmsnorm", "fused_add_rmsnorm", "apply_rope_pos_ids_cos_sin_cache", "sgl_per_token_group_quant_8bit",
               "fp8_blockwise_scaled_mm", "topk_softmax", "moe_align_block_size", "silu_and_mul")
DECODE_OPS = ("rmsnorm", "fused_add_rmsnorm", "apply_rope_pos_ids_cos_sin_cache", "topk_softmax",
              "moe_align_block_size", "fp8_blockwise_scaled_mm")
STEPS: multiprocessing.Queue[str | None] | None = None  # to the MoE scheduler: one prefill per message
AUTH: dict[str, str] = {}  # "key": --api-key; every request but /health* and /metrics then needs `Authorization: Bearer KEY`


def scheduler(steps: multiprocessing.Queue[str | None], ready: Any) -> None:
    """The MoE scheduler process: real torch op calls in the `sgl_kernel` namespace."""
    import torch

    lib = torch.library.Library("sgl_kernel", "DEF")
    for name in sorted({*PREFILL_OPS, *DECODE_OPS}):
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, lambda x: x + 1, "CompositeExplicitAutograd")
    x = torch.zeros(4)
    capturing = {"on": False}
    torch.cuda.is_initialized = lambda: capturing["on"]  # type: ignore[assignment]
    torch.cuda.is_current_stream_capturing = lambda: capturing["on"]  # type: ignore[assignment]
    capturing["on"] = True  # "Capture cuda graph": the decode step, once per captured batch size (1, 2)
    for _ in range(2):
        for name in DECODE_OPS:
            getattr(torch.ops.sgl_kernel, name).default(x)
    capturing["on"] = False
    ready.set()
    while steps.get() is not None:
        for name in PREFILL_OPS:
            getattr(torch.ops.sgl_kernel, name)(x)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: object) -> None:
        print("double:", fmt % args, flush=True)

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refused(self) -> bool:
        """sglang's decide_request_auth for a NORMAL endpoint: health and metrics open, the rest needs the key."""
        if "key" not in AUTH or self.path.startswith(("/health", "/metrics")):
            return False
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token == AUTH["key"]:
            return False
        self._json(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        if self._refused():
            return
        if self.path == "/health_generate" and time.monotonic() - START < READY_AFTER:
            self._json(503, {"error": "loading"})
        else:
            if self.path == "/health_generate" and STEPS is not None:
                STEPS.put("health")
            self._json(200, {})

    def do_POST(self) -> None:
        if self._refused():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/generate":
            self._json(200, {})
            return
        n = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
        if STEPS is not None:
            STEPS.put("generate")
        words = [" Paris"] * n
        if not body.get("stream"):
            self._json(200, {"text": "".join(words), "meta_info": {"completion_tokens": n, "prompt_tokens": 5}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(1, n + 1):
            chunk = {"text": "".join(words[:i]), "meta_info": {"completion_tokens": i, "prompt_tokens": 5}}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--attention-backend", default=None)
    parser.add_argument("--moe-runner-backend", default="auto")
    parser.add_argument("--fp4-gemm-backend", dest="fp4_gemm_runner_backend", default="auto")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--api-key", default=None)
    args, _ = parser.parse_known_args()
    resolved: dict[str, object] = {k: getattr(args, k) for k in (
        "attention_backend", "moe_runner_backend", "fp4_gemm_runner_backend", "kv_cache_dtype", "disable_cuda_graph",
        "api_key")}
    resolved["attention_backend"] = resolved["attention_backend"] or "flashinfer"
    for item in filter(None, os.environ.get("DOUBLE_RESOLVE", "").split(",")):
        key, _, value = item.partition("=")
        resolved[key] = {"True": True, "False": False}.get(value, value)
    shown = ", ".join(f"{k}={v!r}" for k, v in resolved.items())
    print(f"[double] server_args=ServerArgs(model_path={args.model_path!r}, {shown})", flush=True)
    if not resolved["disable_cuda_graph"]:
        print("[double TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.00 GB", flush=True)
        print("[double TP0] Capture cuda graph end. Time elapsed: 0.01 s. mem usage=0.00 GB. avail mem=1.00 GB.",
              flush=True)
    if os.environ.get("DOUBLE_ARGV"):
        with open(os.environ["DOUBLE_ARGV"], "w") as fh:
            json.dump(sys.argv[1:], fh)
    global STEPS
    if args.api_key is not None:
        AUTH["key"] = args.api_key
    config_file = Path(args.model_path) / "config.json"
    moe = config_file.is_file() and "num_local_experts" in json.loads(config_file.read_text())
    if moe:
        spawn = multiprocessing.get_context("spawn")
        STEPS, ready = spawn.Queue(), spawn.Event()
        proc = spawn.Process(target=scheduler, args=(STEPS, ready), name="scheduler", daemon=True)
        proc.start()
        child_pid = proc.pid
        wait = Wait(proc, ready)
    else:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        child_pid, wait = child.pid, Wait(child, None)
    if os.environ.get("DOUBLE_PIDS"):
        with open(os.environ["DOUBLE_PIDS"], "w") as fh:
            json.dump([os.getpid(), child_pid], fh)
    print(f"double: loading {args.model_path}", flush=True)
    if os.environ.get("DOUBLE_EXIT_AFTER_S"):
        time.sleep(float(os.environ["DOUBLE_EXIT_AFTER_S"]))
        if os.environ.get("DOUBLE_EXIT_LOG"):  # a crash's log to replay (a file of lines)
            with open(os.environ["DOUBLE_EXIT_LOG"]) as fh:
                print(fh.read(), end="", flush=True)
        else:
            print("double: CUDA error: no kernel image is available for execution on the device", flush=True)
        sys.exit(int(os.environ.get("DOUBLE_EXIT_CODE", "1")))
    wait.ready()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"double: serving on {args.host}:{args.port}", flush=True)
    wait.forever()


class Wait:
    """The child: a scheduler process (ready once it has "captured") or the plain sleeping one."""

    def __init__(self, child: Any, ready: Any) -> None:
        self.child, self.event = child, ready

    def ready(self) -> None:
        if self.event is not None and not self.event.wait(120):
            sys.exit("double: the scheduler never became ready")

    def forever(self) -> None:
        if isinstance(self.child, subprocess.Popen):
            self.child.wait()
        else:
            self.child.join()


if __name__ == "__main__":
    main()
