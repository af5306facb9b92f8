#!/usr/bin/env bash
# Throughput with its noise (issue 70 item 4): the pruned wheel against the same series without its pruning, one
# variable apart, in alternating rounds on one GPU host. Offline, with the device folder carried (.device:
# bench/gpu_host/README.md). NOT RUN YET: it does not fit a short hold (two builds, ~380 s and longer, then 2 x ROUNDS
# server starts of ~60 s plus their benches: ~30 min on an H100), so it runs detached and is collected later:
#
#   setsid bash bench/throughput/rounds_on_gpu_host.sh > /tmp/rounds.log 2>&1 < /dev/null &
#   cp /tmp/rounds-out/rounds-raw.tar.gz /tmp/rounds.log "$OUT"/; cat /tmp/rounds-raw/steps.txt
#   python bench/throughput/rounds_report.py rounds-raw.tar.gz --out bench/throughput/results/rounds.json
#
# The pair: `pruned` is .device/h9nofa.toml (nightly-cu130-pruned, series v8, 9.0a, FA3 off); `reference` is the
# overlay written below: the SAME recipe with series v7-unpruned, which is v8 with 0005 (arch-dispatch pruning), 0007
# (unity batches), 0008 (sparse FA pruning) and 0010 (FA3 variants) left out (patches/sm120/v7-unpruned/info.toml):
# same commit, host lines, fp4 and FA3 setting (off), built on this host, served by the same serve environment with
# the same flags (the wheel swapped --no-deps between runs). (.device/h9u.toml is not it: it keeps FP4 on.)
# The model: the tiny MoE (bf16, .device/moe70/bf16), flashinfer attention (FA3 is off in both).
# Rounds: ROUNDS (5) rounds, each serving both wheels in turn, the order alternating (round 1 pruned first, round 2
# reference first, ...), each run sglang.bench_serving at C=1 and C=32 with 256 requests of 256 in / 128 out tokens
# (>= 256 requests per concurrency; C=1 runs over a minute). Every run's raw output is kept.
# Exclusion rule, fixed here before any run (rounds_report.py applies exactly this): a run counts unless its server
# did not serve (serve exited non-zero) or its bench completed fewer requests than it sent; a round counts at a
# concurrency only when both its runs count there. Nothing is dropped for its figure (no drift limit).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/rounds-out}
ROUNDS=${ROUNDS:-5}
MOE=$(realpath "${MOE:-.device/moe70}")
export BUILD_KERNEL_CACHE_DIR=${BUILD_KERNEL_CACHE_DIR:-/tmp/bkc}
# shellcheck source=../gpu_host/gpu_host_lib.sh
source bench/gpu_host/gpu_host_lib.sh
run_from_copy /tmp/rounds-repo bench/throughput/rounds_on_gpu_host.sh
R=/tmp/rounds-raw; rm -rf "$R"; mkdir -p "$R/recipes" "$R/runs" "$OUT"
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> "$R/steps.txt"; tar -czf "$OUT/rounds-raw.tar.gz" -C "$R" .; }
host_record "$R/host.txt"; cat "$REPO/HEAD.txt" >> "$R/host.txt" 2>/dev/null
[ -f .device/gitenv.sh ] && MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
tool_setup "$R/tool.log"
export PYTHONPATH=$REPO:/tmp/bk-site
PRUNED_RECIPE=$(realpath .device/h9nofa.toml)
cat > "$R/recipes/reference.toml" <<EOF
extends = "$PRUNED_RECIPE"
description = "issue 70 item 4: h9nofa without its pruning: series v7-unpruned (= v8 less 0005, 0007, 0008, 0010), FA3 off and fp4 = false as there"

[patches]
version = "v7-unpruned"

[patches.omitted]
"0005-prune-arch-dispatch" = "the reference of the throughput pair: every compute-capability branch compiles"
"0007-unity-batches" = "the reference keeps upstream's TUs: one per file"
"0008-prune-sparse-flash-attn" = "the reference compiles the sparse kernels for every arch"
"0010-fa3-variants" = "the reference compiles FA3 as upstream does (off here, as in the pruned wheel)"
"0011-split-heavy-tus" = "not in the pruned wheel either (nightly-cu130 leaves it out)"
"0012-lean-torch-headers" = "not in the pruned wheel's series v8 either"

[build]
fa3 = "all"  # no 0010 reads a head-dim list; FA3 is off anyway (SGL_KERNEL_FA3=OFF, h9nofa's define)

[build.defines]
SGL_KERNEL_UNITY = "OFF"
EOF
cp "$PRUNED_RECIPE" "$R/recipes/pruned.toml"
build() {  # $1: label, $2: recipe
  BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw-$1 python3 -m build_kernel --offline --json build --recipe "$2" > "$R/build-$1.json" 2> "$R/build-$1.err"
  step "build $1 rc=$?"
}
[ -n "${PRUNED_WHEEL:-}" ] || { build pruned "$PRUNED_RECIPE"; PRUNED_WHEEL=$(ls -t /tmp/bkw-pruned/*.whl | head -1); }
[ -n "${REF_WHEEL:-}" ] || { build reference "$R/recipes/reference.toml"; REF_WHEEL=$(ls -t /tmp/bkw-reference/*.whl | head -1); }
sha256sum "$PRUNED_WHEEL" "$REF_WHEEL" > "$R/wheels.sha256"
[ -x /tmp/sgenv/bin/python ] || serve_env "$R/env.log" .device/wh
cat > "$R/recipes/serve.toml" <<EOF
extends = "$PRUNED_RECIPE"
[serve]
model = "$MOE/bf16"
python = "/tmp/sgenv/bin/python"
args = ["--tp-size", "1", "--attention-backend", "flashinfer", "--mem-fraction-static", "0.5"]
host = "127.0.0.1"
api_key_file = ""
port = 30000
health_timeout_s = 600
bench_concurrency = [1, 32]
bench_input_len = 256
bench_output_len = 128
bench_prompts = 256
EOF
run() {  # $1: round, $2: label, $3: wheel
  local d=$R/runs/r$1-$2; mkdir -p "$d"
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --force-reinstall --no-compile "$3" > "$d/install.log" 2>&1
  timeout -s INT 900 python3 -m build_kernel --json serve "$3" --recipe "$R/recipes/serve.toml" --bench --no-op-report \
    > "$d/bench.json" 2> "$d/bench.err"
  echo $? > "$d/rc"
  cp "$3.serve-bench.json" "$d/serve-bench.json" 2>/dev/null
  step "round $1 $2 rc=$(cat "$d/rc")"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run "$r" pruned "$PRUNED_WHEEL"; run "$r" reference "$REF_WHEEL"
  else run "$r" reference "$REF_WHEEL"; run "$r" pruned "$PRUNED_WHEEL"; fi
done
step "done"
