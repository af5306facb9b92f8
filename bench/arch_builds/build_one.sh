#!/usr/bin/env bash
# One real build of a recipe for one arch list by the tool, with static verify per library, its raw
# outputs packed as the other build runs' are (`<label>/{host.txt,build.err,build.json,verify.json,mem.txt,
# ninja_log.txt,profile.sqlite}`), so bench/arch_builds/builds_report.py writes bench/arch_builds/results/arch-builds.json from them.
#
#   RECIPE=/tmp/ov/local.toml ARCH=8.9 LABEL=sm89-2c bash bench/arch_builds/build_one.sh      # this host
#
# Runs anywhere the tool runs: the 2-core GPU-less box or the GPU host (the same script in a device call). The
# recipe is an overlay of a shipped one with only the host's lines (torch = "existing", snapshot stand-ins): the
# shipped recipe's archs, FP4 and rules are what is measured. Sources come through git's own config environment
# (GIT_CONFIG_*, set by the caller), never a committed file. Environment: OUT (bench/<study>/raw/<host>-<date>),
# BUILD_KERNEL_CACHE_DIR (the caller's), COLLECT=1 (pack what there is and stop), FORCE=1 (a cold build: `build
# --force` drops a cached wheel and the key's build folder, so every compile runs), OFFLINE=1 (sources from the
# cache's mirrors only: a GPU host without network).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
LABEL=${LABEL:?a label, e.g. sm89-2c}
OUT=${OUT:-$REPO/bench/arch_builds/raw/unsorted}
R=/tmp/arch-build-raw/$LABEL
C=${BUILD_KERNEL_CACHE_DIR:-$HOME/.cache/build-kernel}
pack() {
    # This build's own folder once build.json names it (its key): another build sharing the cache writes its own
    # .ninja_log meanwhile; before that, the newest one since the run began.
    key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("key",""))' "$R/build.json" 2>/dev/null)
    nl=$C/build/$key/cmake/.ninja_log
    [ -n "$key" ] && [ -f "$nl" ] || nl=$(find "$C/build" -name .ninja_log -newer "$R/host.txt" 2>/dev/null | head -1)
    [ -n "$nl" ] && cp "$nl" "$R/ninja_log.txt"
    cp "$C/profile.sqlite" "$R/" 2>/dev/null
    mkdir -p "$OUT"; tar -czf "$OUT/$LABEL-raw.tar.gz" -C "$(dirname "$R")" "$LABEL"
}
if [ "${COLLECT:-0}" = 1 ]; then pack; cat "$R/steps.txt" 2>/dev/null; exit 0; fi
RECIPE=$(realpath "${RECIPE:?an overlay recipe for this host}")
ARCH=${ARCH:?an arch list, e.g. 8.9}
PY=${PYTHON:-python3}
rm -rf "$R"; mkdir -p "$R"
{ nproc; date -u; nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null || echo "no GPU"
  grep -E 'MemTotal|MemAvailable' /proc/meminfo; echo "arch=$ARCH recipe=$RECIPE"
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nvcc --version | tail -1
  git -C "$REPO" rev-parse HEAD; } > "$R/host.txt" 2>&1
cp "$RECIPE" "$R/recipe.toml"
t0=$(date +%s)
step() { echo "$* $(( $(date +%s) - t0 )) s" >> "$R/steps.txt"; pack; }
# `seconds used-bytes` every 0.5 s, as bench/pruning/pruning_table.py's used_bytes() reads it. `%.0f`, not `%d`: mawk (Debian's awk)
# caps `%d` at 2^31-1, so every 2-core pack before 2026-12-06 12:00 reads at most 2 GiB in use (its `peak_gb` is no peak).
sample() {
    while :; do
        echo "$(date +%s.%N) $(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{printf "%.0f", (t-a)*1024}' /proc/meminfo)" >> "$R/mem.txt"
        sleep 0.5
    done
}
bk() { "$PY" -m build_kernel --json ${OFFLINE:+--offline} --arch "$ARCH" --recipe "$RECIPE" "$@"; }
bk plan > "$R/plan.json" 2> "$R/plan.err"; step "plan rc=$?"
sample & SP=$!
bk build ${FORCE:+--force} > "$R/build.json" 2> "$R/build.err"; rc=$?; kill $SP; step "build rc=$rc"
bk verify --static > "$R/verify.json" 2> "$R/verify.err"; step "verify rc=$?"
echo done >> "$R/steps.txt"; pack
