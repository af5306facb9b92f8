#!/usr/bin/env bash
# The header-diet pair (v8 then v13, cold, one after the other) built on the 16-core GPU host (issue 71 item 3), run
# detached; the GPU is not used (a 12.0a build), only the host's 16 cores:
#   1. v8 then v13 (0012: torch's lean headers in the four CUTLASS GEMM TUs) for 12.0a, both cold, by the tool
#      (bench/header_diet/build_pair.sh: build_one.sh with FORCE=1 and OFFLINE=1, static verify each), offline from
#      the carried partial mirrors, with only the host's lines over nightly-cu130 and nightly-cu130-v13;
#   2. `build-kernel prune-proof <v13> --against <v8> --across-tus` (prune-proof.json in v13's pack).
# The calls, each made as soon as the one before returns (a machine stays warm 30 s after a call):
#   1. carry .device/wht .device/mirrors .device/triton-src .device/gitenv.sh:
#      setsid nohup bash bench/header_diet/pair_on_gpu_host.sh > /tmp/hd.log 2>&1 < /dev/null &
#   2. and on, until hd-steps.txt says done: sleep 300; COLLECT=1 bash bench/header_diet/pair_on_gpu_host.sh
# Raw output under $OUT: v8-sm120a-h100-raw.tar.gz and v13-sm120a-h100-raw.tar.gz (build_one.sh's packs), hd-steps.txt,
# host.txt, the two overlays. Then, here:
#   python bench/arch_builds/builds_report.py <v8 pack> <v13 pack> --pair <v8 pack> <v13 pack> --out bench/header_diet/results/builds-<host>.json
# Environment: OUT, HOST (h100; h200 where the reply's device says so), ARCH (12.0a).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
S=/tmp/hd-out
HOST=${HOST:-h100}
ARCH=${ARCH:-12.0a}
tag=sm$(echo "$ARCH" | tr -d '.;')
if [ "${COLLECT:-0}" = 1 ]; then
  mkdir -p "$OUT"; cp $S/* "$OUT/" 2>/dev/null
  for series in v8 v13; do  # a pack of the build in progress, as far as it got
    [ -d "/tmp/arch-build-raw/$series-$tag-$HOST" ] && \
      tar -czf "$OUT/$series-$tag-$HOST-raw.tar.gz" -C /tmp/arch-build-raw "$series-$tag-$HOST"
  done
  cat $S/hd-steps.txt 2>/dev/null; exit 0
fi
# shellcheck source=bench/gpu_host/gpu_host_lib.sh
source "$REPO/bench/gpu_host/gpu_host_lib.sh"
run_from_copy /tmp/hd-repo bench/header_diet/pair_on_gpu_host.sh
rm -rf $S; mkdir -p $S
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> $S/hd-steps.txt; }
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
printf 'extends = "nightly-cu130"\n\n%s\n' "$host_lines" > /tmp/hd-v8.toml
printf 'extends = "nightly-cu130-v13"\n\n%s\n' "$host_lines" > /tmp/hd-v13.toml
cp /tmp/hd-v8.toml /tmp/hd-v13.toml $S/
OFFLINE=1 HOST=$HOST ARCH=$ARCH V8=/tmp/hd-v8.toml V13=/tmp/hd-v13.toml PYTHON=python3 OUT=$S bash bench/header_diet/build_pair.sh
step "pair rc=$?"
step "done"
