#!/bin/bash
# The done-when of issue 66: a fresh clone, `make wheel ARCH=12.0a` of the default recipe with the one overlay (sgl-attn stand-in),
# GitHub reached through git insteadOf to the public snapshots. Run at nice 19 beside the session's other work.
cd /work/realbuild/fresh
export MIRRORS=/work/.mirror TRITON=/work/realbuild/triton-src
source /work/realbuild/gitenv.sh
export BUILD_KERNEL_CACHE_DIR=/work/realbuild/cache
date -u +%FT%TZ > /work/realbuild/started
/usr/bin/time -v make wheel RECIPE=/work/realbuild/overlay.toml ARCH=12.0a > /work/realbuild/make-wheel.log 2>&1
echo "rc=$?" >> /work/realbuild/make-wheel.log
date -u +%FT%TZ > /work/realbuild/ended
