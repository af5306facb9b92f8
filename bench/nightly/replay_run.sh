#!/usr/bin/env bash
# The replay's raw output: `build-kernel nightly --replay` over sgl-kernel 0.3.21 -> 0.4.3 (upstream 6ffc74ef ->
# 0753182b, the real sglang history), its records and log as they come, into OUT (default raw/local-2c-<date>).
#
#   SNAPSHOT=/work/.mirror/ai-blaise+optimization-playground/repo bash bench/nightly/replay_run.sh
#
# Upstream comes from a local snapshot with upstream's hashes through git's own config environment
# (GIT_CONFIG_*: url.<snapshot>.insteadOf), never a committed file; without SNAPSHOT it is fetched from GitHub.
# Nothing is built: each night's plan, series choice, conflict or retirement and lock (see README.md); with BUILT (a
# folder of real nights' records, nights/*.json, as bench/nightly/build_nights.sh leaves them) those nights' build,
# wheel and logs go into the records of the same commits (`--built`).
set -eu
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/bench/nightly/raw/local-2c-$(date -u +%Y-%m-%d)}
RANGE=${RANGE:-6ffc74efd7d23627c0245efb61af7f62cde4a970..0753182b50f041be7f8c6e7f5c01ff79e655ecfb}
if [ -n "${SNAPSHOT:-}" ]; then
    export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.file://$SNAPSHOT.insteadOf" \
        GIT_CONFIG_VALUE_0=https://github.com/sgl-project/sglang.git
fi
rm -rf "$OUT"; mkdir -p "$OUT"
{ nproc; date -u; uptime; git -C "$REPO" rev-parse HEAD; echo "range=$RANGE recipe=nightly-cu130${BUILT:+ built=$(basename "$BUILT")}"
  echo "series versions: $(ls "$REPO/patches/sm120" | tr "\n" " ")"; } > "$OUT/host.txt"
start=$(date +%s)
"${PYTHON:-python3}" -m build_kernel --json nightly --replay "$RANGE" --recipe nightly-cu130 --state-dir "$OUT" \
    ${BUILT:+--built "$BUILT"} > "$OUT/replay.stdout.json" 2> "$OUT/replay.err"
echo "wall_s=$(( $(date +%s) - start ))" >> "$OUT/host.txt"
