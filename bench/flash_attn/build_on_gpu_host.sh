#!/usr/bin/env bash
# flash-attn 2.8.3's build on the GPU host (issue 40 item 4), offline: the tool's flash-attn 2.8.3 build for 9.0, in one of two parts, each one
# device call's worth (the whole build is ~1,100 s on the host's 16 cores; in a 32 GiB cgroup, at 5 jobs, ~3,500 s,
# longer than a machine is held, so that part is always cut and says so):
#
#   PART=host   bash bench/flash_attn/build_on_gpu_host.sh   # build on all cores, verify, flash-attn's own tests (the
#                                                   # recipe's [test] args subset) -> $OUT/fa-h-raw.tar.gz
#   PART=cgroup bash bench/flash_attn/build_on_gpu_host.sh   # the same build in a 32 GiB memory cgroup, cut at BUDGET_S
#                                                   # -> $OUT/fa-c-raw.tar.gz
#
# Run detached (setsid) and collect with COLLECT=1 (packs what there is, whole or partial). Each step packs
# again, so a machine taken back mid-run still leaves what was done in the tarball of the last collect.
# bench/flash_attn/build_report.py turns the tarballs into bench/flash_attn/results/flash-attn.json.
#
# Environment: RECIPE (an overlay of recipes/flash-attn-2.8.3.toml for the host: [toolchain] torch = "existing",
# cuda = "13.0", cuda_source = "system"; [build] arch = ["9.0"]; [test] resolve = false), MIRRORS (bare mirrors of flash-attention and cutlass, copied into
# the cache as <cache>/mirrors), WHEELHOUSE (the tool's own dependencies and einops, offline), BUDGET_S (cgroup
# part: 900), CGROUP_GIB (32), OUT (/tmp/fa-out). The tool runs from this checkout (PYTHONPATH), the wheelhouse's
# packages installed into a --target folder.
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PART=${PART:-host}
OUT=${OUT:-/tmp/fa-out}
R=/tmp/fa-raw/$PART; D=${PART:0:1}
if [ "${COLLECT:-0}" = 1 ]; then
    CG=/sys/fs/cgroup/bkfa; C=/tmp/bkc-$PART
    if [ "$PART" = cgroup ] && [ -d "$CG" ]; then cp "$CG/memory.peak" "$CG/memory.events" "$R/" 2>/dev/null; fi
    nl=$(find "$C/build" -name .ninja_log 2>/dev/null | head -1); [ -n "$nl" ] && cp "$nl" "$R/ninja_log.txt"
    cp "$C/profile.sqlite" "$R/" 2>/dev/null; cp "$C"/build/*/jobserver/trace.jsonl "$R/" 2>/dev/null
    mkdir -p "$OUT"; tar -czf "$OUT/fa-$D-raw.tar.gz" --exclude='*.whl' -C "$(dirname "$R")" "$PART"
    cat "$R/steps.txt" 2>/dev/null; exit 0
fi
cd "$REPO"
RECIPE=$(realpath "${RECIPE:?an overlay of recipes/flash-attn-2.8.3.toml for this host}")
MIRRORS=$(realpath "${MIRRORS:?bare mirrors of flash-attention and cutlass}")
WHEELHOUSE=$(realpath "${WHEELHOUSE:?wheels of the tool dependencies and einops}")
C=/tmp/bkc-$PART; rm -rf "$R" "$C"; mkdir -p "$R" "$C" "$OUT"; cp -r "$MIRRORS" "$C/mirrors"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/bk-site "$WHEELHOUSE"/*.whl
export PYTHONPATH=$REPO:/tmp/bk-site BUILD_KERNEL_CACHE_DIR=$C BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw-$PART
{ nproc; date; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
  grep -E 'MemTotal|MemAvailable' /proc/meminfo; echo "CC=${CC:-} CXX=${CXX:-} CUDAHOSTCXX=${CUDAHOSTCXX:-}"
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nvcc --version | tail -1; } > "$R/host.txt" 2>&1
t0=$(date +%s)
step() { echo "$* $(( $(date +%s) - t0 )) s" >> "$R/steps.txt"; COLLECT=1 PART=$PART OUT=$OUT bash "$0" > /dev/null; }
# `seconds used-bytes [cgroup-current]` every 0.5 s, as bench/flash_attn/build_report.py reads it.
sample() {
    while :; do
        used=$(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print (t-a)*1024}' /proc/meminfo)
        current=""; [ -n "${1:-}" ] && current=$(cat "$1/memory.current")
        echo "$(date +%s.%N) $used $current" >> "$R/mem.txt"; sleep 0.5
    done
}
bk() { python3 -m build_kernel --offline --json "$@" --recipe "$RECIPE"; }
if [ "$PART" = host ]; then
    sample & SP=$!
    bk build > "$R/build.json" 2> "$R/build.err"; step "build rc=$?"; kill $SP
    bk verify > "$R/verify.json" 2> "$R/verify.err"; step "verify rc=$?"
    bk test --wheelhouse "$WHEELHOUSE" > "$R/test.json" 2> "$R/test.err"; step "test rc=$?"
    tar -czf "$R/test-logs.tar.gz" --exclude="env-*" --exclude=src -C "$C/tests" . 2>/dev/null
else
    CG=/sys/fs/cgroup/bkfa; mkdir -p $CG
    echo $(( ${CGROUP_GIB:-32} * 1024**3 )) > $CG/memory.max; echo 0 > $CG/memory.swap.max 2>/dev/null
    echo "memory.max: $(cat $CG/memory.max)" > "$R/cgroup-before.txt"
    sample $CG & SP=$!
    timeout "${BUDGET_S:-900}" bash -c "echo \$\$ > $CG/cgroup.procs; exec python3 -m build_kernel --offline --json build --recipe $RECIPE" \
        > "$R/build.json" 2> "$R/build.err"
    echo "rc=$?" > "$R/rc.txt"; kill $SP; step "cgroup build"
fi
echo done >> "$R/steps.txt"; step done
