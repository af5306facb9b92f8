#!/bin/bash
cd /work/main
R=bench/header_diet/raw/local-2c-2026-12-07-sm121
S=/work/.bench-hd/cache/src
exec /work/main/.venv/bin/python bench/header_diet/phases.py run /work/.bench-hd/cache/build/6155fe1349d82fabfff5/cmake \
  --target-dir common_ops_sm100_build \
  --tree v8=$S/6ffc74efd7d2-e29f8ddace73-d89f5f5d/sgl-kernel --tree v13=$S/6ffc74efd7d2-b5bd1994024c-d89f5f5d/sgl-kernel \
  --tu csrc/gemm/fp8_gemm_kernel --tu csrc/gemm/fp8_blockwise_gemm_kernel \
  --tu csrc/gemm/nvfp4_scaled_mm_kernels --tu csrc/moe/nvfp4_blockwise_moe \
  --keep-objects /tmp/sm121/objects --parallel 2 --out $R "$@"
