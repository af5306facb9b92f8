#!/bin/bash
# step 3: the kept objects' SASS, v13 against v8, function by function (run after run.sh has compiled all eight;
# `run.sh --resume` finishes a stopped run). cuobjdump 13.5 from the venv's nvidia-cu13 wheel.
set -e
cd /work/main
R=bench/header_diet/raw/local-2c-2026-12-07-sm121
O=${OBJECTS:-/tmp/sm121/objects}
export PATH=/work/main/.venv/lib/python3.11/site-packages/nvidia/cu13/bin:$PATH
pairs=()
for tu in fp8_gemm_kernel fp8_blockwise_gemm_kernel nvfp4_scaled_mm_kernels nvfp4_blockwise_moe; do
  pairs+=(--pair $tu $O/v13__$tu.o $O/v8__$tu.o)
done
/work/main/.venv/bin/python bench/header_diet/object_proof.py "${pairs[@]}" --count E4M3 \
  --functions $R/functions --out bench/header_diet/results/object-proof-sm121.json
# The objects are compiled upstream code: never committed (run.sh makes them again).
