#!/usr/bin/env bash
# Issues 53 and 55 on the GPU host (one H200/H100, sm_90a, torch 2.11+cu130, no network) in one hold, run detached:
#  - issue 55: the 0.4.3 wheel (nightly-0.4 as shipped, 9.0a, built on the 2-core box against the host's torch)
#    judged by its own tests, served with the sglang of its commit, and sglang's NVFP4 JIT modules prewarmed for
#    12.0a and verified;
#  - issue 53 item 4: the shipped nightly-cu130 built for 9.0a with host lines only (.device/h9s.toml), then
#    `build-kernel test` against that wheel.
#
# Parts: SHIPPED (issue 53: the build and its tests), PREWARM (the 12.0a prewarm), T43 (0.4.3's tests), SERVE
# (0.4.3 served), each 1 (default) or 0: one hold or two, as the carries and the 0.4.3 wheel allow. The calls, each
# made as soon as the one before returns (a machine stays warm 30 s after a call):
#   1. carry .device/{gitenv.sh,triton-src,h43.toml,wht43} and, for SHIPPED, .device/{h9s.toml,mirrors,wh} (its
#      tests install from wh: h9s.toml's [test] requires), for T43 and SERVE .device/{mirrors43,test-wheel43}:
#      SHIPPED=.. PREWARM=.. T43=.. SERVE=.. setsid nohup bash bench/gpu_issues53_55.sh > /tmp/i55.log 2>&1 < /dev/null &
#   2. carry .device/wh43 (the serve wheelhouse, for PREWARM, SERVE and T43's requires: it and the first carry do
#      not fit one call's 64 MiB), made with nothing in between (a call that finds the machine cold, `warm: false`,
#      finds nothing of the first): IN=1 bash bench/gpu_issues53_55.sh; sleep 540; COLLECT=1 bash bench/gpu_issues53_55.sh
#   3. and on, until steps.txt says done: sleep 570; COLLECT=1 bash bench/gpu_issues53_55.sh
#
# Steps, each packed as it ends (a machine taken back loses only the step it was in):
#  1. at once, side by side (no timing is taken from this hold: the builds' figures are the earlier runs'):
#     - 0.4.3's tests (bench/gpu_shipped_tests.sh: upstream's tests at 0753182b, sglang of the commit from
#       .device/wht43; cache /tmp/bkc43 with 0753182b's mirrors);
#     - the shipped 9.0a build once the second carry is here (cache /tmp/bkc with 6ffc74ef's mirrors), verify;
#     - the tiny MoE's checkpoints (bench/tiny_moe.py, GPU, seconds); the serve environment (the serve stage's own
#       environment.create over the host's torch, the carried wheels --no-deps: sglang's whole requirement list
#       does not fit a carry); an import check of sglang's server; `build-kernel jit-prewarm --arch 12.0a` in it
#       (nvcc compiles sm_120a here; verify reads the SASS);
#  2. the shipped wheel's tests (bench/gpu_shipped_tests.sh with its defaults);
#  3. the tiny MoE in bf16 from the 0.4.3 wheel through `build-kernel serve --bench` (bench/gpu_h200_moe_serve.sh:
#     unit, health, smoke, the 64-prompt logprob-close check against transformers, sampled requests, C=1 and
#     C=32, the op report).
# Raw output: $OUT/i55-raw.tar.gz (host, serve environment, imports, prewarm, the shipped build and verify,
# steps), $OUT/t43-raw.tar.gz and $OUT/st-raw.tar.gz (the tests), $OUT/moe-serve-raw-t43.tar.gz (the serve).
# Environment: OUT (/tmp/i55-out), DEADLINE_S (1380: seconds from the start; then everything is packed and the run
# stopped), IN_WAIT_S (300), TEST_ARGS (--parallel 8).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/i55-out}
R=/tmp/i55-raw MOE_OUT=/tmp/i55-moe IND=/tmp/i55-in
if [ "${IN:-0}" = 1 ] || [ "${IN_FROM:-}" ]; then  # the second carry: copied where the detached run looks for it
  rm -rf $IND.part && mkdir -p $IND.part && cp -r "${IN_FROM:-.device}"/wh43 $IND.part/ && mv $IND.part $IND \
    && ls $IND/*; exit $?
fi
if [ "${COLLECT:-0}" = 1 ]; then
  mkdir -p "$OUT"
  [ -d $R ] && tar -czf "$OUT/i55-raw.tar.gz" -C $R .
  cp $MOE_OUT/*.tar.gz /tmp/t43-out/*.tar.gz /tmp/st-out/*.tar.gz "$OUT/" 2>/dev/null
  cat $R/steps.txt 2>/dev/null; tail -2 /tmp/moe-serve-raw/steps.txt 2>/dev/null; exit 0
fi
# shellcheck source=bench/gpu_host_lib.sh
source "$REPO/bench/gpu_host_lib.sh"
run_from_copy /tmp/i55-repo bench/gpu_issues53_55.sh
echo $$ > /tmp/i55.pid  # the run's process group (setsid): `kill -- -$(cat /tmp/i55.pid)` stops all of it
rm -rf $R $MOE_OUT /tmp/t43-out /tmp/st-out; mkdir -p $R $MOE_OUT
cp /tmp/i55-repo/HEAD.txt $R/
[ -d .device/wh43 ] && IN_FROM=.device bash "$0" > /dev/null  # where it fitted this carry
SHIPPED=${SHIPPED:-1} PREWARM=${PREWARM:-1} T43=${T43:-1} SERVE=${SERVE:-1}
echo "parts: SHIPPED=$SHIPPED PREWARM=$PREWARM T43=$T43 SERVE=$SERVE" > $R/parts.txt
t0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-1380}
left() { echo $(( DEADLINE_S - ($(date +%s) - t0) )); }
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $R/steps.txt; COLLECT=1 OUT=$OUT bash "$0" > /dev/null; }
wait_in() { local w=0; while [ ! -d $IND ] && [ $w -lt "${IN_WAIT_S:-300}" ]; do sleep 5; w=$((w + 5)); done
  [ -d $IND ]; }
host_record $R/host.txt
export BUILD_KERNEL_CACHE_DIR=/tmp/bkc43
tool_setup $R/bk-site.log .device/wht43 "$( [ -d .device/mirrors43 ] && echo .device/mirrors43 || echo .device/mirrors)"
MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
WHEEL=$(ls .device/test-wheel43/*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] && { sha256sum "$WHEEL" > $R/wheel.sha256; ls -l "$WHEEL" >> $R/wheel.sha256; }
# The recipe as served: the shipped one for 9.0a (its own arch is 12.0a).
mkdir -p /tmp/i55-recipes
printf 'extends = "%s"\ndescription = "h43 for 9.0a"\n\n[build]\narch = ["9.0a"]\n' "$REPO/.device/h43.toml" \
  > /tmp/i55-recipes/h43-9.toml
step "setup"
( sleep "$DEADLINE_S"; [ -f $R/done ] && exit 0
  echo "$DEADLINE_S s: DEADLINE_S reached: stopping the run" >> $R/steps.txt
  mkdir -p $R/at-deadline; cp -r /tmp/moe-serve-raw/. $R/at-deadline/ 2>/dev/null
  cp /tmp/bkc43/logs/serve-moe-serve.log $R/at-deadline/server.log 2>/dev/null
  COLLECT=1 OUT=$OUT bash "$0" > /dev/null; kill -INT -- -$$; sleep 8; kill -- -$$ ) &

# 1a. The serve side: checkpoints, the serve environment, the imports, the 12.0a prewarm.
[ "$PREWARM$SERVE" != 00 ] && ( [ "$SERVE" = 1 ] && { python3 bench/tiny_moe.py /tmp/moe-cache --device cuda > $R/moe.json 2> $R/moe.err; echo "moe rc=$?" >> $R/side.txt; }
  wait_in; echo "second carry: $(ls $IND/wh43 2>/dev/null | wc -l) serve wheels" >> $R/side.txt
  python3 - > $R/env.log 2>&1 <<'PY'
import os
from pathlib import Path
from build_kernel.stages.serve import environment
print(environment.create(Path("/tmp/sgenv"), "/opt/torch/.venv/bin/python3", dict(os.environ)))
PY
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    $(ls $IND/wh43/*.whl | grep -v -i -E '/(gitpython|gitdb|smmap|unidiff|pyelftools)-') .device/wht43/sglang-*.whl \
    .device/wht43/einops-*.whl .device/wht43/transformers-*.whl .device/wht43/tokenizers-*.whl $WHEEL >> $R/env.log 2>&1
  echo "env rc=$?" >> $R/side.txt
  /tmp/sgenv/bin/python -m pip list > $R/sgenv-list.txt 2>&1
  if [ -n "$WHEEL" ]; then
    timeout 300 /tmp/sgenv/bin/python -c 'import sgl_kernel, flashinfer, sglang.srt.entrypoints.http_server, sglang.bench_serving; print("imports ok", sgl_kernel.__file__)' \
      > $R/imports.txt 2>&1; echo "imports rc=$?" >> $R/side.txt
  fi
  if [ "$PREWARM" = 1 ]; then
    timeout 420 python3 -m build_kernel --offline --json jit-prewarm --recipe .device/h43.toml --arch 12.0a \
      --python /tmp/sgenv/bin/python > $R/prewarm.json 2> $R/prewarm.err
    echo "prewarm 12.0a rc=$?" >> $R/side.txt
  fi ) &
SIDE_PID=$!

# 1b. The shipped recipe for 9.0a (issue 53), in its own cache with 6ffc74ef's mirrors.
SHIPPED_ARGS=(--recipe .device/h9s.toml --arch 9.0a)
[ "$SHIPPED" = 1 ] && ( export BUILD_KERNEL_CACHE_DIR=/tmp/bkc BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw
  mkdir -p /tmp/bkc && rm -rf /tmp/bkc/mirrors && cp -r .device/mirrors /tmp/bkc/mirrors
  mkdir -p $R/st  # build.json and verify.json, as bench/h200_upstream_tests.py pack --build reads them
  python3 -m build_kernel --offline --json build "${SHIPPED_ARGS[@]}" > $R/st/build.json 2> $R/st/build.err
  echo "shipped build rc=$?" >> $R/side.txt
  cp "$(ls -t /tmp/bkc/build/*/cmake/.ninja_log 2>/dev/null | head -1)" $R/st/ninja_log.txt 2>/dev/null
  python3 -m build_kernel --offline --json verify "${SHIPPED_ARGS[@]}" > $R/st/verify.json 2> $R/st/verify.err
  echo "shipped verify rc=$?" >> $R/side.txt
  mkdir -p /tmp/st-wheel && cp "$(ls -t /tmp/bkw/*.whl | head -1)" /tmp/st-wheel/ ) &
SHIPPED_PID=$!

# 1c. 0.4.3's tests (their own environment: the wheel, sglang of the commit, the [test] requires, offline).
if [ "$T43" = 1 ]; then
  # h43.toml's [test] requires name the wheels of wht43 and wh43 (make_device_folder.sh): one folder of both.
  wait_in; rm -rf /tmp/wht43-all && mkdir -p /tmp/wht43-all && cp -n .device/wht43/*.whl $IND/wh43/*.whl /tmp/wht43-all/
  OUT=/tmp/t43-out WHEEL_DIR=.device/test-wheel43 TEST_RECIPE=.device/h43.toml WHEELHOUSE=/tmp/wht43-all LABEL=t43 \
    MIRRORS_DIR=.device/mirrors43 BUILD_KERNEL_CACHE_DIR=/tmp/bkc43 TEST_ARGS="${TEST_ARGS:---parallel 8}" \
    TEST_TIMEOUT_S=540 bash bench/gpu_shipped_tests.sh > $R/tests43.log 2>&1
  step "tests 0.4.3 rc=$?: $(tail -1 /tmp/t43-raw/steps.txt 2>/dev/null)"
fi
wait $SHIPPED_PID; step "shipped build: $(grep shipped $R/side.txt | tr '\n' ' ')"

# 2. The shipped wheel's tests (issue 53 item 4).
if [ "$SHIPPED" = 0 ]; then
  :
elif [ -n "$(ls /tmp/st-wheel/*.whl 2>/dev/null)" ] && [ "$(left)" -ge 300 ]; then
  OUT=/tmp/st-out WHEEL_DIR=/tmp/st-wheel WHEELHOUSE=.device/wh MIRRORS_DIR=.device/mirrors BUILD_KERNEL_CACHE_DIR=/tmp/bkc \
    TEST_ARGS="${TEST_ARGS:---parallel 8}" TEST_TIMEOUT_S=$(( $(left) - 240 )) bash bench/gpu_shipped_tests.sh > $R/tests-st.log 2>&1
  step "tests shipped rc=$?: $(tail -1 /tmp/st-raw/steps.txt 2>/dev/null)"
else
  step "tests shipped skipped: wheel '$(ls /tmp/st-wheel 2>/dev/null)', $(left) s left of DEADLINE_S=$DEADLINE_S"
fi
wait $SIDE_PID; step "side: $(tr '\n' ' ' < $R/side.txt 2>/dev/null)"

# 3. The serve. This wheel's FA3 has head dim 256 only (the recipe's model): the script's FA3 probe of the tiny
# MoE's head dim 64 then asks for flashinfer attention, and its notes say why.
if [ "$SERVE" = 0 ] || [ -z "$WHEEL" ]; then
  step "serve not asked (SERVE=$SERVE, wheel '$WHEEL')"
elif [ "$(left)" -ge 200 ]; then
  env BUILD_KERNEL_CACHE_DIR=/tmp/bkc43 INSTALL=0 SERVE_PYTHON=/tmp/sgenv/bin/python RECIPE=/tmp/i55-recipes/h43-9.toml \
    WHEELHOUSE=$IND/wh43 WHEEL="$WHEEL" START_TIMEOUT_S=$(( $(left) - 30 )) MOE_CACHE=/tmp/moe-cache OUT=$MOE_OUT \
    BUDGET_S=$(left) VARIANTS=bf16 TAG=t43 BASE_ARGS=', "--cuda-graph-max-bs", "32"' \
    BASE_WHY="decode CUDA graphs captured up to the bench's highest concurrency (32), as in the issue 54 run" \
    bash bench/gpu_h200_moe_serve.sh > $R/serve.log 2>&1
  step "serve rc=$?"
else
  step "serve skipped: $(left) s left of DEADLINE_S=$DEADLINE_S"
fi
touch $R/done; step "done"
