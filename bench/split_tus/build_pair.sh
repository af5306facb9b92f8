#!/usr/bin/env bash
# Issue 56 item 4: the split series against v8, both cold, one after the other on one host, by the tool.
#
#   V8=/tmp/ov/local.toml V11=/tmp/ov/v11-local.toml ARCH=12.0a HOST=2c OUT=bench/split_tus/raw/<dir> bash bench/split_tus/build_pair.sh
#
# Each overlay is a shipped recipe with the host's lines only (V11 adds `[patches] version = "v11"` and
# `SGL_KERNEL_SPLIT_TUS=ON`). The pair runs in the order v8, v11 with FORCE=1 (every compile runs: no cached wheel,
# no build folder kept), so both see the same box, page cache and toolchain; packs are <series>-<arch>-<HOST>-raw
# .tar.gz under OUT, as bench/arch_builds/build_one.sh writes them, and bench/arch_builds/builds_report.py reads them.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
ARCH=${ARCH:-12.0a}
HOST=${HOST:?a host label, e.g. 2c or h200}
: "${V8:?the v8 overlay}" "${V11:?the v11 overlay}"  # both named before the first build starts
tag=sm$(echo "$ARCH" | tr -d '.;')
cold() { FORCE=1 RECIPE=$2 ARCH=$ARCH LABEL=$1-$tag-$HOST bash "$REPO/bench/arch_builds/build_one.sh"; }
cold v8 "$V8"
cold v11 "$V11"
