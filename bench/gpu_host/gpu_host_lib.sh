# Steps shared by the GPU-host scripts (bench/gpu_host/serve_probe_bisect.sh, bench/gpu_host/pair_and_tests.sh): sourced, not run.
# They run in the repository copy (cwd) with its carried .device folder; REPO and BUILD_KERNEL_CACHE_DIR are the
# caller's.

host_record() {  # $1: the file: the host, its GPU, the compilers the environment sets, the Python stack
  { date -u; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader; nproc
    grep MemTotal /proc/meminfo; echo "CC=${CC:-} CXX=${CXX:-} CUDAHOSTCXX=${CUDAHOSTCXX:-}"; nvcc --version | tail -1
    python3 -c 'import torch, transformers, triton; print(torch.__version__, torch.version.cuda, transformers.__version__, triton.__version__)'
  } > "$1" 2>&1
}

run_from_copy() {  # $1: the copy's folder, $2: the script, relative to the repository (bench/<study>/NAME.sh). A detached
  # run re-executes itself once from a copy: each later device call syncs the working tree again, and the run must
  # not change under itself. The copy holds HEAD.txt (the commit it was made from).
  [ -n "${BK_RUN_COPY:-}" ] && return 0
  rm -rf "$1" && mkdir -p "$1"
  cp -r build_kernel bench recipes patches examples pyproject.toml .device "$1"/
  git -C "$REPO" rev-parse HEAD > "$1/HEAD.txt" 2>/dev/null
  exec env BK_RUN_COPY=1 bash "$1/$2"
}

tool_setup() {  # $1: the log, $2: the carried wheels (.device/wh), $3: the carried mirrors (.device/mirrors). The
  # tool's own dependencies; the carried mirrors as the cache's (fetch runs --offline)
  local wh=${2:-.device/wh} mirrors=${3:-.device/mirrors}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/bk-site \
    "$wh"/[Gg]it[Pp]ython*.whl "$wh"/gitdb*.whl "$wh"/smmap*.whl "$wh"/unidiff*.whl "$wh"/pyelftools*.whl > "$1" 2>&1
  export PYTHONPATH=$REPO:/tmp/bk-site
  mkdir -p "$BUILD_KERNEL_CACHE_DIR" && rm -rf "$BUILD_KERNEL_CACHE_DIR/mirrors" \
    && cp -r "$mirrors" "$BUILD_KERNEL_CACHE_DIR/mirrors"
}

serve_env() {  # $1: the log, $2: the carried wheelhouse (.device/wh), the rest: more wheels. /tmp/sgenv: the serve
  # stage's own environment.create over the host's torch, with the wheelhouse's wheels but the tool's own dependencies
  # and the rest --no-deps (sglang's whole requirement list does not fit a carry, so no `serve --install`)
  local log=$1 wh=${2:-.device/wh}
  shift $(( $# < 2 ? $# : 2 ))
  python3 - > "$log" 2>&1 <<'PY'
import os
from pathlib import Path
from build_kernel.stages.serve import environment
print(environment.create(Path("/tmp/sgenv"), "/opt/torch/.venv/bin/python3", dict(os.environ)))
PY
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    $(ls "$wh"/*.whl | grep -v -i -E '/(gitpython|gitdb|smmap|unidiff|pyelftools)-') "$@" >> "$log" 2>&1
}
