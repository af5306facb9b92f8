#!/usr/bin/env bash
# The throughput pair and upstream's tests (issue 54 item 5, issue 53 item 4) on the GPU host (one H100/H200, sm_90a, torch 2.11+cu130, no network) in one
# hold, run detached:
#
#   setsid bash bench/gpu_host/pair_and_tests.sh > /tmp/pt.log 2>&1 < /dev/null &   # the whole run
#   REF_IN=.device/ref/ref.tar bash bench/gpu_host/pair_and_tests.sh                  # a later call: the reference arrives
#   COLLECT=1 bash bench/gpu_host/pair_and_tests.sh                                   # pack what there is into $OUT
#
# The reference wheel may come by a second call: the whole carry (.device's wheelhouse and mirrors, ~49 MB) and
# that wheel do not fit one call's 64 MiB. The run waits for it (REF_WAIT_S) before the pair, not before the build.
# The calls, each made as soon as the one before returns (a machine stays warm 30 s after a call):
#   1. carry .device/wh .device/mirrors .device/triton-src .device/gitenv.sh .device/h9s.toml .device/h9u.toml:
#      DEADLINE_S=1500 setsid nohup bash bench/gpu_host/pair_and_tests.sh > /tmp/pt.log 2>&1 < /dev/null &
#   2. carry .device/ref (ref.tar: the reference wheel, bench/arch_builds/results/pair-reference-build.json):
#      REF_IN=.device/ref/ref.tar bash bench/gpu_host/pair_and_tests.sh; sleep 540; COLLECT=1 bash bench/gpu_host/pair_and_tests.sh
#   3. and on, until steps.txt says done: sleep 570; COLLECT=1 bash bench/gpu_host/pair_and_tests.sh
#
# Steps, each packed as it ends (a machine taken back loses only the step it was in):
#  1. the shipped recipe for 9.0a with host lines only (.device/h9s.toml): build and verify, by the tool, offline
#     from the carried partial mirrors; beside it the tiny MoE is trained on the GPU (bench/serving/tiny_moe.py) and the
#     serve environment is made (the serve stage's own environment.create, the carried wheels --no-deps);
#  2. the throughput pair (issue 54 item 5): the tiny MoE in bf16, one attention backend for both wheels
#     (flashinfer: the reference has no FA3), no checks, C=1 and C=32, through bench/serving/moe_serve_on_gpu_host.sh:
#     ours (the step-1 wheel), the reference (v7-unpruned, built on the 2-core box with the host's torch), ours
#     again (the order's drift: the first start also fills flashinfer's JIT cache);
#  3. `build-kernel test` against the step-1 wheel (issue 53 item 4), upstream's own tests at the pinned commit.
# Raw output: $OUT/pt-raw.tar.gz (host, build, verify, test and its logs, steps) and $OUT/moe-serve-raw-<tag>.tar.gz.
# Environment: OUT (/tmp/pt-out), DEADLINE_S (1380: seconds from the start; then everything is packed and the
# run stopped), REF_WAIT_S (600).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/pt-out}
R=/tmp/pt-raw MOE_OUT=/tmp/pt-moe REF=/tmp/pt-ref
if [ -n "${REF_IN:-}" ]; then  # the reference wheel, carried by a later call
  mkdir -p $REF.part && tar -xf "$REF_IN" -C $REF.part && mv $REF.part $REF && ls -l $REF; exit $?
fi
if [ "${COLLECT:-0}" = 1 ]; then
  mkdir -p "$OUT"
  [ -d $R ] && tar -czf "$OUT/pt-raw.tar.gz" -C $R .
  cp $MOE_OUT/*.tar.gz "$OUT/" 2>/dev/null
  cat $R/steps.txt 2>/dev/null; exit 0
fi
# shellcheck source=bench/gpu_host/gpu_host_lib.sh
source "$REPO/bench/gpu_host/gpu_host_lib.sh"
run_from_copy /tmp/pt-repo bench/gpu_host/pair_and_tests.sh
echo $$ > /tmp/pt.pid  # the run's process group (setsid): `kill -- -$(cat /tmp/pt.pid)` stops all of it
rm -rf $R $MOE_OUT $REF; mkdir -p $R $MOE_OUT
# Where the reference fitted this call's carry, it is here already.
[ -f .device/ref/ref.tar ] && REF_IN=.device/ref/ref.tar bash "$0" > /dev/null
cp /tmp/pt-repo/HEAD.txt $R/
t0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-1380}
left() { echo $(( DEADLINE_S - ($(date +%s) - t0) )); }
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $R/steps.txt; COLLECT=1 OUT=$OUT bash "$0" > /dev/null; }
export BUILD_KERNEL_CACHE_DIR=/tmp/bkc BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw
host_record $R/host.txt

tool_setup $R/bk-site.log
MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
bk() { python3 -m build_kernel --offline --json "$@"; }
step "setup"
( sleep "$DEADLINE_S"; [ -f $R/done ] && exit 0
  echo "$DEADLINE_S s: DEADLINE_S reached: stopping the run" >> $R/steps.txt
  mkdir -p $R/at-deadline; cp -r /tmp/moe-serve-raw/. $R/at-deadline/ 2>/dev/null
  cp -r $BUILD_KERNEL_CACHE_DIR/tests/out $R/at-deadline/test-out 2>/dev/null
  COLLECT=1 OUT=$OUT bash "$0" > /dev/null; kill -INT -- -$$; sleep 8; kill -- -$$ ) &

# 1. Beside the build: the checkpoints (GPU, seconds) and the serve environment (CPU, a minute).
( python3 bench/serving/tiny_moe.py /tmp/moe-cache --device cuda > $R/moe.json 2> $R/moe.err; echo "moe rc=$?" >> $R/side.txt ) &
MOE_PID=$!
( serve_env $R/env.log; echo "env rc=$?" >> $R/side.txt ) &
ENV_PID=$!
SHIPPED=(--recipe .device/h9s.toml --arch 9.0a)
bk build "${SHIPPED[@]}" > $R/build.json 2> $R/build.err; step "build shipped 9.0a rc=$?"
log=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("log",""))' $R/build.json 2>/dev/null)
[ -n "$log" ] && cp "$log" $R/build.log
key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("key",""))' $R/build.json 2>/dev/null)
cp "$BUILD_KERNEL_CACHE_DIR/build/$key/cmake/.ninja_log" $R/ninja_log.txt 2>/dev/null
cp "$BUILD_KERNEL_CACHE_DIR/profile.sqlite" $R/ 2>/dev/null  # each compile's CPU s and peak (bench/arch_builds/builds_report.py)
bk verify "${SHIPPED[@]}" > $R/verify.json 2> $R/verify.err; step "verify rc=$?"
wait $MOE_PID $ENV_PID; step "side: $(tr '\n' ' ' < $R/side.txt)"
OURS=$(ls -t $BUILD_KERNEL_OUTPUT_DIR/*.whl 2>/dev/null | head -1)
[ -n "$OURS" ] || { step "no wheel"; touch $R/done; exit 1; }
sha256sum "$OURS" > $R/wheels.sha256; ls -l "$OURS" >> $R/wheels.sha256
# The shipped recipe with its arch for serving (the same as --arch 9.0a on the command line).
mkdir -p /tmp/pt-recipes
printf 'extends = "%s"\ndescription = "h9s for 9.0a"\n\n[build]\narch = ["9.0a"]\n' "$REPO/.device/h9s.toml" > /tmp/pt-recipes/h9s-9.toml

# 2. The pair. The reference arrives by a later call (REF_IN) where it did not fit this one's carry.
w=0; while [ ! -d $REF ] && [ $w -lt "${REF_WAIT_S:-600}" ]; do sleep 5; w=$((w + 5)); done
REF_WHEEL=$(ls $REF/*.whl 2>/dev/null | head -1)
step "reference: ${REF_WHEEL:-none after ${w} s}"
[ -n "$REF_WHEEL" ] && { sha256sum "$REF_WHEEL"; ls -l "$REF_WHEEL"; } >> $R/wheels.sha256
serve_one() {  # $1: tag, $2: wheel, $3: recipe
  if [ "$(left)" -lt 240 ]; then step "serve $1 skipped: $(left) s left of DEADLINE_S=$DEADLINE_S"; return; fi
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --force-reinstall --no-compile "$2" > $R/swap-$1.log 2>&1
  mv $BUILD_KERNEL_CACHE_DIR/logs/serve-moe-serve.log $R/server-before-$1.log 2>/dev/null
  env INSTALL=0 SERVE_PYTHON=/tmp/sgenv/bin/python RECIPE="$3" WHEELHOUSE=.device/wh WHEEL="$2" START_TIMEOUT_S=420 \
    MOE_CACHE=/tmp/moe-cache OUT=$MOE_OUT BUDGET_S=$(left) VARIANTS=bf16 ATTENTION=flashinfer CHECKS=0 TAG="$1" \
    BASE_ARGS=', "--cuda-graph-max-bs", "32"' \
    BASE_WHY="decode CUDA graphs captured up to the bench's highest concurrency (32), as in the issue 54 run" \
    bash bench/serving/moe_serve_on_gpu_host.sh > $R/serve-$1.log 2>&1
  step "serve $1 rc=$?"
}
serve_one ours "$OURS" /tmp/pt-recipes/h9s-9.toml
[ -n "$REF_WHEEL" ] && serve_one reference "$REF_WHEEL" .device/h9u.toml
[ -n "$REF_WHEEL" ] && serve_one ours-again "$OURS" /tmp/pt-recipes/h9s-9.toml

# 3. Upstream's tests against the shipped build, with what is left of the hold.
if [ "$(left)" -ge 200 ]; then
  # The tests make their own environment (the wheel, sglang of the commit, pytest) from the wheelhouse.
  step "test start"
  timeout $(( $(left) - 30 )) python3 -m build_kernel --offline --json test "$OURS" "${SHIPPED[@]}" --wheelhouse .device/wh \
    --timeout 420 > $R/test.json 2> $R/test.err
  step "test rc=$?"
  tar -czf $R/test-logs.tar.gz --exclude="env-*" --exclude=src -C $BUILD_KERNEL_CACHE_DIR/tests . 2>/dev/null
else
  step "test skipped: $(left) s left of DEADLINE_S=$DEADLINE_S"
fi
touch $R/done; step "done"
