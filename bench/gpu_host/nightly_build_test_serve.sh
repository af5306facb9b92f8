#!/usr/bin/env bash
# The shipped 9.0a build and its tests, nightly-0.4's builds, tests and serve, the JIT prewarm (issues 53, 55), on the GPU host (one H200/H100, sm_90a, torch 2.11+cu130, no network) in one hold, run detached:
#  - issue 53 item 4: the shipped nightly-cu130 built for 9.0a with host lines only (.device/h9s.toml), then
#    `build-kernel test` against that wheel;
#  - issue 55: nightly-0.4 as shipped (0.4.3, series v9) built by the tool on the host for 9.0a (bench/arch_builds/build_one.sh:
#    wall, compiler CPU s, jobs, peak, OOM kills, verify per library), judged by its own tests, served with the
#    sglang of its commit, and sglang's NVFP4 JIT modules prewarmed for 12.0a and verified by their SASS.
#
# Parts, each 1 (default) or 0: SHIPPED (issue 53's build and tests), B43 (0.4.3's build here; a wheel carried in
# .device/test-wheel43 is used instead where there is one), T43 (0.4.3's tests), SERVE (0.4.3 served), PREWARM (the
# 12.0a prewarm); and, 0 by default, PAIR12 (12.0a built from h43.toml and from h43u.toml, the unpruned reference,
# each cold and alone, last) and U9 (the reference for 9.0a), each only while DEADLINE_S leaves it time. The carries do not fit one call's 64 MiB: three calls, each made as soon as the one before returns
# (a machine stays warm 30 s after a call; one that answers `warm: false` has lost the run):
#   1. carry .device/{gitenv.sh,triton-src,h9s.toml,h43.toml,h43u.toml,mirrors,mirrors43,wht43} (and test-wheel43):
#      setsid nohup bash bench/gpu_host/nightly_build_test_serve.sh > /tmp/i55.log 2>&1 < /dev/null & sleep 15; cat /tmp/i55.log
#   2. carry .device/wh (the shipped tests' wheelhouse: h9s.toml's [test] requires):  IN=wh bash bench/gpu_host/nightly_build_test_serve.sh
#   3. carry .device/wh43 (0.4.3's serve wheelhouse; with wht43 its tests'):          IN=wh43 bash bench/gpu_host/nightly_build_test_serve.sh
#   4. and on, until steps.txt says done: sleep 570; COLLECT=1 bash bench/gpu_host/nightly_build_test_serve.sh
#
# Order (each step packed as it ends: a machine taken back loses only the step it was in):
#  1. the shipped 9.0a build alone (its wall is clean), with the tiny MoE's checkpoints (GPU, seconds) beside it;
#  2. 0.4.3's 9.0a build (cache /tmp/bkc43 with 0753182b's mirrors), with the shipped wheel's tests beside it for
#     their first ~150 s (GPU-bound: their CPU share is in the build's record as the host's load) and the serve
#     environment (the serve stage's own environment.create over the host's torch, the carried wheels --no-deps);
#  3. 0.4.3's tests, with `build-kernel jit-prewarm --arch 12.0a` beside them and the serve (nvcc compiles sm_120a;
#     verify reads the SASS);
#  4. the tiny MoE in bf16 from the 0.4.3 wheel through `build-kernel serve --bench` (bench/serving/moe_serve_on_gpu_host.sh);
#  5. the pairs (PAIR12, U9), as bench/arch_builds/build_one.sh packs, beside nothing.
# Raw output under $OUT: i55-raw.tar.gz (host, steps, the shipped build and verify, the serve environment, imports,
# prewarm), h43-sm90a-raw.tar.gz (0.4.3's build, as bench/arch_builds/builds_report.py reads it; the pairs' beside it), st-raw.tar.gz and
# t43-raw.tar.gz (the tests), moe-serve-raw-t43.tar.gz (the serve), w43.tar (the 0.4.3 wheel: $OUT refuses a '+').
# Environment: OUT (/tmp/i55-out), DEADLINE_S (1380: seconds from the start; then everything is packed and the run
# stopped), IN_WAIT_S (300), TEST_ARGS (--parallel 8).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/i55-out}
R=/tmp/i55-raw MOE_OUT=/tmp/i55-moe IND=/tmp/i55-in B43_OUT=/tmp/b43-out
if [ -n "${IN:-}" ]; then  # a later carry: copied where the detached run looks for it
  rm -rf "$IND/$IN.part" && mkdir -p "$IND" && cp -r ".device/$IN" "$IND/$IN.part" && mv "$IND/$IN.part" "$IND/$IN" \
    && echo "$IN: $(ls "$IND/$IN" | wc -l) files"; cat $R/steps.txt 2>/dev/null; exit 0
fi
if [ "${COLLECT:-0}" = 1 ]; then
  mkdir -p "$OUT"
  [ -d $R ] && tar -czf "$OUT/i55-raw.tar.gz" -C $R .
  cp $MOE_OUT/*.tar.gz /tmp/t43-out/*.tar.gz /tmp/st-out/*.tar.gz $B43_OUT/*.tar.gz "$OUT/" 2>/dev/null
  [ -n "$(ls /tmp/w43/*.whl 2>/dev/null)" ] && tar -cf "$OUT/w43.tar" -C /tmp/w43 .
  for d in /tmp/bkw-h43*; do  # the pairs' wheels, for `verify --prune-proof` elsewhere
    [ -n "$(ls "$d"/*.whl 2>/dev/null)" ] && tar -cf "$OUT/$(basename "$d").tar" -C "$d" $(cd "$d" && ls *.whl)
  done
  cat $R/steps.txt 2>/dev/null; tail -2 /tmp/moe-serve-raw/steps.txt 2>/dev/null; exit 0
fi
# shellcheck source=bench/gpu_host/gpu_host_lib.sh
source "$REPO/bench/gpu_host/gpu_host_lib.sh"
run_from_copy /tmp/i55-repo bench/gpu_host/nightly_build_test_serve.sh
echo $$ > /tmp/i55.pid  # the run's process group (setsid): `kill -- -$(cat /tmp/i55.pid)` stops all of it
rm -rf $R $MOE_OUT /tmp/t43-out /tmp/st-out $B43_OUT /tmp/w43 /tmp/st-wheel; mkdir -p $R $MOE_OUT /tmp/w43
cp /tmp/i55-repo/HEAD.txt $R/; touch $R/side.txt
SHIPPED=${SHIPPED:-1} B43=${B43:-1} T43=${T43:-1} SERVE=${SERVE:-1} PREWARM=${PREWARM:-1} PAIR12=${PAIR12:-0} U9=${U9:-0}
echo "parts: SHIPPED=$SHIPPED B43=$B43 T43=$T43 SERVE=$SERVE PREWARM=$PREWARM PAIR12=$PAIR12 U9=$U9" > $R/parts.txt
t0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-1380}
left() { echo $(( DEADLINE_S - ($(date +%s) - t0) )); }
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $R/steps.txt; COLLECT=1 OUT=$OUT bash "$0" > /dev/null; }
wait_in() {  # $1: the carry's name (wh, wh43)
  local w=0; while [ ! -d "$IND/$1" ] && [ $w -lt "${IN_WAIT_S:-300}" ]; do sleep 5; w=$((w + 5)); done
  [ -d "$IND/$1" ] || { step "the carry $1 never came (IN_WAIT_S=${IN_WAIT_S:-300})"; return 1; }; }
host_record $R/host.txt
export BUILD_KERNEL_CACHE_DIR=/tmp/bkc43
tool_setup $R/bk-site.log .device/wht43 .device/mirrors43
MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
# nightly-0.4's own arch is 12.0a: the recipe as built, tested and served here is h43.toml for 9.0a.
mkdir -p /tmp/i55-recipes
printf 'extends = "%s"\ndescription = "h43 for 9.0a"\n\n[build]\narch = ["9.0a"]\n' "$REPO/.device/h43.toml" \
  > /tmp/i55-recipes/h43-9.toml
step "setup"
( sleep "$DEADLINE_S"; [ -f $R/done ] && exit 0
  echo "$DEADLINE_S s: DEADLINE_S reached: stopping the run" >> $R/steps.txt
  mkdir -p $R/at-deadline; cp -r /tmp/moe-serve-raw/. $R/at-deadline/ 2>/dev/null
  cp /tmp/bkc43/logs/serve-moe-serve.log $R/at-deadline/server.log 2>/dev/null
  COLLECT=1 LABEL=h43-sm90a OUT=$B43_OUT bash bench/arch_builds/build_one.sh > /dev/null 2>&1
  COLLECT=1 OUT=$OUT bash "$0" > /dev/null; kill -INT -- -$$; sleep 8; kill -- -$$ ) &

# 1. The shipped recipe for 9.0a (issue 53), in its own cache with 6ffc74ef's mirrors; the MoE checkpoints beside it.
[ "$SERVE" = 1 ] && ( python3 bench/serving/tiny_moe.py /tmp/moe-cache --device cuda > $R/moe.json 2> $R/moe.err
  echo "moe rc=$?" >> $R/side.txt ) &
if [ "$SHIPPED" = 1 ]; then
  ( export BUILD_KERNEL_CACHE_DIR=/tmp/bkc BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw
    mkdir -p /tmp/bkc && rm -rf /tmp/bkc/mirrors && cp -r .device/mirrors /tmp/bkc/mirrors
    mkdir -p $R/st  # build.json and verify.json, as bench/upstream_tests/tests_report.py pack --build reads them
    python3 -m build_kernel --offline --json build --recipe .device/h9s.toml --arch 9.0a > $R/st/build.json 2> $R/st/build.err
    echo "shipped build rc=$?" >> $R/side.txt
    cp "$(ls -t /tmp/bkc/build/*/cmake/.ninja_log 2>/dev/null | head -1)" $R/st/ninja_log.txt 2>/dev/null
    python3 -m build_kernel --offline --json verify --recipe .device/h9s.toml --arch 9.0a > $R/st/verify.json 2> $R/st/verify.err
    echo "shipped verify rc=$?" >> $R/side.txt
    mkdir -p /tmp/st-wheel && cp "$(ls -t /tmp/bkw/*.whl | head -1)" /tmp/st-wheel/ )
  step "shipped build: $(grep shipped $R/side.txt | tr '\n' ' ')"
fi

# 2. 0.4.3's build here (or the carried wheel), the shipped tests and the serve environment beside it.
if [ -n "$(ls .device/test-wheel43/*.whl 2>/dev/null)" ]; then
  cp .device/test-wheel43/*.whl /tmp/w43/; B43=0
fi
if [ "$B43" = 1 ]; then
  ( BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw43 OFFLINE=1 FORCE=1 RECIPE=/tmp/i55-recipes/h43-9.toml ARCH=9.0a \
      LABEL=h43-sm90a OUT=$B43_OUT bash bench/arch_builds/build_one.sh > $R/b43.log 2>&1
    cp "$(ls -t /tmp/bkw43/*.whl 2>/dev/null | head -1)" /tmp/w43/ 2>/dev/null
    step "0.4.3 build: $(tr '\n' ' ' < /tmp/arch-build-raw/h43-sm90a/steps.txt 2>/dev/null)" ) &
  B43_PID=$!
fi
if [ "$SHIPPED" = 1 ] && [ -n "$(ls /tmp/st-wheel/*.whl 2>/dev/null)" ] && wait_in wh; then
  OUT=/tmp/st-out WHEEL_DIR=/tmp/st-wheel WHEELHOUSE=$IND/wh MIRRORS_DIR=.device/mirrors BUILD_KERNEL_CACHE_DIR=/tmp/bkc \
    TEST_ARGS="${TEST_ARGS:---parallel 8}" TEST_TIMEOUT_S=420 bash bench/upstream_tests/run_on_gpu_host.sh > $R/tests-st.log 2>&1
  step "tests shipped rc=$?: $(tail -1 /tmp/st-raw/steps.txt 2>/dev/null)"
elif [ "$SHIPPED" = 1 ]; then
  step "tests shipped skipped: wheel '$(ls /tmp/st-wheel 2>/dev/null)'"
fi
if [ "$PREWARM$SERVE" != 00 ] && wait_in wh43; then
  serve_env $R/env.log $IND/wh43 .device/wht43/sglang-*.whl .device/wht43/einops-*.whl \
    .device/wht43/transformers-*.whl .device/wht43/tokenizers-*.whl
  echo "env rc=$?" >> $R/side.txt
fi
[ -n "${B43_PID:-}" ] && wait "$B43_PID"
WHEEL=$(ls /tmp/w43/*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] && { sha256sum "$WHEEL" > $R/wheel43.sha256; ls -l "$WHEEL" >> $R/wheel43.sha256; }
if [ -n "$WHEEL" ] && [ -x /tmp/sgenv/bin/python ]; then
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --disable-pip-version-check "$WHEEL" >> $R/env.log 2>&1
  /tmp/sgenv/bin/python -m pip list > $R/sgenv-list.txt 2>&1
  timeout 300 /tmp/sgenv/bin/python -c 'import sgl_kernel, flashinfer, sglang.srt.entrypoints.http_server, sglang.bench_serving; print("imports ok", sgl_kernel.__file__)' \
    > $R/imports.txt 2>&1; echo "imports rc=$?" >> $R/side.txt
fi
step "side: $(tr '\n' ' ' < $R/side.txt 2>/dev/null)"

# 3. 0.4.3's tests (their own environment: the wheel, sglang of the commit, the [test] requires, offline), the 12.0a
# prewarm beside them.
if [ "$PREWARM" = 1 ] && [ -x /tmp/sgenv/bin/python ]; then
  ( timeout 420 python3 -m build_kernel --offline --json jit-prewarm --recipe .device/h43.toml --arch 12.0a \
      --python /tmp/sgenv/bin/python > $R/prewarm.json 2> $R/prewarm.err
    step "prewarm 12.0a rc=$?" ) &
  PREWARM_PID=$!
fi
if [ "$T43" = 1 ] && [ -n "$WHEEL" ] && [ -d $IND/wh43 ]; then
  # h43.toml's [test] requires name the wheels of wht43 and wh43 (make_device_folder.sh): one folder of both.
  rm -rf /tmp/wht43-all && mkdir -p /tmp/wht43-all && cp -n .device/wht43/*.whl $IND/wh43/*.whl /tmp/wht43-all/
  OUT=/tmp/t43-out WHEEL_DIR=/tmp/w43 TEST_RECIPE=.device/h43.toml WHEELHOUSE=/tmp/wht43-all LABEL=t43 \
    MIRRORS_DIR=.device/mirrors43 BUILD_KERNEL_CACHE_DIR=/tmp/bkc43 TEST_ARGS="${TEST_ARGS:---parallel 8}" \
    TEST_TIMEOUT_S=$(( $(left) > 540 ? 420 : $(left) - 120 )) bash bench/upstream_tests/run_on_gpu_host.sh > $R/tests43.log 2>&1
  step "tests 0.4.3 rc=$?: $(tail -1 /tmp/t43-raw/steps.txt 2>/dev/null)"
else
  step "tests 0.4.3 not run (T43=$T43, wheel '$WHEEL', wh43 $( [ -d $IND/wh43 ] && echo here || echo absent))"
fi

# 4. The serve (the prewarm may still run: the server's JIT and nvcc share 16 cores). The wheel's FA3 has head dim 256 only (the recipe's model): the script's FA3 probe of the tiny MoE's
# head dim 64 then asks for flashinfer attention, and its notes say why.
if [ "$SERVE" = 0 ] || [ -z "$WHEEL" ] || [ ! -x /tmp/sgenv/bin/python ]; then
  step "serve not run (SERVE=$SERVE, wheel '$WHEEL', serve environment $( [ -x /tmp/sgenv/bin/python ] && echo made || echo absent))"
elif [ "$(left)" -ge 200 ]; then
  env BUILD_KERNEL_CACHE_DIR=/tmp/bkc43 INSTALL=0 SERVE_PYTHON=/tmp/sgenv/bin/python RECIPE=/tmp/i55-recipes/h43-9.toml \
    WHEELHOUSE=$IND/wh43 WHEEL="$WHEEL" START_TIMEOUT_S=$(( $(left) - 30 )) MOE_CACHE=/tmp/moe-cache OUT=$MOE_OUT \
    BUDGET_S=$(left) VARIANTS=bf16 TAG=t43 BASE_ARGS=', "--cuda-graph-max-bs", "32"' \
    BASE_WHY="decode CUDA graphs captured up to the bench's highest concurrency (32), as in the issue 54 run" \
    bash bench/serving/moe_serve_on_gpu_host.sh > $R/serve.log 2>&1
  step "serve rc=$?"
else
  step "serve skipped: $(left) s left of DEADLINE_S=$DEADLINE_S"
fi
[ -n "${PREWARM_PID:-}" ] && wait "$PREWARM_PID"

# 5. The pruned/unpruned pairs (issue 55 item 2), each build cold and alone on the host, while time is left: 12.0a
# (nightly-0.4 as shipped against nightly-0.4-unpruned, .device/h43u.toml) and the 9.0a reference (FA3 off).
pair_build() {  # $1: label, $2: recipe, $3: arch, $4: seconds it needs
  if [ "$(left)" -lt "$4" ]; then step "$1 skipped: $(left) s left of DEADLINE_S=$DEADLINE_S (it needs ~$4 s)"; return; fi
  BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw-$1 OFFLINE=1 FORCE=1 RECIPE=$2 ARCH=$3 LABEL=$1 OUT=$B43_OUT \
    bash bench/arch_builds/build_one.sh > $R/$1.log 2>&1
  step "$1: $(tr '\n' ' ' < /tmp/arch-build-raw/$1/steps.txt 2>/dev/null)"
}
if [ "$PAIR12" = 1 ]; then
  pair_build h43-sm120a .device/h43.toml 12.0a 240
  pair_build h43u-sm120a .device/h43u.toml 12.0a 420
fi
[ "$U9" = 1 ] && pair_build h43u-sm90a .device/h43u.toml 9.0a 480
touch $R/done; step "done"
