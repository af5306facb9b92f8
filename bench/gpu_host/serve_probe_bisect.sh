#!/usr/bin/env bash
# The tiny MoE's checkpoints and serve, the cuBLAS capture probe and a bisect start (issue 54), on the GPU host (one H200/H100, sm_90a, torch 2.11+cu130, no network) in one hold, run detached:
#
#   setsid bash bench/gpu_host/serve_probe_bisect.sh > /tmp/i54.log 2>&1 < /dev/null &   # the whole run
#   COLLECT=1 bash bench/gpu_host/serve_probe_bisect.sh                                   # pack what there is into $OUT
#
# Steps, each packed as it ends (a machine taken back loses only the step it was in):
#  1. the tool builds the 9.0a wheel offline from the carried partial mirrors (.device/mirrors -> the cache's
#     mirrors/), recipe .device/h9.toml; verify; meanwhile the tiny MoE is trained on the GPU (bench/serving/tiny_moe.py)
#     and the serve environment is made: a venv that sees the host's torch (the serve stage's own
#     environment.create) with the carried wheels --no-deps (sglang of the kernel's commit and what it imports:
#     sglang's whole requirement list does not fit a carry, so no `serve --install`);
#  2. an import check of sglang's server and bench, and bench/serving/cublas_capture_probe.py (cuBLAS under CUDA-graph
#     capture: torch alone, after importing the wheel, and around the wheel's ops);
#  3. bench/serving/moe_serve_on_gpu_host.sh: bf16 and FP8, each through `build-kernel serve --bench` with the 64-prompt
#     logprob-close check, sampled requests, the op report, C=1 and C=32; a start killed by the piecewise CUDA
#     graph is retried with sglang's own advice (the first error kept);
#  4. BISECT=1: the same bf16 start with piecewise CUDA graphs on and --context-length 4096, no retry (BISECT_FA3=1:
#     also with FA3 off);
#  5. the same recipe for 12.1a (issue 53): build and static verify.
# Steps 4 and 5 run only while DEADLINE_S (seconds from the start) leaves them room: 140 s and 270 s.
# Raw output: $OUT/i54-raw.tar.gz (build, verify, probe, steps), $OUT/moe-serve-raw*.tar.gz (serve script),
# $OUT/gb10-raw.tar.gz, and the wheel. Environment: OUT (/tmp/i54-out), BISECT (1), GB10 (1), DEADLINE_S (1150),
# WHEEL_IN (a wheel an earlier hold built: no build).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/i54-out}
R=/tmp/i54-raw G=/tmp/gb10-raw MOE_OUT=/tmp/moe-out
if [ "${COLLECT:-0}" = 1 ]; then
  mkdir -p "$OUT"
  [ -d $R ] && tar -czf "$OUT/i54-raw.tar.gz" -C $R .
  [ -d $G ] && tar -czf "$OUT/gb10-raw.tar.gz" -C $G .
  cp $MOE_OUT/*.tar.gz "$OUT/" 2>/dev/null
  # The wheel itself (14.5 MB), so that a later hold carries it (WHEEL_IN) and starts at the serve.
  cp /tmp/i54-wheel/*.whl "$OUT/" 2>/dev/null
  cat $R/steps.txt 2>/dev/null; tail -3 /tmp/moe-serve-raw/steps.txt 2>/dev/null; exit 0
fi
# Run from a copy: each later device call syncs the working tree again, and this run must not change under itself.
if [ -z "${I54_COPY:-}" ]; then
  rm -rf /tmp/i54-repo && mkdir -p /tmp/i54-repo
  cp -r build_kernel bench recipes patches examples pyproject.toml .device /tmp/i54-repo/
  git -C "$REPO" rev-parse HEAD > /tmp/i54-repo/HEAD.txt 2>/dev/null; git -C "$REPO" status --short > /tmp/i54-repo/status.txt 2>/dev/null
  exec env I54_COPY=1 bash /tmp/i54-repo/bench/gpu_host/serve_probe_bisect.sh
fi
# shellcheck source=bench/gpu_host/gpu_host_lib.sh
source "$REPO/bench/gpu_host/gpu_host_lib.sh"
echo $$ > /tmp/i54.pid  # the run's process group (setsid): `kill -- -$(cat /tmp/i54.pid)` stops all of it
rm -rf $R $G $MOE_OUT; mkdir -p $R $G $MOE_OUT
cp /tmp/i54-repo/HEAD.txt /tmp/i54-repo/status.txt $R/ 2>/dev/null
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $R/steps.txt; COLLECT=1 OUT=$OUT bash "$0" > /dev/null; }
export BUILD_KERNEL_CACHE_DIR=/tmp/bkc BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw
host_record $R/host.txt

tool_setup $R/bk-site.log
bk() { python3 -m build_kernel --offline --json "$@"; }
step "setup"
# The hard stop: at DEADLINE_S the serve's files so far are kept, everything is packed, the group is stopped.
( sleep "${DEADLINE_S:-1150}"; [ -f $R/done ] && exit 0
  echo "${DEADLINE_S:-1150} s: DEADLINE_S reached: stopping the run" >> $R/steps.txt
  mkdir -p $R/at-deadline; cp -r /tmp/moe-serve-raw/. $R/at-deadline/ 2>/dev/null
  cp $BUILD_KERNEL_CACHE_DIR/logs/serve-moe-serve.log $R/at-deadline/server.log 2>/dev/null
  cp -r $BUILD_KERNEL_CACHE_DIR/serve/ops/moe-serve $R/at-deadline/ops 2>/dev/null
  COLLECT=1 OUT=$OUT bash "$0" > /dev/null; kill -INT -- -$$; sleep 8; kill -- -$$ ) &

# Beside the build: the checkpoints (GPU, seconds) and the serve environment (CPU, a minute).
( python3 bench/serving/tiny_moe.py /tmp/moe-cache --device cuda > $R/moe.json 2> $R/moe.err; echo "moe rc=$?" >> $R/side.txt
  timeout 120 python3 bench/serving/cublas_capture_probe.py --case torch > $R/probe-torch.jsonl 2> $R/probe-torch.err
  echo "probe torch rc=$?" >> $R/side.txt ) &
MOE_PID=$!
( serve_env $R/env.log; echo "env rc=$?" >> $R/side.txt ) &
ENV_PID=$!

if [ -n "${WHEEL_IN:-}" ]; then
  # A wheel an earlier hold built (its sha256 in that hold's raw output) skips the build; verify runs on it again.
  mkdir -p $BUILD_KERNEL_OUTPUT_DIR && cp "$WHEEL_IN" $BUILD_KERNEL_OUTPUT_DIR/ && step "carried wheel $(basename "$WHEEL_IN")"
  bk verify "$BUILD_KERNEL_OUTPUT_DIR/$(basename "$WHEEL_IN")" --recipe .device/h9.toml > $R/verify.json 2> $R/verify.err; step "verify rc=$?"
else
  bk build --recipe .device/h9.toml > $R/build.json 2> $R/build.err; step "build 9.0a rc=$?"
  cp "$(find $BUILD_KERNEL_CACHE_DIR/build -name .ninja_log 2>/dev/null | head -1)" $R/ninja_log.txt 2>/dev/null
  log=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("log",""))' $R/build.json 2>/dev/null)
  [ -n "$log" ] && cp "$log" $R/build.log
  bk verify --recipe .device/h9.toml > $R/verify.json 2> $R/verify.err; step "verify rc=$?"
fi
wait $MOE_PID $ENV_PID; step "side: $(tr '\n' ' ' < $R/side.txt)"
WHEEL=$(ls -t $BUILD_KERNEL_OUTPUT_DIR/*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] || { step "no wheel"; exit 1; }
sha256sum "$WHEEL" > $R/wheel.sha256; ls -l "$WHEEL" >> $R/wheel.sha256
mkdir -p /tmp/i54-wheel && cp "$WHEEL" /tmp/i54-wheel/
python3 -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$WHEEL" > $R/wheel-files.txt
/tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --force-reinstall --no-compile "$WHEEL" >> $R/env.log 2>&1
step "wheel into the serve environment rc=$?"

# 2. Beside the serve (small GPU work, no timing of its own): the imports the server and bench need, and cuBLAS
# under capture after importing the wheel and around its ops (the torch-only case ran beside the build).
( /tmp/sgenv/bin/python -c 'import sglang.srt.entrypoints.http_server, sglang.bench_serving, sgl_kernel, flashinfer, deep_gemm; print("imports ok")' \
    > $R/imports.txt 2>&1; echo "imports rc=$?" >> $R/side.txt
  for c in torch+import layer; do
    timeout 120 /tmp/sgenv/bin/python bench/serving/cublas_capture_probe.py --case $c >> $R/probe.jsonl 2>> $R/probe.err
    echo "probe $c rc=$?" >> $R/side.txt
  done ) &

# 3. The serve, both variants. The decode CUDA graphs are captured up to the bench's own concurrency (32).
common_args=', "--cuda-graph-max-bs", "32"'
common=(INSTALL=0 SERVE_PYTHON=/tmp/sgenv/bin/python RECIPE=.device/h9.toml WHEELHOUSE=.device/wh WHEEL="$WHEEL"
        START_TIMEOUT_S=420 MOE_CACHE=/tmp/moe-cache OUT=$MOE_OUT BUDGET_S=$(( ${DEADLINE_S:-1150} - ($(date +%s) - t0) ))
        BASE_ARGS="$common_args"
        BASE_WHY="decode CUDA graphs captured up to the bench's highest concurrency (32) instead of sglang's H200 default, so that each start (DeepGEMM/flashinfer JIT per captured size) fits the hold")
env "${common[@]}" bash bench/serving/moe_serve_on_gpu_host.sh > $R/serve.log 2>&1; step "serve rc=$?"

# 4. Bisect of the piecewise CUDA-graph failure (issue 54): the tiny MoE's context is now 32,768 (bench/serving/tiny_moe.py:
# CONTEXT), so the default start above captures 8,192-token shapes inside it. The same bf16 start with
# --context-length 4096 (the context the 2026-12-03 run had), piecewise CUDA graphs on, no retry, should die in
# cuBLAS again if the cause is sglang's one-request warm-up past the context; BISECT_FA3=1 adds the start with the
# old context and FA3 off (flashinfer attention).
left() { echo $(( ${DEADLINE_S:-1150} - ($(date +%s) - t0) )); }
bisect() {  # $1: tag, $2: extra serve args, $3: ATTENTION
  if [ "$(left)" -lt 140 ]; then step "bisect $1 skipped: $(left) s left of DEADLINE_S=${DEADLINE_S:-1150}"; return; fi
  # The serve log is appended across starts: each bisect's own starts only in its tarball.
  mv $BUILD_KERNEL_CACHE_DIR/logs/serve-moe-serve.log $R/server-before-$1.log 2>/dev/null
  env "${common[@]}" BASE_ARGS="${common_args}$2" BASE_WHY="bisect $1: the run's args plus$2, piecewise CUDA graphs on" VARIANTS=bf16 ATTENTION="$3" CHECKS=0 RETRY=0 TAG="$1" \
    bash bench/serving/moe_serve_on_gpu_host.sh > $R/serve-$1.log 2>&1; step "bisect $1 rc=$?"
}
if [ "${BISECT:-1}" = 1 ]; then
  bisect pcg-context4096 ', "--context-length", "4096"' ""
  [ "${BISECT_FA3:-0}" = 1 ] && bisect pcg-context4096-flashinfer ', "--context-length", "4096"' flashinfer
fi

# 5. 12.1a (issue 53) while time is left.
if [ "${GB10:-1}" = 1 ] && [ "$(left)" -ge 270 ]; then
  cp $R/host.txt $G/
  g0=$(date +%s)
  BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw12 bk build --recipe .device/h12.toml --arch 12.1a > $G/build.json 2> $G/build.err
  echo "build rc=$? $(( $(date +%s) - g0 )) s" >> $G/steps.txt
  log=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("log",""))' $G/build.json 2>/dev/null)
  [ -n "$log" ] && cp "$log" $G/build.log
  nl=$(ls -t $(find $BUILD_KERNEL_CACHE_DIR/build -name .ninja_log) 2>/dev/null | head -1); [ -n "$nl" ] && cp "$nl" $G/ninja_log.txt
  BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw12 bk verify --static --recipe .device/h12.toml --arch 12.1a > $G/verify.json 2> $G/verify.err
  echo "verify --static rc=$? $(( $(date +%s) - g0 )) s" >> $G/steps.txt
  step "gb10 12.1a: $(tr '\n' ' ' < $G/steps.txt)"
else
  step "gb10 12.1a skipped: $(left) s left of DEADLINE_S=${DEADLINE_S:-1150}"
fi
touch $R/done; step "done: $(tr '\n' ' ' < $R/side.txt)"
