#!/usr/bin/env bash
# On a machine with a GPU (e.g. an H200, sm_90a): build the miniature for 9.0a through the
# whole pipeline, with verify's GPU check (FP4 quantize vs a float64 reference). Python
# packages the machine lacks travel as wheels in .whl/ (see the device tool's notes).
set -euo pipefail
out=${OUT:-/tmp/bk-gpu-check}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/bk-site .whl/*.whl
  export PYTHONPATH="$PWD:/tmp/bk-site"
fi
export BUILD_KERNEL_CACHE_DIR=/tmp/bk-cache BUILD_KERNEL_OUTPUT_DIR="$out/wheels" NO_COLOR=1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
python3 -m build_kernel doctor --recipe demo-h200 || true
python3 -m build_kernel --json --recipe demo-h200 > "$out/pipeline.json"
python3 - "$out/pipeline.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
v = run["stages"]["verify"]
print("wheel:", run["wheel"])
print("libraries:", [(l["path"], l["archs"]) for l in v["libraries"]])
print("imports:", v["imports"], "ops:", v["ops_found"])
print("gpu:", json.dumps(v["gpu"], indent=1))
print("verify passed:", v["passed"])
PY
