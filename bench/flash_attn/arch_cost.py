"""What one flash-attn 2.8.3 TU costs per arch: the raw input of the "upstream's four-arch build" estimate.

Compiles each given TU of a fetched flash-attn tree once per arch of upstream's default
`FLASH_ATTN_CUDA_ARCHS` (80;90;100;120), with setup.py's own nvcc flags and `--threads 1`, and
records the compiler's CPU seconds and peak RSS (wait4's rusage of the nvcc tree). Upstream's
build runs all four gencodes in one nvcc per TU; the CPU of that is the sum of these (nvcc
--threads only runs them side by side). Raw output, one JSON file; bench/flash_attn/build_report.py reads it.

    python bench/flash_attn/arch_cost.py --src <cache>/build/<key>/src \
        csrc/flash_attn/src/flash_fwd_hdim64_fp16_sm80.cu csrc/flash_attn/src/flash_bwd_hdim128_bf16_causal_sm80.cu \
        --out bench/flash_attn/raw/local-2c-2026-12-03-fa/arch-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp

ARCHS = ["80", "90", "100", "120"]  # setup.py's default FLASH_ATTN_CUDA_ARCHS
# setup.py's nvcc flags for flash_attn_2_cuda (060c9188), less -gencode, --threads and -std (series v2 leaves
# the standard to torch: C++17 before 2.14, C++20 from it).
FLAGS = ["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
         "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr",
         "--expt-extended-lambda", "--use_fast_math", "-DTORCH_API_INCLUDE_EXTENSION_H",
         "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda", "--compiler-options", "-fPIC"]


def compile_once(nvcc: str, std: str, src: Path, tu: str, arch: str) -> dict[str, object]:
    includes = [src / "csrc/flash_attn", src / "csrc/flash_attn/src", src / "csrc/cutlass/include",
                *map(Path, cpp.include_paths(device_type="cuda")), Path(sysconfig.get_paths()["include"])]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-c", str(src / tu), "-o", f"{tmp}/out.o", *FLAGS, f"-std={std}", *(f"-I{i}" for i in includes),
               "-gencode", f"arch=compute_{arch},code=sm_{arch}", "--threads", "1"]
        start = time.monotonic()
        proc = subprocess.Popen(cmd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"nvcc failed for {tu} sm_{arch}: {' '.join(cmd)}")
    return {"tu": tu, "arch": arch, "wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_mb": round(usage.ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tus", nargs="+", help="TU paths inside the tree")
    parser.add_argument("--src", type=Path, required=True, help="a fetched flash-attn 2.8.3 tree (the tool's build copy)")
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--std", help="the C++ standard (default: what torch's headers need)")
    args = parser.parse_args()
    major_minor = tuple(int(x) for x in torch.__version__.split(".")[:2])
    std = args.std or ("c++20" if major_minor >= (2, 14) else "c++17")
    rows = [compile_once(args.nvcc, std, args.src, tu, arch) for tu in args.tus for arch in ARCHS]
    nvcc_version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{os.cpu_count()} cores, {platform.machine()}",
                                    "nvcc": nvcc_version.strip().splitlines()[-1], "torch": torch.__version__,
                                    "std": std, "threads": 1, "rows": rows}, indent=1) + "\n")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
