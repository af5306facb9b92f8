"""A TEST DOUBLE of `python -m sglang.launch_server`: no GPU here can run sglang.

It speaks the endpoints build-kernel uses, as sglang does: `/health` (200 once up),
`/health_generate` (503 while "loading", then 200), `/generate` (JSON, or server-sent
events with `stream: true`, cumulative text and `meta_info.completion_tokens`, then
`data: [DONE]`), and 200 `{}` for anything else bench_serving asks. Like sglang it runs
child processes (a "scheduler"), so a stop must reach the whole process group.

Like sglang it logs its resolved arguments (`server_args=ServerArgs(...)`, the audited fields
only) and `Capture cuda graph begin/end` unless --disable-cuda-graph; DOUBLE_RESOLVE
(`dest=value,...`) makes it resolve a field otherwise than asked (a silent fallback).

Knobs (environment): DOUBLE_READY_AFTER_S, DOUBLE_EXIT_AFTER_S + DOUBLE_EXIT_CODE (die
early), DOUBLE_PIDS (file: our pid and the child's), DOUBLE_ARGV (file: the argv we got).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START = time.monotonic()
READY_AFTER = float(os.environ.get("DOUBLE_READY_AFTER_S", "0"))


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

    def do_GET(self) -> None:
        if self.path == "/health_generate" and time.monotonic() - START < READY_AFTER:
            self._json(503, {"error": "loading"})
        else:
            self._json(200, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/generate":
            self._json(200, {})
            return
        n = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
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
    args, _ = parser.parse_known_args()
    resolved: dict[str, object] = {k: getattr(args, k) for k in (
        "attention_backend", "moe_runner_backend", "fp4_gemm_runner_backend", "kv_cache_dtype", "disable_cuda_graph")}
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
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    if os.environ.get("DOUBLE_PIDS"):
        with open(os.environ["DOUBLE_PIDS"], "w") as fh:
            json.dump([os.getpid(), child.pid], fh)
    print(f"double: loading {args.model_path}", flush=True)
    if os.environ.get("DOUBLE_EXIT_AFTER_S"):
        time.sleep(float(os.environ["DOUBLE_EXIT_AFTER_S"]))
        print("double: CUDA error: no kernel image is available for execution on the device", flush=True)
        sys.exit(int(os.environ.get("DOUBLE_EXIT_CODE", "1")))
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"double: serving on {args.host}:{args.port}", flush=True)
    child.wait()


if __name__ == "__main__":
    main()
