#!/usr/bin/env bash
# Real nights for a sample of the replay (issue 72): `build-kernel nightly` itself, one night after the other in one
# state folder, each with upstream main standing at that night's commit, built for 12.0a on this host, published to a
# real pypiserver (htpasswd auth) and installed back from it. Raw outputs into OUT; cache, state, wheels and the index
# outside the repository (WORK).
#
#   nohup setsid nice -n 10 bash bench/nightly/build_nights.sh > /tmp/nightly-builds.log 2>&1 < /dev/null &
#
# Nights (NIGHTS, "DATE=COMMIT ..."): the replay's first (v13), the first after its series changed (v13 -> v12 after
# the 41 conflict nights) and its last. Each night's upstream: a bare repository WORK/upstream.git borrowing the
# sglang snapshot's objects (objects/info/alternates), its main moved to the night's commit before the night runs,
# what `git ls-remote` finds at midnight. Sources come through git's own config environment (GIT_CONFIG_*:
# url.<local>.insteadOf the public URLs; SNAP, default /work/.mirror), never a committed file. The recipe is
# nightly-cu130 with this host's lines only (torch = "existing", cuda_source = "system", sgl-flash-attn f866ec34
# for the sgl-attn pin the snapshots lack), as bench/header_diet's overlays. The index is seeded with torch 2.14.1
# and what it requires (pip download from this host's wheelhouses), as a fleet's internal index holds it: the
# install-back resolves the wheel's torch from the index alone. Compiles go through ccache (CCACHE_DIR in WORK,
# emptied first); its statistics after each night are in OUT/<night>/ccache.txt.
# Per night, in OUT/<date>-<commit12>/: night.json (the command's --json), night.err (its log), record.json, the
# night's own log, ccache.txt, load.txt (uptime before and after), index.txt (the index's files after the night).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=200
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
SNAP=${SNAP:-/work/.mirror}
WORK=${WORK:-/work/.bench-nightly}
OUT=${OUT:-$REPO/bench/nightly/raw/local-2c-builds-$(date -u +%Y-%m-%d)}
NIGHTS=${NIGHTS:-"2026-03-06=6ffc74efd7d23627c0245efb61af7f62cde4a970 2026-05-20=7fda3caea41e15cd1f7f1346b825f113e5b27b77 2026-05-26=0753182b50f041be7f8c6e7f5c01ff79e655ecfb"}
mkdir -p "$OUT" "$WORK"
# KEEP_STATE=1 goes on from the state folder and index a run before left (its last good night, an interrupted night
# that the same command resumes): the sample's later nights run after the first, as a service's nights do.
[ "${KEEP_STATE:-0}" = 1 ] || rm -rf "$WORK/state"
rm -f "$WORK/pypi/server.log"
[ "${KEEP_CCACHE:-0}" = 1 ] || rm -rf "$WORK/ccache"

# The upstream: main at the night's commit.
U=$WORK/upstream.git
if [ ! -d "$U" ]; then
    git init -q --bare "$U" && echo "$SNAP/ai-blaise+optimization-playground/repo/objects" > "$U/objects/info/alternates"
fi
_gi=0
_gc() { export GIT_CONFIG_KEY_$_gi="$1" GIT_CONFIG_VALUE_$_gi="$2"; _gi=$((_gi+1)); }
_gc protocol.file.allow always
# git runs a local upload-pack without the GIT_CONFIG_* environment: the snapshots (partial themselves) serve
# filtered fetches of any commit through the remote's own upload-pack command, as .device/gitenv.sh does.
_gc remote.origin.uploadpack "git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true upload-pack"
_gc "url.file://$U.insteadOf" https://github.com/sgl-project/sglang.git
for pair in NVIDIA/cutlass:NVIDIA+cutlass flashinfer-ai/flashinfer:flashinfer-ai+flashinfer \
            sgl-project/DeepGEMM:sgl-project+DeepGEMM sgl-project/sgl-flash-attn:sgl-project+sgl-flash-attn \
            sgl-project/FlashMLA:sgl-project+FlashMLA microsoft/mscclpp:microsoft+mscclpp fmtlib/fmt:fmtlib+fmt \
            nlohmann/json:nlohmann+json; do
    _gc "url.file://$SNAP/${pair#*:}/repo.insteadOf" "https://github.com/${pair%%:*}.git"
done
_gc "url.file://$REPO/.device/triton-src.insteadOf" https://github.com/triton-lang/triton.git  # triton_kernels stand-in
export GIT_CONFIG_COUNT=$_gi

# The recipe: nightly-cu130 with this host's lines.
mkdir -p "$WORK/recipes"
RECIPE=$WORK/recipes/nightly-cu130-2c.toml
cat > "$RECIPE" <<EOF
extends = "$REPO/recipes/nightly-cu130.toml"
description = "nightly-cu130 on the 2-core box: torch and CUDA of the host, sgl-flash-attn f866ec34 for sgl-attn bcf72ccc"

[toolchain]
torch = "existing"
cuda_source = "system"

[deps.repo-flash-attention]
repo = "https://github.com/sgl-project/sgl-flash-attn.git"
commit = "f866ec34002250e74c8bbcbcffa0e1ae71300b2d"
paths = ["csrc/flash_attn", "hopper"]
EOF
# RECIPE_EXTRA: a file of TOML appended to the recipe, what a team changes after a morning report (verify04.toml: the
# 0.4 line's [verify], as the report of a night whose verify failed said to do); recorded per run.
if [ -n "${RECIPE_EXTRA:-}" ]; then printf '\n' >> "$RECIPE"; cat "$RECIPE_EXTRA" >> "$RECIPE"; fi
R_COPY=$OUT/recipe.toml; [ -e "$R_COPY" ] && ! cmp -s "$RECIPE" "$R_COPY" && R_COPY=$OUT/recipe-$(date -u +%H%M%S).toml
cp "$RECIPE" "$R_COPY"

# The index: a real pypiserver with htpasswd auth, seeded with torch and its requirements.
mkdir -p "$WORK/pypi/packages"
[ -n "$(ls "$WORK/pypi/packages"/torch-2.14.1-*.whl 2>/dev/null)" ] || \
    "$PY" -m pip download -q torch==2.14.1 -d "$WORK/pypi/packages" > "$OUT/seed.log" 2>&1
[ "${KEEP_STATE:-0}" = 1 ] || find "$WORK/pypi/packages" -name 'sgl_kernel-*' -delete
PASS=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
"$PY" - "$WORK/pypi/htpasswd" "$PASS" <<'EOF'
import sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)
from passlib.apache import HtpasswdFile
h = HtpasswdFile(sys.argv[1], new=True); h.set_password("nightly", sys.argv[2]); h.save()
EOF
PORT=${PORT:-18088}
"$PY" -m pypiserver run -p "$PORT" -i 127.0.0.1 -a update -P "$WORK/pypi/htpasswd" --disable-fallback \
    "$WORK/pypi/packages" > "$WORK/pypi/server.log" 2>&1 &
PYPI_PID=$!
trap 'kill $PYPI_PID 2>/dev/null' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.2; done
export TWINE_USERNAME=nightly TWINE_PASSWORD=$PASS

export BUILD_KERNEL_CACHE_DIR=$WORK/cache BUILD_KERNEL_OUTPUT_DIR=$WORK/wheels
export BUILD_KERNEL_COMPILE_CACHE=ccache CCACHE_DIR=$WORK/ccache
# No GPU driver on this box: the install-back imports the published wheel, which links libcuda.so.1. STUB (a folder
# holding a libcuda.so.1 whose every call answers CUDA_ERROR_NO_DEVICE, e.g. the one the build generates under
# WORK/cache/driver-stub/) goes on LD_LIBRARY_PATH for the whole night, as verify puts its own (cuda_driver.for_load).
[ -n "${STUB:-}" ] && export LD_LIBRARY_PATH=$STUB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
HOSTF=$OUT/host.txt; [ -e "$HOSTF" ] && HOSTF=$OUT/host-$(date -u +%H%M%S).txt  # one per run into OUT
{ nproc; date -u; uptime; grep -E 'MemTotal|MemAvailable' /proc/meminfo; git -C "$REPO" rev-parse HEAD
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nvcc --version | tail -1
  ccache --version | head -1; echo "nights: $NIGHTS"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "index: http://127.0.0.1:$PORT/ (pypiserver, htpasswd)"
} > "$HOSTF" 2>&1
ccache -z > /dev/null 2>&1
for item in $NIGHTS; do
    night=${item%%=*} commit=${item#*=}
    D=$OUT/$night-${commit:0:12}
    [ -e "$D" ] && mv "$D" "$D.before-$(date -u +%H%M%S)"  # an earlier try of the night is kept, never overwritten
    mkdir -p "$D"
    git -C "$U" update-ref refs/heads/main "$commit"
    uptime > "$D/load.txt"
    t0=$(date +%s)
    nice -n 10 "$PY" -m build_kernel --json nightly --recipe "$RECIPE" --state-dir "$WORK/state" --night "$night" \
        --to "http://127.0.0.1:$PORT/" > "$D/night.json" 2> "$D/night.err"
    rc=$?
    echo "rc=$rc wall_s=$(( $(date +%s) - t0 ))" > "$D/rc.txt"
    uptime >> "$D/load.txt"
    ccache -s > "$D/ccache.txt" 2>&1
    cp "$WORK"/state/nights/*"${commit:0:12}"*.json "$D/record.json" 2>/dev/null
    cp "$WORK"/state/logs/*"${commit:0:12}"* "$D/" 2>/dev/null
    ls -l "$WORK/pypi/packages" | grep -i sgl > "$D/index.txt"
    echo "$night ${commit:0:12} rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/steps.txt"
done
echo done >> "$OUT/steps.txt"
