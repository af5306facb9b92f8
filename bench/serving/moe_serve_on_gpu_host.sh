#!/usr/bin/env bash
# The tiny MoE served on the GPU host (issue 41; H200 or H100), one call, offline: the tiny MoE (bench/serving/tiny_moe.py) in bf16 and block FP8, each served
# through `build-kernel serve --bench` as a user runs it, on the wheel the tool built, with SGLang's default
# backends; per variant, one server start serves the smoke request, the 64-prompt logprob-close check against
# transformers on the bf16 weights (`--check`: bench/serving/token_agreement.py), 8 sampled requests (so the sampling
# kernels run: greedy is an argmax) and sglang.bench_serving at C=1 and C=32; the op report (which sgl_kernel
# ops ran) comes from the same start. Everything lands in
# $OUT/moe-serve-raw.tar.gz (packed again after each step, so a cut-off run still brings back what it did);
# bench/serving/moe_serve_report.py turns it into bench/serving/results/moe-serve.json.
#
#   bash bench/serving/moe_serve_on_gpu_host.sh            # after the build call: its cache and wheel are reused
#
# Environment (defaults are .device/run.sh's): RECIPE (.device/h9.toml), WHEEL (newest in the output dir),
# BUILD_KERNEL_CACHE_DIR (/tmp/bkc), BUILD_KERNEL_OUTPUT_DIR (/tmp/bkw), WHEELHOUSE (.device/wh: the tool's
# own dependencies and sglang's, offline), MOE_CACHE (.device/cache/moe: the checkpoints, made if absent),
# SERVE_PYTHON (an environment of your own as [serve] python; after a failed install, `build-kernel test`'s
# environment of the wheel where there is one), INSTALL (1: `serve --install --wheelhouse` first), VARIANTS ("bf16 fp8"), BUDGET_S (540: a variant after the
# first is skipped when less than 200 s of it are left; the first start JIT-compiles flashinfer's kernels, a
# second call finds them cached), OUT (/tmp/moe-out).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/moe-out}
RECIPE=$(realpath "${RECIPE:-.device/h9.toml}")
WHEELHOUSE=$(realpath "${WHEELHOUSE:-.device/wh}")
MOE_CACHE=${MOE_CACHE:-$REPO/.device/cache/moe}
INSTALL=${INSTALL:-1}
VARIANTS=${VARIANTS:-bf16 fp8}
BUDGET_S=${BUDGET_S:-540}
# The throughput pair of issue 41 item 5 (this wheel against another build of the same commit, same server):
# ATTENTION names one attention backend for both (an unpruned reference without FA3 cannot run sglang's H200
# default), CHECKS=0 leaves the 64-prompt check and the sampled requests out (bench only), TAG names the tarball.
ATTENTION=${ATTENTION:-}
CHECKS=${CHECKS:-1}
TAG=${TAG:-}
# RETRY=0: a start that dies is not tried again with the server's advice (a bisect start wants the failure itself).
# START_TIMEOUT_S (900): one serve run's limit (SIGINT). BASE_ARGS: serve args (a TOML list's items, each with a leading comma) for every start, BASE_WHY their reason.
RETRY=${RETRY:-1}
# SMOKE_ONLY=1: each start serves the smoke request only (`serve --launch --smoke-only`: unit, health, smoke, stop),
# no checks, no bench: the shortest proof that the wheel serves, for a hold with little time left.
SMOKE_ONLY=${SMOKE_ONLY:-0}
BASE_ARGS=${BASE_ARGS:-}
BASE_WHY=${BASE_WHY:-}
export BUILD_KERNEL_CACHE_DIR=${BUILD_KERNEL_CACHE_DIR:-/tmp/bkc} BUILD_KERNEL_OUTPUT_DIR=${BUILD_KERNEL_OUTPUT_DIR:-/tmp/bkw}
R=/tmp/moe-serve-raw; rm -rf "$R"; mkdir -p "$R" "$OUT" "$MOE_CACHE"
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> "$R/steps.txt"; tar -czf "$OUT/moe-serve-raw${TAG:+-$TAG}.tar.gz" -C "$R" .; }

# The tool's own dependencies (GitPython, unidiff, pyelftools), as .device/run.sh installs them.
if [ ! -d /tmp/bk-site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/bk-site \
    "$WHEELHOUSE"/[Gg]it[Pp]ython*.whl "$WHEELHOUSE"/gitdb*.whl "$WHEELHOUSE"/smmap*.whl \
    "$WHEELHOUSE"/unidiff*.whl "$WHEELHOUSE"/pyelftools*.whl
fi
export PYTHONPATH=$REPO:/tmp/bk-site
# The recipe's public URLs to the carried snapshots, as .device/run.sh does (sglang from source is fetched).
if [ -f .device/gitenv.sh ]; then MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh; fi
bk() { python3 -m build_kernel "$@"; }
{ date -u; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; nproc
  python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'; git -C "$REPO" rev-parse HEAD; } \
  > "$R/host.txt" 2>&1
WHEEL=${WHEEL:-$(ls -t "$BUILD_KERNEL_OUTPUT_DIR"/*.whl 2>/dev/null | head -1)}
echo "wheel: $WHEEL" >> "$R/host.txt"
[ -n "$WHEEL" ] || { step "no wheel in $BUILD_KERNEL_OUTPUT_DIR"; exit 1; }

# 1. The checkpoints: trained on the GPU (seconds), cached by their inputs in MOE_CACHE.
python3 bench/serving/tiny_moe.py "$MOE_CACHE" --device cuda > "$R/moe.json" 2> "$R/moe.err"; step "checkpoints rc=$?"
BF16=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bf16"])' "$R/moe.json")
FP8=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fp8"])' "$R/moe.json")
cp "$(dirname "$BF16")/training.json" "$R/training.json"; cp "$BF16/config.json" "$R/config-bf16.json"
cp "$FP8/config.json" "$R/config-fp8.json"

# 2. The serve recipe: the build's recipe with a [serve] for this model. Default backends: only the tensor
# parallel size is given (and the attention backend where the wheel lacks FA3, below).
SERVE_PYTHON=${SERVE_PYTHON:-}
EXTRA="$BASE_ARGS"  # serve args beyond the defaults, each with its reason in notes.txt
[ -z "$BASE_ARGS" ] || echo "args:$BASE_ARGS: $BASE_WHY" >> "$R/notes.txt"
write_recipe() {  # $1: extra serve args (a TOML list's items)
  mkdir -p "$R/recipes"
  cat > "$R/recipes/moe-serve.toml" <<EOF
extends = "$RECIPE"
description = "issue 41: the tiny MoE, bf16 and block FP8, served with SGLang's default backends"

[serve]
model = "$BF16"
${SERVE_PYTHON:+python = \"$SERVE_PYTHON\"}
args = ["--tp-size", "1"$1]
host = "127.0.0.1"
# Loopback on a throwaway host: no key (the shipped recipes' key file would have to exist before --launch).
api_key_file = ""
port = 30000
health_timeout_s = 900
bench_concurrency = [1, 32]
bench_input_len = 256
bench_output_len = 128
bench_prompts = 32

[serve.env]
# DeepGEMM (if the wheel ships it) then compiles on first use instead of for every batch size at start-up:
# the same kernels, a start that fits the call.
SGLANG_JIT_DEEPGEMM_PRECOMPILE = "false"
EOF
}
write_recipe "$EXTRA"
OVR=$R/recipes/moe-serve.toml
if [ "$INSTALL" = 1 ]; then
  bk --json serve "$WHEEL" --recipe "$OVR" --install --wheelhouse "$WHEELHOUSE" > "$R/install.json" 2> "$R/install.err"
  rc=$?; step "install rc=$rc"
  # The serve environment resolves sglang's whole requirement list from the wheelhouse; where that lacks some
  # (the source sglang of 6ffc74ef names 27 more than the carried one holds: H200, 2026-12-03), the environment
  # `build-kernel test` made for the same wheel (the wheel, that sglang, the recipe's [test] requires, offline)
  # serves instead, as [serve] python: an environment of the user's own.
  TEST_PY=$(ls -d "$BUILD_KERNEL_CACHE_DIR"/tests/env-*/bin/python 2>/dev/null | head -1)
  if [ "$rc" != 0 ] && [ -z "$SERVE_PYTHON" ] && [ -n "$TEST_PY" ]; then
    SERVE_PYTHON=$TEST_PY; write_recipe "$EXTRA"
    # That environment may hold another wheel (the tests may have run on another build): the served one goes in,
    # alone (serve's preflight refuses an sgl_kernel whose files are not the wheel's).
    "$TEST_PY" -m pip install -q --no-deps --no-index --force-reinstall "$WHEEL" > "$R/swap.log" 2>&1
    step "wheel into the test environment rc=$?"
    echo "environment: [serve] python = $TEST_PY (build-kernel test's environment, with the served wheel" \
         "installed): the serve install stopped ($(grep -m1 '^error' "$R/install.err" | cut -c1-200))" >> "$R/notes.txt"
  fi
fi
if [ ! -f "$WHEEL.verify.json" ]; then
  bk --json verify "$WHEEL" --recipe "$OVR" > "$R/verify.json" 2> "$R/verify.err"; step "verify rc=$?"
fi
bk --json serve "$WHEEL" --recipe "$OVR" > "$R/dry-run.json" 2> "$R/dry-run.err"; step "dry-run rc=$?"
SERVE_PY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["python"])' "$R/dry-run.json" 2>/dev/null || echo python3)

# 3. SGLang's default attention backend on an H200 is fa3 (server_args._get_default_attn_backend). A wheel may
# lack it (SGL_KERNEL_FA3=OFF: no flash_ops, the fallback raises at the first call) or keep only other head dims
# (series v8's [build] fa3): one FA3 call of this model's shape (head_dim 64, bf16, causal, GQA) decides. Where it
# does not run, flashinfer, sglang's default where fa3 is not picked, is asked for, and the notes say why.
if [ -n "$ATTENTION" ]; then
  EXTRA="$EXTRA, \"--attention-backend\", \"$ATTENTION\""; write_recipe "$EXTRA"
  echo "attention: --attention-backend $ATTENTION (ATTENTION: one backend for both wheels of a pair)" >> "$R/notes.txt"
  bk --json serve "$WHEEL" --recipe "$OVR" > "$R/dry-run.json" 2> "$R/dry-run.err"; step "dry-run ($ATTENTION) rc=$?"
fi
HEAD_DIM=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"])' "$BF16/config.json")
[ -n "$ATTENTION" ] || "$SERVE_PY" - $HEAD_DIM > "$R/fa3-probe.txt" 2>&1 <<'PY'
import sys, torch
from sgl_kernel.flash_attn import flash_attn_varlen_func
d, hq, hk = (int(x) for x in sys.argv[1:4])
n = 16
q = torch.randn(n, hq, d, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(n, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
cu = torch.tensor([0, n], dtype=torch.int32, device="cuda")
out = flash_attn_varlen_func(q, k, v, cu, cu, n, n, causal=True)
torch.cuda.synchronize()
print(f"fa3 ran head_dim {d} bf16: {tuple((out[0] if isinstance(out, tuple) else out).shape)}")
PY
probe_rc=$?
if [ -n "$ATTENTION" ]; then
  :
elif [ "$probe_rc" = 0 ]; then
  echo "attention: sglang's default (fa3 on H200): $(tail -1 "$R/fa3-probe.txt")" >> "$R/notes.txt"
else
  EXTRA="$EXTRA"', "--attention-backend", "flashinfer"'; write_recipe "$EXTRA"
  echo "attention: --attention-backend flashinfer: this wheel's FA3 does not run this model's attention" \
       "($(tail -1 "$R/fa3-probe.txt" | cut -c1-300)), so sglang's H200 default fa3 would fail at its first" \
       "call; flashinfer is sglang's default where fa3 is not picked" >> "$R/notes.txt"
  bk --json serve "$WHEEL" --recipe "$OVR" > "$R/dry-run.json" 2> "$R/dry-run.err"; step "dry-run (flashinfer) rc=$?"
fi

# 4. Each variant: one start for smoke, the 64-prompt check, the bench, the op report.
serve_variant() {  # $1: bf16|fp8, $2: the model folder, $3: token_agreement's extra flags
  local v=$1 d=$R/$1
  mkdir -p "$d"
  local check="$(command -v python3) $REPO/bench/serving/token_agreement.py --model $BF16 --url {url} --prompts 64 --max-new-tokens 32"
  check="$check --top-k 5 --device cuda --dtype bfloat16 --out $d/agreement.json $3"
  # Greedy requests never sample (sglang takes an argmax): a few sampled ones make the sampling kernels run.
  local sampled="$(command -v python3) $REPO/bench/serving/sampled_requests.py --url {url} --requests 8"
  local checks=(--check "$check" --check "$sampled")
  [ "$CHECKS" = 1 ] || checks=()
  local mode=(--bench)
  [ "$SMOKE_ONLY" = 1 ] && { mode=(--launch --smoke-only); checks=(); }
  # SIGINT, not SIGTERM, at the limit: build-kernel then stops the server's whole process group itself.
  start() {  # $1: the model folder
    timeout -s INT "${START_TIMEOUT_S:-900}" python3 -m build_kernel --json serve "$WHEEL" --recipe "$OVR" --model "$1" "${mode[@]}" \
      "${checks[@]}" > "$d/bench.json" 2> "$d/bench.err"
  }
  start "$2"
  local rc=$?
  # A start that died with the server's own advice (sglang: "To work around this error, add
  # --disable-piecewise-cuda-graph to your launch command", H200 2026-12-03: its experimental default failed in
  # cuBLAS) is tried once more with that flag, and the notes say so: the first error stays in bench-first.err.
  local flag
  flag=$(grep -o -m1 -E "add --[a-z0-9-]+ to your launch command" "$d/bench.err" | cut -d' ' -f2)
  if [ "$RETRY" = 1 ] && [ "$rc" != 0 ] && [ -n "$flag" ] && [[ "$EXTRA" != *"$flag"* ]]; then
    mv "$d/bench.err" "$d/bench-first.err"
    echo "$v: $flag, sglang's own advice after its default start failed: $(grep -m1 '^error' "$d/bench-first.err" | cut -c1-300)" >> "$R/notes.txt"
    EXTRA="$EXTRA, \"$flag\""; write_recipe "$EXTRA"
    start "$2"
    rc=$?
  fi
  cp "$WHEEL.serve-bench.json" "$d/serve-bench.json" 2>/dev/null
  cp -r "$BUILD_KERNEL_CACHE_DIR/serve/ops/moe-serve" "$d/ops" 2>/dev/null
  cp "$BUILD_KERNEL_CACHE_DIR/logs/serve-moe-serve.log" "$R/server.log" 2>/dev/null  # both variants, appended
  step "serve $v rc=$rc"
}
for v in $VARIANTS; do
  if [ "$v" != "${VARIANTS%% *}" ] && [ $(( $(date +%s) - t0 )) -ge $(( BUDGET_S - 200 )) ]; then
    step "$v skipped: $(( $(date +%s) - t0 )) s spent of BUDGET_S=$BUDGET_S (run again with VARIANTS=$v)"; continue
  fi
  case $v in bf16) serve_variant bf16 "$BF16" "" ;; fp8) serve_variant fp8 "$FP8" "--served-fp8" ;; esac
done
step "done"
