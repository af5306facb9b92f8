#!/usr/bin/env bash
# The two SM90 FP8 GEMM kernels whose SASS differs between the pruned and unpruned 9.0a wheels, run on the GPU on the
# same inputs and compared bit for bit (issue 70 item 6; bench/pruning/fp8_kernels_bitwise.py). On the GPU host,
# offline, with the device folder carried (.device: bench/gpu_host/README.md; make_device_folder.sh writes both
# recipes): both wheels are built by the tool on the host from the carried mirrors,
#
#   .device/h9nofa.toml   nightly-cu130-pruned for 9.0a, FA3 off: the pruned wheel (~380 s on a 16-core H100 host)
#   .device/h9u.toml      nightly-cu130-unpruned for 9.0a, FA3 off, the same host lines: upstream's sources with only
#                         the CUDA 13 / torch fixes, the unpruned reference (longer: every family's kernels)
#
# (PRUNED_WHEEL / UNPRUNED_WHEEL skip a build), then `build-kernel prune-proof` of the pair names the functions that
# differ, each wheel runs upstream's test_fp8_gemm grid through fp8_scaled_mm in a target folder of its own (one
# process each: two sgl_kernel installs cannot share one), and `compare` writes the record prune-proof reads back:
# `prune-proof --same-outputs` then gives the verdict "different code, same outputs on N cases" (never a pass).
# Everything lands in $OUT/fp8-bitwise-raw.tar.gz, packed after each step. Too long for one call: run it detached,
#
#   setsid bash bench/pruning/fp8_kernels_bitwise_on_gpu_host.sh > /tmp/fp8-bitwise.log 2>&1 < /dev/null &
#   cp /tmp/fp8-bitwise-out/fp8-bitwise-raw.tar.gz /tmp/fp8-bitwise.log "$OUT"/; cat /tmp/fp8-bitwise-raw/steps.txt
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/fp8-bitwise-out}
export BUILD_KERNEL_CACHE_DIR=${BUILD_KERNEL_CACHE_DIR:-/tmp/bkc}
# shellcheck source=../gpu_host/gpu_host_lib.sh
source bench/gpu_host/gpu_host_lib.sh
run_from_copy /tmp/fp8-bitwise-repo bench/pruning/fp8_kernels_bitwise_on_gpu_host.sh
R=/tmp/fp8-bitwise-raw; rm -rf "$R"; mkdir -p "$R" "$OUT"
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> "$R/steps.txt"; tar -czf "$OUT/fp8-bitwise-raw.tar.gz" -C "$R" .; }
host_record "$R/host.txt"; cat "$REPO/HEAD.txt" >> "$R/host.txt" 2>/dev/null
[ -f .device/gitenv.sh ] && MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
tool_setup "$R/tool.log"

build() {  # $1: label, $2: recipe -> the wheel's path on stdout
  local out=/tmp/bkw-$1
  BUILD_KERNEL_OUTPUT_DIR=$out python3 -m build_kernel --offline --json build --recipe "$2" > "$R/build-$1.json" 2> "$R/build-$1.err"
  step "build $1 ($(basename "$2")) rc=$?"
  ls -t "$out"/*.whl 2>/dev/null | head -1
}
PRUNED_WHEEL=${PRUNED_WHEEL:-$(build pruned .device/h9nofa.toml)}
UNPRUNED_WHEEL=${UNPRUNED_WHEEL:-$(build unpruned .device/h9u.toml)}
sha256sum "$PRUNED_WHEEL" "$UNPRUNED_WHEEL" > "$R/wheels.sha256" 2>&1
[ -f "$PRUNED_WHEEL" ] && [ -f "$UNPRUNED_WHEEL" ] || { step "a wheel is missing: see build-*.err"; exit 1; }

python3 -m build_kernel --json prune-proof "$PRUNED_WHEEL" --against "$UNPRUNED_WHEEL" > "$R/prune-proof.json" 2> "$R/prune-proof.err"
step "prune-proof rc=$? (7: functions differ)"

for label in pruned unpruned; do
  wheel=$PRUNED_WHEEL; [ $label = unpruned ] && wheel=$UNPRUNED_WHEEL
  rm -rf "/tmp/fp8-site-$label"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "/tmp/fp8-site-$label" "$wheel" > "$R/install-$label.log" 2>&1
  PYTHONPATH=/tmp/fp8-site-$label timeout 900 python3 bench/pruning/fp8_kernels_bitwise.py run --label $label \
    --out "$R/run-$label.json" > "$R/run-$label.log" 2>&1
  step "run $label rc=$?"
done
python3 bench/pruning/fp8_kernels_bitwise.py compare "$R/run-pruned.json" "$R/run-unpruned.json" \
  --proof "$R/prune-proof.json" --out "$R/same-outputs.json" > "$R/compare.log" 2>&1
step "compare rc=$?"
python3 -m build_kernel --json prune-proof "$PRUNED_WHEEL" --against "$UNPRUNED_WHEEL" --same-outputs "$R/same-outputs.json" \
  > "$R/prune-proof-same-outputs.json" 2> "$R/prune-proof-same-outputs.err"
step "prune-proof --same-outputs rc=$?"
step "done"
