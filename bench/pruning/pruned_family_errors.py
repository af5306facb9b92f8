"""On a GPU whose family a wheel's library was pruned for: the one-line errors, from the real ops.

Runs on the GPU host with the host's torch. It loads one library of the wheel by path (not through
the package's `__init__`, which picks its variant by the GPU's compute capability and would not load
a variant built for another family at all) and calls ops whose code for this GPU was left out,
each with the smallest inputs that get past the op's own checks to the arch dispatch, each in a
process of its own (a crash is recorded as its signal, and the other probes still run). Writes one
JSON object: the GPU, its compute capability, and per op the exception's type and first line.

    python bench/pruning/pruned_family_errors.py WHEEL [--library sgl_kernel/sm100/common_ops.abi3.so] > OUT.json

Probes (sgl-kernel 6ffc74ef, series sm120 v6, a 12.0a wheel on a 9.0 GPU):
- `int8_scaled_mm`: 0005 compiles int8_gemm_kernel.cu to a stub (no 7.x/8.x/9.0 arch asked);
- `fwd_sparse`: 0008 leaves out the sparse flash-attention kernels; upstream's own check admits a
  9.0 GPU, so the call reaches 0008's stub launcher.
- `fp8_scaled_mm`: 0005 compiles out its SM90 branch inside the dispatch (not a stub file).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def probes(torch: Any) -> dict[str, Callable[[], object]]:
    ops, dev = torch.ops.sgl_kernel, "cuda"
    a = torch.zeros(32, 32, dtype=torch.int8, device=dev)
    a8 = torch.zeros(32, 32, device=dev).to(torch.float8_e4m3fn)
    scale = torch.ones(32, dtype=torch.float32, device=dev)
    q = torch.zeros(1, 128, 1, 128, dtype=torch.bfloat16, device=dev)
    # fwd_sparse's index tensors: (batch, heads, cdiv(seqlen_q, 64)) counts and (..., nnz) indices.
    count = torch.ones(1, 1, 2, dtype=torch.int32, device=dev)
    index = torch.zeros(1, 1, 2, 1, dtype=torch.int32, device=dev)
    return {
        "int8_scaled_mm": lambda: ops.int8_scaled_mm(a, a.t(), scale, scale, torch.bfloat16, None),
        "fwd_sparse": lambda: ops.fwd_sparse(q, q, q, count, index, count, index, None, None,
                                             0.0, 1.0, False, 0.0, False, None),
        "fp8_scaled_mm": lambda: ops.fp8_scaled_mm(a8, a8.t(), scale, scale, torch.bfloat16, None),
    }


def probe(library: str, name: str) -> dict[str, Any]:
    """One op, in this process: what it raised."""
    import torch  # the GPU host's

    torch.ops.load_library(library)  # type: ignore[no-untyped-call]
    try:
        probes(torch)[name]()
        torch.cuda.synchronize()
        return {"raised": None}
    except Exception as exc:  # what the op raised is the measurement
        return {"raised": type(exc).__name__, "first_line": str(exc).splitlines()[0],
                "lines": len(str(exc).splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--library", default="sgl_kernel/sm100/common_ops.abi3.so")
    parser.add_argument("--probe", nargs=2, metavar=("LIBRARY", "OP"), help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(*args.probe)))
        return
    import torch  # the GPU host's

    out: dict[str, Any] = {"wheel": args.wheel.name, "library": args.library, "torch": torch.__version__,
                           "gpu": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability())}
    with tempfile.TemporaryDirectory() as tmp:
        zipfile.ZipFile(args.wheel).extractall(tmp)
        library = str(Path(tmp) / args.library)
        calls: dict[str, Any] = {}
        for name in ("int8_scaled_mm", "fwd_sparse", "fp8_scaled_mm"):
            proc = subprocess.run([sys.executable, "-X", "faulthandler", __file__, str(args.wheel), "--probe", library,
                                   name], capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode == 0:
                calls[name] = json.loads(proc.stdout.splitlines()[-1])
            else:
                died = signal.Signals(-proc.returncode).name if proc.returncode < 0 else f"exit {proc.returncode}"
                calls[name] = {"raised": None, "died": died, "stderr_tail": proc.stderr.splitlines()[-12:]}
        out["calls"] = calls
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
