#!/usr/bin/env bash
# Make the gitignored .device/ folder that bench/gpu_host/serve_probe_bisect.sh (and moe_serve_on_gpu_host.sh) carry to the GPU
# host, on a machine with the public snapshots and a package index (made for issue 54, 2026-12-05: 49 MB, under the
# device tool's 64 MiB carry with the tree's ~5 MB):
#
#   MIRRORS=/work/.mirror bash bench/gpu_host/make_device_folder.sh
#
# MIRRORS: a folder of bare snapshots named <owner>+<name>/repo (sgl-project/sglang as
# ai-blaise+optimization-playground, which keeps upstream's hashes; NVIDIA+cutlass, flashinfer-ai+flashinfer,
# sgl-project+DeepGEMM, sgl-project+sgl-flash-attn, sgl-project+FlashMLA, microsoft+mscclpp, fmtlib+fmt,
# nlohmann+json). Nothing here names a snapshot in a recipe: the recipes keep their public URLs, and
# .device/gitenv.sh rewrites them for git at run time only.
#
# What it writes:
#   .device/h9.toml, h12.toml   overlays of nightly-cu130-pruned with the host's lines only (torch "existing",
#                               system CUDA, 9.0a with FA3 for the tiny MoE's head dim 64 / 12.1a, and sgl-flash-attn
#                               f866ec34 for sgl-attn bcf72ccc, which no public snapshot holds)
#   .device/h9s.toml            nightly-cu130 as shipped, 9.0a, with the same host lines (and its one no-network test)
#   .device/h9u.toml            the unpruned reference (nightly-cu130-unpruned) for 9.0a, FA3 off, the same host lines
#   .device/h9nofa.toml         nightly-cu130-pruned for 9.0a, FA3 off, the same host lines: the smallest wheel that
#                               serves the tiny Llama (serving/api_key_on_gpu_host.sh in a short hold)
#   .device/gitenv.sh           git's url.<snapshot>.insteadOf=<public URL> through GIT_CONFIG_COUNT; a file://
#                               upload-pack gets its filter/SHA-want settings through remote.origin.uploadpack
#                               (git clears GIT_CONFIG_* for local transports)
#   .device/triton-src          a stand-in for triton's tag v3.5.1 (no snapshot has it): python/triton_kernels only,
#                               which sgl-kernel merely installs into the wheel
#   .device/mirrors             the tool's own partial mirrors after `build-kernel fetch` (blob-less, the build's
#                               paths only: ~9 MB), copied into the host's cache so the build runs --offline
#   .device/h43.toml            nightly-0.4 as shipped (0.4.3 @ 0753182b, 9.0a with its FA3) with the same host lines and
#                               the no-network test expectation (issue 55: its tests and serve on the GPU host)
#   .device/h43u.toml           nightly-0.4-unpruned (series v12-unpruned) with the same host lines, FA3 off: h43.toml's
#                               reference for the pruned/unpruned pairs (issue 55 item 2)
#   .device/mirrors43           the partial mirrors of h43.toml's fetch (its tests included)
#   .device/wht, wht43          the test wheelhouses: the tool's dependencies, gguf and einops (wht43: transformers and
#                               tokenizers at 0753182b's pins too), and the sglang wheel of
#                               the kernel's commit (6ffc74ef / 0753182b), for `build-kernel test --wheelhouse`
#   .device/wh43                issue 55's serve wheelhouse: wh with 0753182b's pins (flashinfer, tvm-ffi), no sglang
#   .device/wh                  wheels for Python 3.12: the tool's dependencies, what sglang's server and
#                               bench_serving import beyond the host's packages, and the sglang wheel of the
#                               kernel's commit (built by the serve stage's own sglang_dist.build)
set -eu
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
: "${MIRRORS:?a folder of <owner>+<name>/repo bare snapshots}"
PY=${PY:-$REPO/.venv/bin/python}
D=$REPO/.device
mkdir -p "$D"

cat > "$D/gitenv.sh" <<'EOF'
# Source me: git rewrites the recipe's public URLs to local snapshots, through git's own config environment.
# MIRRORS: folder of <owner>+<name>/repo bare snapshots; TRITON: the triton_kernels stand-in. Run time only.
_gi=0
_gc() { export GIT_CONFIG_KEY_$_gi="$1" GIT_CONFIG_VALUE_$_gi="$2"; _gi=$((_gi+1)); }
_gc protocol.file.allow always
_gc remote.origin.uploadpack "git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true upload-pack"
_gm() { [ -d "$MIRRORS/$2/repo" ] && _gc "url.file://$MIRRORS/$2/repo.insteadOf" "https://github.com/$1"; }
_gm sgl-project/sglang.git ai-blaise+optimization-playground
_gm NVIDIA/cutlass.git NVIDIA+cutlass
_gm flashinfer-ai/flashinfer.git flashinfer-ai+flashinfer
_gm sgl-project/DeepGEMM.git sgl-project+DeepGEMM
_gm sgl-project/sgl-flash-attn.git sgl-project+sgl-flash-attn
_gm sgl-project/FlashMLA.git sgl-project+FlashMLA
_gm microsoft/mscclpp.git microsoft+mscclpp
_gm fmtlib/fmt.git fmtlib+fmt
_gm nlohmann/json.git nlohmann+json
[ -n "${TRITON:-}" ] && _gc "url.file://$TRITON.insteadOf" "https://github.com/triton-lang/triton.git"
export GIT_CONFIG_COUNT=$_gi
unset -f _gc _gm; unset _gi
EOF

FA=$(cat <<'EOF'
# The public snapshots lack sgl-attn bcf72ccc: sgl-flash-attn f866ec34 (0.3.21's own pin) stands in.
[deps.repo-flash-attention]
repo = "https://github.com/sgl-project/sgl-flash-attn.git"
commit = "f866ec34002250e74c8bbcbcffa0e1ae71300b2d"
paths = ["csrc/flash_attn", "hopper"]
EOF
)
# The host has no network: the one test file that downloads at import cannot be collected there (h9s, h43).
NO_NETWORK=$(cat <<'EOF'
[test.expect."test_gguf.py"]
outcome = "uncollectable"
reason = "it downloads its sample from the Hugging Face hub at import; the GPU host has no network"
evidence = "LocalEntryNotFoundError / ConnectError 'Temporary failure in name resolution' at collection (H200, 2026-12-03, at 6ffc74ef)"
EOF
)
cat > "$D/h9.toml" <<EOF
# The GPU host (sm_90a, nvcc 13.0, torch 2.11+cu130 at /opt/torch/.venv, no network): host lines only.
extends = "nightly-cu130-pruned"
description = "issue 54: nightly-cu130-pruned on the GPU host, 9.0a, FA3 for the tiny MoE (head_dim 64, bf16)"

[toolchain]
torch = "existing"
cuda_source = "system"

[build]
arch = ["9.0a"]
fp4 = false
# The tiny MoE (bench/serving/tiny_moe.py): head_dim 64, bf16 KV, no softcap; sglang's H200 default attention is fa3.
fa3 = "listed"
fa3_head_dims = ["64"]
fa3_dtypes = ["bf16"]

[build.defines]
SGL_KERNEL_FA3 = "ON"

$FA
EOF
cat > "$D/h12.toml" <<EOF
# Issue 53 on the GPU host: the same recipe for 12.1a (GB10), built and statically verified only.
extends = "nightly-cu130-pruned"
description = "issue 53: nightly-cu130-pruned on the GPU host for 12.1a (static verify only)"

[toolchain]
torch = "existing"
cuda_source = "system"

$FA
EOF

cat > "$D/h9s.toml" <<EOF
# Issue 53 item 4 on the GPU host: the shipped recipe (nightly-cu130) for 9.0a with only the host's lines, then
# build-kernel test against its wheel. Its FA3 is the shipped one (the recipe's model: head dim 256).
extends = "nightly-cu130"
description = "issue 53: nightly-cu130 as shipped on the GPU host (host lines only)"

[toolchain]
torch = "existing"
cuda_source = "system"

$NO_NETWORK

$FA
EOF

cat > "$D/h9u.toml" <<EOF
# Issue 54 item 5: the unpruned reference (sm120/v7-unpruned) for 9.0a, FA3 off, as the H200 run of 2026-12-03
# built it: host lines only. Its wheel is built on the 2-core box with torch 2.11.0+cu130 (the host's) and carried.
extends = "nightly-cu130-unpruned"
description = "issue 54: the unpruned reference for 9.0a, FA3 off (host lines only)"

[toolchain]
torch = "existing"
cuda_source = "system"

[build]
arch = ["9.0a"]

[build.defines]
SGL_KERNEL_FA3 = "OFF"

$FA
EOF

# The triton_kernels stand-in, tagged v3.5.1 (0.3.21's pin) and v3.6.0 (0.4.3's); fixed dates: the same commit every
# time.
# The smallest 9.0a wheel real sglang serves the tiny Llama with (triton attention): FA3 off (serving/api_key_on_gpu_host.sh
# with RECIPE=.device/h9nofa.toml in a short hold).
cat > "$D/h9nofa.toml" <<EOF
extends = "nightly-cu130-pruned"
description = "nightly-cu130-pruned on the GPU host, 9.0a, FA3 off (host lines only)"

[toolchain]
torch = "existing"
cuda_source = "system"

[build]
arch = ["9.0a"]
fp4 = false

[build.defines]
SGL_KERNEL_FA3 = "OFF"

$FA
EOF

rm -rf "$D/triton-src" && mkdir -p "$D/triton-src/python/triton_kernels/triton_kernels"
echo "# Stand-in for triton v3.5.1's python/triton_kernels: sgl-kernel only installs this folder." \
  > "$D/triton-src/python/triton_kernels/triton_kernels/__init__.py"
( cd "$D/triton-src" && git init -q && git add -A \
  && GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z \
     git -c user.name=standin -c user.email=standin@localhost commit -qm "triton_kernels stand-in" \
  && git tag v3.5.1 && git tag v3.6.0 )

# The partial mirrors: the tool's own fetch against the snapshots, into a scratch cache.
export MIRRORS TRITON=$D/triton-src
# shellcheck source=/dev/null
source "$D/gitenv.sh"
C=$(mktemp -d)
"$PY" -m build_kernel --cache-dir "$C" fetch --recipe "$D/h9.toml" > /dev/null
rm -rf "$D/mirrors" && mkdir -p "$D/mirrors" && cp -r "$C"/mirrors/*.git "$D/mirrors/"

# The wheelhouse: the tool's dependencies and what sglang's server imports beyond the host's packages (the list
# that let sglang 0.5.9 start there, 2026-12-01: shared/data/sglang-0.5.9-offline-wheels-h200.txt), plus datasets
# and multiprocess (bench_serving imports sglang.benchmark.datasets.mmmu, which imports datasets).
mkdir -p "$D/wh"
LIST=${WHEEL_LIST:-$REPO/../shared/data/sglang-0.5.9-offline-wheels-h200.txt}
{ grep -v '^#' "$LIST" | grep -v '^sglang-' | sed -E 's/^(.*)-([^-]+)$/\1==\2/'
  printf '%s\n' GitPython gitdb smmap unidiff pyelftools datasets multiprocess; } > "$C/wheels.txt"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$D/wh" -r "$C/wheels.txt"
# sglang of the kernel's commit (python/ of the same snapshot), as the serve stage builds it.
sglang_wheel() {  # $1: a recipe, $2: where the wheel goes
  "$PY" - "$1" "$C" "$2" <<'PY'
import os, shutil, sys
from pathlib import Path
from build_kernel import recipe
from build_kernel.plan import resolve
from build_kernel.stages.serve import sglang_dist
plan = resolve(recipe.load(sys.argv[1]), cache_dir=Path(sys.argv[2]))
wheel = sglang_dist.build(plan, sys.executable, dict(os.environ), log_path=Path(sys.argv[2]) / "sglang-build.log")
shutil.copy2(wheel, sys.argv[3])
print(wheel.name)
PY
}
sglang_wheel "$D/h9.toml" "$D/wh"

# Issue 55: nightly-0.4 (0.4.3 @ 0753182b) on the GPU host, as shipped (9.0a with its FA3), host lines only.
cat > "$D/h43.toml" <<TOML
# Issue 55 on the GPU host: nightly-0.4 as shipped (series v12) with only the host's lines.
extends = "nightly-0.4"
description = "issue 55: nightly-0.4 as shipped on the GPU host (host lines only)"

[toolchain]
torch = "existing"
cuda_source = "system"

$NO_NETWORK

$FA
TOML
# Its unpruned reference (nightly-0.4-unpruned, series v12-unpruned) with the same lines and FA3 off: every FA3 variant
# (fa3 = "all", 250 units) does not fit a hold. Built for 9.0a and 12.0a beside h43.toml (issue 55 item 2).
cat > "$D/h43u.toml" <<TOML
# Issue 55 on the GPU host: nightly-0.4's unpruned reference with only the host's lines, FA3 off.
extends = "nightly-0.4-unpruned"
description = "issue 55: nightly-0.4-unpruned on the GPU host (host lines only, FA3 off)"

[toolchain]
torch = "existing"
cuda_source = "system"

[build.defines]
SGL_KERNEL_FA3 = "OFF"

$FA
TOML
C43=$(mktemp -d)
"$PY" -m build_kernel --cache-dir "$C43" fetch --recipe "$D/h43.toml" > /dev/null
rm -rf "$D/mirrors43" && mkdir -p "$D/mirrors43" && cp -r "$C43"/mirrors/*.git "$D/mirrors43/"
rm -rf "$C43"

# The test wheelhouses (`build-kernel test --wheelhouse`): only what the host lacks for the tests, so that a wheel
# fits beside them in one carry: the tool's dependencies, the [test] requires the host lacks (gguf, einops), and
# the sglang of each commit.
for w in wht wht43; do
  rm -rf "${D:?}/$w" && mkdir -p "$D/$w"
  cp "$D"/wh/[Gg]it[Pp]ython*.whl "$D"/wh/gitdb*.whl "$D"/wh/smmap*.whl "$D"/wh/unidiff*.whl "$D"/wh/pyelftools*.whl \
     "$D"/wh/gguf*.whl "$D/$w/"
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$D/$w" einops
done
cp "$D"/wh/sglang-*.whl "$D/wht/"
# nightly-0.4's [test] requires beyond the host's: sglang 0753182b's transformers pin (the host's 5.17.0 already
# registers the qwen3_asr config that sglang registers too: ValueError at `import sglang.srt.server_args`) and the
# tokenizers that transformers 5.8.1 accepts (<=0.23.0; the host has 0.23.2).
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$D/wht43" transformers==5.8.1 tokenizers==0.22.2
sglang_wheel "$D/h43.toml" "$D/wht43"

# Issue 55's serve wheelhouse: wh's wheels with 0753182b's own pins where they differ (flashinfer-python
# 0.6.11.post1, apache-tvm-ffi 0.1.9; not xgrammar 0.2.0, whose 45 MB wheel does not fit the carry: wh's 0.1.27
# imports, enough for a serve without grammar-constrained requests), what they add that the host lacks (cuda-tile, easydict;
# soundfile 0.13.1 with cffi and pycparser: 0753182b's http_server imports its OpenAI transcription endpoint, which
# imports soundfile, and the H100 hold of 2026-12-06 stopped there), and no sglang (wht43 holds 0753182b's): ~42 MB,
# carried by a call of its own (the tests' carry is full).
rm -rf "$D/wh43" && mkdir -p "$D/wh43"
cp $(ls "$D"/wh/*.whl | grep -v -E '/(sglang|flashinfer_python|apache_tvm_ffi)-') "$D/wh43/"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$D/wh43" flashinfer-python==0.6.11.post1 apache-tvm-ffi==0.1.9 cuda-tile easydict \
  soundfile==0.13.1 cffi==2.1.1 pycparser

# The tests' environment on the host: no index, so sglang comes --no-deps (resolve = false) and every distribution
# the carried wheelhouses hold beyond the tool's own is named in [test] requires, beside the recipe's own. Fewer
# is not safe: the 2026-12-06 runs named only what a local copy of the host's packages lacked, and on the host
# sglang's import then missed pybase64 and flashinfer (6ffc74ef) or pydantic (0753182b). The host's own
# `pip freeze` is in every run_on_gpu_host.sh pack (host-freeze.txt).
test_requires() {  # $1: the overlay, $2: the recipe it extends, $3...: the wheelhouses its tests install from
  "$PY" - "$@" <<'PY'
import sys
from pathlib import Path
from build_kernel.recipe import load
overlay, recipe, houses = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
tool = {"gitpython", "gitdb", "smmap", "unidiff", "pyelftools", "sglang"}
reqs = {r.split("==")[0].split(">")[0].split("<")[0].strip().lower().replace("_", "-"): r
        for r in load(recipe).test.requires}
for house in houses:
    for whl in sorted(Path(house).glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        key = name.lower().replace("_", "-")
        if key not in tool and key not in reqs:
            reqs[key] = f"{key}=={version}"
with overlay.open("a") as fh:
    fh.write("\n# No index on the host: sglang --no-deps, and what the carried wheelhouses hold beyond the tool's own.\n"
             "[test]\nresolve = false\nrequires = [" + ", ".join(f'"{r}"' for r in reqs.values()) + "]\n")
print(overlay.name, len(reqs), "requires")
PY
}
test_requires "$D/h9s.toml" nightly-cu130 "$D/wh"
test_requires "$D/h43.toml" nightly-0.4 "$D/wh43" "$D/wht43"
rm -rf "$C"
du -sh "$D"
