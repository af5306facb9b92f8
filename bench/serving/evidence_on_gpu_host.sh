#!/usr/bin/env bash
# What the served model proves (issue 70 items 2, 3, 7), one detached run on the GPU host, offline, with the device
# folder carried (.device, bench/gpu_host/README.md) and the tiny MoE trained on this repository's side
# (bench/serving/tiny_moe.py, on Python's docstrings; its bf16 folder carried as .device/moe70/bf16):
#
#   1. the wheel: WHEEL, or the newest in $BUILD_KERNEL_OUTPUT_DIR (/tmp/bkw), else the tool builds RECIPE's
#      (.device/h9nofa.toml, FA3 off: ~380 s on a 16-core H100 host; .device/h9.toml keeps FA3 for head dim 64, so
#      sgl_kernel::fwd can run: longer);
#   2. the serve environment (gpu_host_lib.sh's serve_env, the wheel installed --no-deps) and the FP8 copy, made
#      here from the carried bf16 folder (tiny_moe.py --fp8-from: the same quantisation; both sha256s recorded);
#   3. bf16: `serve --launch --smoke-only` with the op report (only sgl_kernel:: ops registered by the wheel's own
#      libraries count: build_kernel/stages/serve/ops.py) and two checks: logprob-close on the 64 distinct held-out
#      prompts (token_agreement.py, vLLM's rule, every prompt must pass) and 8 sampled requests (sampling kernels);
#   4. FP8, the same, routed to the wheel's kernels instead of DeepGEMM's JIT: SGLANG_ENABLE_JIT_DEEPGEMM=0 (sglang's
#      environ.py; auto dispatch then skips deep_gemm) and --fp8-gemm-backend cutlass (fp8_utils.py: the dense FP8
#      linears call sgl_kernel's fp8_blockwise_scaled_mm), plus --moe-runner-backend cutlass (fp8.py: the experts go
#      through sgl_kernel's fp8_blockwise_scaled_grouped_mm); a start that dies with the MoE runner is tried once
#      without it (the first error kept). Its logprob-close tolerance is the measured one (--min-pass from
#      results/tiny_moe_model.json's fp8_tolerance: FP8's weights alone, dequantised, in transformers);
#   5. the piecewise CUDA-graph start with the recipe's fix: the same bf16 weights with a 4,096-token context
#      (shorter than sglang's largest piecewise capture), --enable-piecewise-cuda-graph, and whatever serve adds
#      for it (the dry run's `added`: --piecewise-cuda-graph-max-tokens 4096), smoke only.
#   Optional STEPS, each a start of its own with the same checks, to isolate an FP8 failure (the first H100 run,
#   raw/h100-2026-12-07-evidence: the cutlass path above gave 0/64): `fp8jit`, the FP8 copy with sglang's defaults
#   (DeepGEMM's JIT, which passed in earlier runs); `fp8dense`, SGLANG_ENABLE_JIT_DEEPGEMM=0 and
#   --fp8-gemm-backend cutlass only (the MoE runner left to sglang's default). token_agreement.py runs with
#   --fail-not-close: a failed logprob-close verdict fails the check, so the start's rc is non-zero.
# Everything lands in $OUT/evidence-raw.tar.gz, packed again after each step (a cut-off run keeps what it did).
#
#   setsid bash bench/serving/evidence_on_gpu_host.sh > /tmp/evidence.log 2>&1 < /dev/null &   # the first call
#   cp /tmp/evidence-out/evidence-raw.tar.gz /tmp/evidence.log "$OUT"/; cat /tmp/evidence-raw/steps.txt   # later
#
# Environment: WHEEL, RECIPE (.device/h9nofa.toml), MOE (.device/moe70: its bf16/ folder), SERVE_PYTHON, STEPS
# ("bf16 fp8 pcg"; also fp8jit, fp8dense), OUT (/tmp/evidence-out), START_TIMEOUT_S (600 per start), ATTENTION
# (default: fa3 where the wheel's FA3 runs this model's head dim, else flashinfer). Dry run off the GPU host (no sglang: the recipes, the
# FP8 copy and each start's command, and serve's own dry run, whose flag check needs sglang and says so):
# PATH=$PWD/.venv/bin:$PATH DRY=1 WHEEL=any.whl SERVE_PYTHON=$PWD/.venv/bin/python OUT=/tmp/x RAW=/tmp/y \
#   bash bench/serving/evidence_on_gpu_host.sh      (tiny_moe.py's --fp8-from needs torch and safetensors there)
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/evidence-out}
RECIPE=$(realpath "${RECIPE:-.device/h9nofa.toml}")
MOE=$(realpath "${MOE:-.device/moe70}")
STEPS=${STEPS:-bf16 fp8 pcg}
DRY=${DRY:-0}
export BUILD_KERNEL_OUTPUT_DIR=${BUILD_KERNEL_OUTPUT_DIR:-/tmp/bkw} BUILD_KERNEL_CACHE_DIR=${BUILD_KERNEL_CACHE_DIR:-/tmp/bkc}
# shellcheck source=../gpu_host/gpu_host_lib.sh
source bench/gpu_host/gpu_host_lib.sh
[ "$DRY" = 1 ] || run_from_copy /tmp/evidence-repo bench/serving/evidence_on_gpu_host.sh
R=${RAW:-/tmp/evidence-raw}; rm -rf "$R"; mkdir -p "$R" "$OUT"
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> "$R/steps.txt"; tar -czf "$OUT/evidence-raw.tar.gz" -C "$R" .; }
[ "$DRY" = 1 ] && echo "dry run (DRY=1): recipe and commands only, nothing started" > "$R/host.txt" || host_record "$R/host.txt"
cat "$REPO/HEAD.txt" >> "$R/host.txt" 2>/dev/null
[ -f "$MOE/bf16/model.safetensors" ] || { step "no tiny MoE at $MOE/bf16 (carry .device/moe70: bench/serving/README.md)"; exit 1; }
[ -f .device/gitenv.sh ] && [ "$DRY" != 1 ] && MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh

# 1. The wheel.
WHEEL=${WHEEL:-$(ls -t "$BUILD_KERNEL_OUTPUT_DIR"/*.whl 2>/dev/null | head -1)}
[ "$DRY" = 1 ] || tool_setup "$R/tool.log"
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
if [ -z "$WHEEL" ]; then
  python3 -m build_kernel --offline --json build --recipe "$RECIPE" > "$R/build.json" 2> "$R/build.err"
  step "build $(basename "$RECIPE") rc=$?"
  WHEEL=$(ls -t "$BUILD_KERNEL_OUTPUT_DIR"/*.whl 2>/dev/null | head -1)
fi
[ -n "$WHEEL" ] || { step "no kernel wheel (WHEEL, one in $BUILD_KERNEL_OUTPUT_DIR, or a build): see build.err"; exit 1; }
echo "wheel: $WHEEL $(sha256sum "$WHEEL" 2>/dev/null | cut -d' ' -f1)" >> "$R/host.txt"
# serve refuses a wheel without a passing verify record for its bytes (`build` alone writes none): verify it here,
# with the import check and the GPU's, as `make wheel` would.
if [ "$DRY" != 1 ]; then
  python3 -m build_kernel --offline --json verify "$WHEEL" --recipe "$RECIPE" > "$R/verify.json" 2> "$R/verify.err"
  step "verify rc=$?"
fi

# 2. The serve environment and the FP8 copy.
SERVE_PYTHON=${SERVE_PYTHON:-}
if [ -z "$SERVE_PYTHON" ]; then
  [ -x /tmp/sgenv/bin/python ] || serve_env "$R/env.log" .device/wh
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --force-reinstall --no-compile "$WHEEL" >> "$R/env.log" 2>&1
  SERVE_PYTHON=/tmp/sgenv/bin/python
fi
"$SERVE_PYTHON" -c 'import sglang, sgl_kernel; print("sglang", sglang.__version__, "sgl_kernel", sgl_kernel.__file__)' \
  >> "$R/host.txt" 2>&1; step "serve environment $SERVE_PYTHON rc=$?"
BF16=$MOE/bf16 FP8=/tmp/evidence-fp8
"$SERVE_PYTHON" bench/serving/tiny_moe.py "$FP8" --fp8-from "$BF16" > "$R/fp8.log" 2>&1; fp8_rc=$?
sha256sum "$BF16/model.safetensors" "$FP8/model.safetensors" > "$R/checkpoints.sha256" 2>&1
cp "$BF16/config.json" "$R/config-bf16.json"; cp "$MOE/training.json" "$R/training.json" 2>/dev/null
step "fp8 copy rc=$fp8_rc"
MIN_PASS=$(python3 -c 'import json; print(json.load(open("bench/serving/results/tiny_moe_model.json"))["fp8_tolerance"]["min_pass_fraction"])' 2>/dev/null || echo 0.9)
echo "fp8 tolerance: --min-pass $MIN_PASS (results/tiny_moe_model.json fp8_tolerance; 0.9 only where it is absent)" >> "$R/notes.txt"

# The attention backend: sglang's H100 default is fa3; a wheel without FA3 for head dim 64 fails at its first call.
ATTENTION=${ATTENTION:-}
[ "$DRY" = 1 ] && ATTENTION=${ATTENTION:-flashinfer}
if [ -z "$ATTENTION" ]; then
  "$SERVE_PYTHON" - 64 4 2 > "$R/fa3-probe.txt" 2>&1 <<'PY'
import sys, torch
from sgl_kernel.flash_attn import flash_attn_varlen_func
d, hq, hk = (int(x) for x in sys.argv[1:4])
q = torch.randn(16, hq, d, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(16, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
cu = torch.tensor([0, 16], dtype=torch.int32, device="cuda")
flash_attn_varlen_func(q, k, v, cu, cu, 16, 16, causal=True); torch.cuda.synchronize(); print("fa3 ran head_dim 64")
PY
  if [ $? = 0 ]; then ATTENTION=fa3; else ATTENTION=flashinfer; fi
  echo "attention: $ATTENTION ($(tail -1 "$R/fa3-probe.txt" | cut -c1-200)); with flashinfer sgl_kernel::fwd cannot run" >> "$R/notes.txt"
fi

write_recipe() {  # $1: the name, $2: the model, $3: serve args beyond the defaults (TOML list items), $4: env lines
  mkdir -p "$R/recipes"
  cat > "$R/recipes/$1.toml" <<EOF
extends = "$RECIPE"
description = "issue 70: the tiny MoE trained on docstrings, $1"

[serve]
model = "$2"
python = "$SERVE_PYTHON"
args = ["--tp-size", "1", "--attention-backend", "$ATTENTION", "--mem-fraction-static", "0.5"$3]
host = "127.0.0.1"
api_key_file = ""
port = 30000
health_timeout_s = 600

[serve.env]
SGLANG_JIT_DEEPGEMM_PRECOMPILE = "false"
$4
EOF
}
start() {  # $1: name, $2: model, $3: args, $4: env lines, $5: token_agreement's extra flags, $6: checks (1/0)
  local d=$R/$1; mkdir -p "$d"; write_recipe "$1" "$2" "$3" "$4"
  python3 -m build_kernel --json serve "$WHEEL" --recipe "$R/recipes/$1.toml" > "$d/dry-run.json" 2> "$d/dry-run.err"
  local checks=()
  if [ "$6" = 1 ]; then
    checks=(--check "$(command -v python3) $REPO/bench/serving/token_agreement.py --model $BF16 --url {url} --prompts 64 --max-new-tokens 32 --top-k 5 --device cuda --dtype bfloat16 --fail-not-close --out $d/agreement.json $5"
            --check "$(command -v python3) $REPO/bench/serving/sampled_requests.py --url {url} --requests 8")
  fi
  if [ "$DRY" = 1 ]; then printf '%q ' python3 -m build_kernel --json serve "$WHEEL" --recipe "$R/recipes/$1.toml" --launch --smoke-only "${checks[@]}" > "$d/command.txt"; step "$1 dry run: $(cat "$d/dry-run.err" | tail -1 | cut -c1-200)"; return 0; fi
  # SIGINT at the limit: build-kernel then stops the server's whole process group itself.
  timeout -s INT "${START_TIMEOUT_S:-600}" python3 -m build_kernel --json serve "$WHEEL" --recipe "$R/recipes/$1.toml" \
    --launch --smoke-only "${checks[@]}" > "$d/serve.json" 2> "$d/serve.err"
  local rc=$?
  cp -r "$BUILD_KERNEL_CACHE_DIR/serve/ops/$1" "$d/ops" 2>/dev/null
  cp "$BUILD_KERNEL_CACHE_DIR/logs/serve-$1.log" "$d/server.log" 2>/dev/null
  step "$1 rc=$rc"
  return $rc
}

for s in $STEPS; do
  case $s in
    bf16) start bf16 "$BF16" "" "" "" 1 ;;
    fp8)
      ROUTE='SGLANG_ENABLE_JIT_DEEPGEMM = "0"'
      # Tried again only when the start died, not when it served and a check failed (serve's error then names
      # "the check": --fail-not-close makes a failed verdict one).
      if ! start fp8 "$FP8" ', "--fp8-gemm-backend", "cutlass", "--moe-runner-backend", "cutlass"' "$ROUTE" "--served-fp8 --min-pass $MIN_PASS" 1 \
          && [ "$DRY" != 1 ] && ! grep -q '^error: the check' "$R/fp8/serve.err"; then
        mv "$R/fp8" "$R/fp8-moe-cutlass"
        echo "fp8: the start with --moe-runner-backend cutlass failed ($(grep -m1 '^error' "$R/fp8-moe-cutlass/serve.err" | cut -c1-300)); tried again without it" >> "$R/notes.txt"
        start fp8 "$FP8" ', "--fp8-gemm-backend", "cutlass"' "$ROUTE" "--served-fp8 --min-pass $MIN_PASS" 1
      fi ;;
    fp8jit)  # the FP8 copy with sglang's defaults: DeepGEMM's JIT for the dense and MoE FP8 GEMMs
      start fp8jit "$FP8" "" "" "--served-fp8 --min-pass $MIN_PASS" 1 ;;
    fp8dense)  # the dense FP8 linears through the wheel's cutlass kernel only; the MoE runner left to sglang
      start fp8dense "$FP8" ', "--fp8-gemm-backend", "cutlass"' 'SGLANG_ENABLE_JIT_DEEPGEMM = "0"' \
        "--served-fp8 --min-pass $MIN_PASS" 1 ;;
    pcg)
      P=/tmp/evidence-ctx4096; rm -rf "$P"; cp -r "$BF16" "$P"
      python3 - "$P/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 4096; json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
      start pcg "$P" ', "--enable-piecewise-cuda-graph"' "" "" 0 ;;
  esac
done
step "done"
