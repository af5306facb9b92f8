#!/usr/bin/env bash
# Upstream's tests against a carried wheel on the GPU host (issue 53 item 4), made for when the pair run's hold ended before it (2026-12-05: its test step stopped at
# "2038 files of python/ not in the cached mirror": the carried wheelhouse's sglang build of the commit was not
# used then). One call, in the foreground: upstream's tests at the pinned commit against a carried wheel of the
# shipped recipe for 9.0a with host lines (.device/h9s.toml: the same plan as the pair run's own build).
#   carry .device/wht (the tool's dependencies, sglang of the commit, gguf) .device/mirrors .device/triton-src
#         .device/gitenv.sh .device/h9s.toml .device/test-wheel:
#   bash bench/upstream_tests/run_on_gpu_host.sh
# TEST_ARGS: more `build-kernel test` options (e.g. `--parallel 8` and `--file` globs where the hold is short);
# FILE_TIMEOUT_S: seconds a file may run (420); TEST_TIMEOUT_S: the whole test step's limit (480).
# Another carried wheel and recipe (issue 56: v11's 9.0a wheel; issue 55: 0.4.3's, with .device/wht43 holding
# sglang of 0753182b): WHEEL_DIR (.device/test-wheel), TEST_RECIPE (.device/h9s.toml), WHEELHOUSE (.device/wht),
# LABEL (st: the pack's name), MIRRORS_DIR (.device/mirrors: the commit's partial mirrors), BUILD_KERNEL_CACHE_DIR
# (/tmp/bkc; another commit's run beside this one keeps its own).
# Raw output: $OUT/<LABEL>-raw.tar.gz (host, the wheel's digest, test.json/.err, the tests' logs, steps, the host's
# pip freeze).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/st-out}
LABEL=${LABEL:-st}
WHEEL_DIR=${WHEEL_DIR:-.device/test-wheel} TEST_RECIPE=${TEST_RECIPE:-.device/h9s.toml} WHEELHOUSE=${WHEELHOUSE:-.device/wht}
R=/tmp/$LABEL-raw
rm -rf $R; mkdir -p $R "$OUT"
# shellcheck source=bench/gpu_host/gpu_host_lib.sh
source bench/gpu_host/gpu_host_lib.sh
export BUILD_KERNEL_CACHE_DIR=${BUILD_KERNEL_CACHE_DIR:-/tmp/bkc}
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $R/steps.txt; }
pack() { tar -czf "$OUT/$LABEL-raw.tar.gz" -C $R .; }
trap pack EXIT
git rev-parse HEAD > $R/HEAD.txt 2>/dev/null
host_record $R/host.txt
python3 -m pip freeze > $R/host-freeze.txt 2>&1
WHEEL=$(ls "$WHEEL_DIR"/*.whl | head -1)
sha256sum "$WHEEL" > $R/wheels.sha256
tool_setup $R/bk-site.log "$WHEELHOUSE" "${MIRRORS_DIR:-.device/mirrors}"
MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
step "setup"
set -f  # TEST_ARGS's globs are the tool's (--file), not the shell's
timeout "${TEST_TIMEOUT_S:-480}" python3 -m build_kernel --offline --json test "$WHEEL" --recipe "$TEST_RECIPE" \
  --arch 9.0a --wheelhouse "$WHEELHOUSE" --timeout "${FILE_TIMEOUT_S:-420}" ${TEST_ARGS:-} > $R/test.json 2> $R/test.err
step "test rc=$?"; set +f
tar -czf $R/test-logs.tar.gz --exclude="env-*" --exclude=src -C $BUILD_KERNEL_CACHE_DIR/tests . 2>/dev/null
