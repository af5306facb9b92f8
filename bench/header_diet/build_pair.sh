#!/usr/bin/env bash
# Issue 71 item 3: series v13 (0012, torch's lean headers in the CUTLASS GEMM TUs) against v8, both cold, one after
# the other on one host, by the tool (bench/arch_builds/build_one.sh with FORCE=1: no cached wheel, a fresh build
# folder, every compile runs), then `prune-proof --across-tus` of v13 against v8.
#
#   V8=/tmp/ov/v8.toml V13=/tmp/ov/v13.toml ARCH=12.0a HOST=2c OUT=bench/header_diet/raw/<dir> bash bench/header_diet/build_pair.sh
#
# Each overlay is a shipped recipe with the host's lines only (V8 extends nightly-cu130, V13 nightly-cu130-v13).
# Packs are <series>-<arch>-<HOST>-raw.tar.gz under OUT, as build_one.sh writes them (bench/arch_builds/builds_report.py
# reads them); the proof is prune-proof.json in v13's pack. ONLY=v13 builds v13 alone (v8 built already: its pack in
# OUT and its folder under /tmp/arch-build-raw).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
ARCH=${ARCH:-12.0a}
HOST=${HOST:?a host label, e.g. 2c or h200}
PY=${PYTHON:-python3}
: "${V8:?the v8 overlay}" "${V13:?the v13 overlay}" "${OUT:?where the packs go}"
tag=sm$(echo "$ARCH" | tr -d '.;')
cold() { FORCE=1 RECIPE=$2 ARCH=$ARCH LABEL=$1-$tag-$HOST OUT=$OUT bash "$REPO/bench/arch_builds/build_one.sh"; }
[ "${ONLY:-}" = v13 ] || cold v8 "$V8"
cold v13 "$V13"
wheel() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel"])' "/tmp/arch-build-raw/$1-$tag-$HOST/build.json"; }
R13=/tmp/arch-build-raw/v13-$tag-$HOST
(cd "$REPO" && "$PY" -m build_kernel ${OFFLINE:+--offline} --json prune-proof "$(wheel v13)" --against "$(wheel v8)" \
    --across-tus --recipe "$V13" > "$R13/prune-proof.json" 2> "$R13/prune-proof.err")
echo "prune-proof rc=$?" >> "$R13/steps.txt"
tar -czf "$OUT/v13-$tag-$HOST-raw.tar.gz" -C /tmp/arch-build-raw "v13-$tag-$HOST"
