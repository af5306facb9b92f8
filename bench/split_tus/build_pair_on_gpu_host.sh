#!/usr/bin/env bash
# The split-TU pair (v8 then v11, cold) built on the GPU host (issue 56 items 2-4) (one H100/H200, torch 2.11+cu130, no network), run detached:
#   1. v8 then v11 (0011: the heaviest TUs split, SGL_KERNEL_SPLIT_TUS=ON) for 12.0a, both cold, by the tool
#      (bench/split_tus/build_pair.sh: build_one.sh with FORCE=1 and OFFLINE=1, static verify each), offline from the
#      carried partial mirrors, with only the host's lines over nightly-cu130;
#   2. `build-kernel prune-proof <v11> --against <v8> --across-tus`: the split changed file boundaries only.
# The calls, each made as soon as the one before returns (a machine stays warm 30 s after a call):
#   1. carry .device/wht .device/mirrors .device/triton-src .device/gitenv.sh:
#      setsid nohup bash bench/split_tus/build_pair_on_gpu_host.sh > /tmp/sp.log 2>&1 < /dev/null &
#   2. and on, until steps.txt says done: sleep 540; COLLECT=1 bash bench/split_tus/build_pair_on_gpu_host.sh
# Raw output under $OUT: v8-sm120a-h200-raw.tar.gz and v11-sm120a-h200-raw.tar.gz (build_one.sh's packs; the
# proof as split-proof.json in v11's), sp-steps.txt. Then, here:
#   python bench/arch_builds/builds_report.py <packs> --pair <v8 pack> <v11 pack> --out bench/split_tus/results/split-builds.json
#   python bench/real_build/order_profile.py --series 'v11 (…, the heaviest TUs split)' <v11 pack> recipes/<profile>.csv
# Environment: OUT, HOST (h200), ARCH (12.0a), V11_PROFILE (an order profile for v11's overlay, relative to the
# repository: the shipped one predates the split parts, which it would start as if of median length).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
S=/tmp/sp-out
HOST=${HOST:-h200}
ARCH=${ARCH:-12.0a}
tag=sm$(echo "$ARCH" | tr -d '.;')
if [ "${COLLECT:-0}" = 1 ]; then
  mkdir -p "$OUT"; cp $S/* "$OUT/" 2>/dev/null
  for series in v8 v11; do  # a pack of the build in progress, as far as it got
    [ -d "/tmp/arch-build-raw/$series-$tag-$HOST" ] && \
      tar -czf "$OUT/$series-$tag-$HOST-raw.tar.gz" -C /tmp/arch-build-raw "$series-$tag-$HOST"
  done
  cat $S/sp-steps.txt 2>/dev/null; exit 0
fi
# shellcheck source=bench/gpu_host/gpu_host_lib.sh
source "$REPO/bench/gpu_host/gpu_host_lib.sh"
run_from_copy /tmp/sp-repo bench/split_tus/build_pair_on_gpu_host.sh
rm -rf $S; mkdir -p $S
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $S/sp-steps.txt; }
export BUILD_KERNEL_CACHE_DIR=/tmp/bkc BUILD_KERNEL_OUTPUT_DIR=/tmp/bkw
host_record $S/host.txt
tool_setup $S/bk-site.log .device/wht
MIRRORS=/nonexistent TRITON=$REPO/.device/triton-src source .device/gitenv.sh
step "setup"
# The host's lines only: its torch, the system CUDA, sgl-flash-attn f866ec34 for sgl-attn bcf72ccc (no public
# snapshot has it; a 12.0a build compiles no FA3).
host_lines='[toolchain]
torch = "existing"
cuda_source = "system"

[deps.repo-flash-attention]
repo = "https://github.com/sgl-project/sgl-flash-attn.git"
commit = "f866ec34002250e74c8bbcbcffa0e1ae71300b2d"
paths = ["csrc/flash_attn", "hopper"]'
printf 'extends = "nightly-cu130"\n\n%s\n' "$host_lines" > /tmp/sp-v8.toml
{ printf 'extends = "nightly-cu130"\n\n[patches]\nversion = "v11"\n\n%s\n\n[build.defines]\nSGL_KERNEL_SPLIT_TUS = "ON"\n' \
    "$host_lines"
  [ -n "${V11_PROFILE:-}" ] && printf '\n[build]\norder_profile = "%s"\n' "$REPO/$V11_PROFILE"; } > /tmp/sp-v11.toml
cp /tmp/sp-v8.toml /tmp/sp-v11.toml $S/
OFFLINE=1 HOST=$HOST ARCH=$ARCH V8=/tmp/sp-v8.toml V11=/tmp/sp-v11.toml PYTHON=python3 OUT=$S bash bench/split_tus/build_pair.sh
step "pair rc=$?"
wheel() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel"])' "/tmp/arch-build-raw/$1-$tag-$HOST/build.json"; }
R11=/tmp/arch-build-raw/v11-$tag-$HOST
python3 -m build_kernel --offline --json prune-proof "$(wheel v11)" --against "$(wheel v8)" --across-tus \
  --recipe /tmp/sp-v11.toml > $R11/split-proof.json 2> $R11/split-proof.err
step "prune-proof rc=$?"
tar -czf "$S/v11-$tag-$HOST-raw.tar.gz" -C /tmp/arch-build-raw "v11-$tag-$HOST"
step "done"
