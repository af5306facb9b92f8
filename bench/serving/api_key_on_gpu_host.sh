#!/usr/bin/env bash
# Does real sglang refuse a request without its API key, and does the hardened unit's server still serve?
# (docs/serving.md, "Who gets in"). On the GPU host, offline, with the device folder carried (.device,
# bench/gpu_host/README.md). With a wheel at hand (WHEEL=..., or one an earlier call left in /tmp/bkw), one call:
#
#   WHEEL=/path/to/sgl_kernel-...whl bash bench/serving/api_key_on_gpu_host.sh
#
# On a fresh machine the tool builds the wheel first (~400 s): run it detached, then collect in a later call:
#
#   setsid bash bench/serving/api_key_on_gpu_host.sh > /tmp/api-key.log 2>&1 < /dev/null &
#   cp /tmp/api-key-out/api-key-raw.tar.gz /tmp/api-key.log "$OUT"/; cat /tmp/api-key-raw/steps.txt
#
# 1. keyed: real sglang started through build_kernel/stages/serve/keyed/launch_with_key.py (the wrapper the unit
#    and `serve --launch` use) on the tiny Llama (bench/serving/tiny_model.py, random weights), bound to 0.0.0.0,
#    the key in a 0600 file (made by the tool's api_key.ensure). Asked: /generate without the key (401 expected),
#    with a wrong key (401), with the key (200), /health_generate without it (200: sglang leaves health open); the
#    server's /proc/PID/cmdline and its log must not hold the key (its ServerArgs line shows api_key='***').
# 2. unit: the same server under the unit's restrictions as far as a container allows: a non-root user (nobody,
#    via setpriv: no new privileges, an empty capability bounding set, no supplementary groups), umask 0077, HOME,
#    XDG/triton/inductor/flashinfer caches in a state and a cache folder of that user's, the model read-only (a
#    root-owned copy, mode a-w), the key as a credential file of that user's (0400), and, where bwrap runs here,
#    the file system read-only but those folders and /dev (ProtectSystem=strict, PrivateTmp, ProtectHome). Asked as
#    in 1. What could not be applied (systemd's SystemCallFilter, RestrictAddressFamilies, DevicePolicy, ...) is
#    listed in not-applied.txt.
# Everything lands in $OUT/api-key-raw.tar.gz (packed after each step).
#
# Environment: WHEEL (the kernel wheel; default the newest in $BUILD_KERNEL_OUTPUT_DIR, /tmp/bkw, else the tool builds
# RECIPE's, .device/h9.toml, from the carried mirrors first), SERVE_PYTHON
# (an environment with sglang and the wheel; default: /tmp/sgenv made from .device/wh by gpu_host_lib.sh's serve_env,
# then WHEEL installed --no-deps), ARGS (sglang flags; default below: triton attention, no CUDA graphs, a small
# memory share: the point is the door, not speed), HEALTH_S (600), OUT (/tmp/api-key-out), UNIT (1: run step 2),
# MODEL (a checkpoint folder; default: the tiny Llama, made), KEYED (1: run step 1), MODULE (sglang.launch_server; the script's own dry run
# off the GPU host: MODULE=sglang_double PYTHONPATH=tests/serve_double SERVE_PYTHON=.venv/bin/python MODEL=DIR).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/api-key-out}
HEALTH_S=${HEALTH_S:-600}
UNIT=${UNIT:-1}
ARGS=${ARGS:---attention-backend triton --disable-cuda-graph --disable-piecewise-cuda-graph --mem-fraction-static 0.3}
export BUILD_KERNEL_OUTPUT_DIR=${BUILD_KERNEL_OUTPUT_DIR:-/tmp/bkw}
# shellcheck source=../gpu_host/gpu_host_lib.sh
source bench/gpu_host/gpu_host_lib.sh
run_from_copy /tmp/api-key-repo bench/serving/api_key_on_gpu_host.sh  # a detached run must not change under itself
R=/tmp/api-key-raw; rm -rf "$R"; mkdir -p "$R" "$OUT"
t0=$(date +%s)
step() { echo "$(( $(date +%s) - t0 )) s: $*" >> "$R/steps.txt"; tar -czf "$OUT/api-key-raw.tar.gz" -C "$R" .; }
host_record "$R/host.txt"; cat "$REPO/HEAD.txt" >> "$R/host.txt" 2>&1
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}

# The serve environment and the tiny model.
SERVE_PYTHON=${SERVE_PYTHON:-}
if [ -z "$SERVE_PYTHON" ]; then
  WHEEL=${WHEEL:-$(ls -t "$BUILD_KERNEL_OUTPUT_DIR"/*.whl 2>/dev/null | head -1)}
  if [ -z "$WHEEL" ]; then  # a fresh machine: the tool builds RECIPE's wheel offline first (~400 s on a 16-core H100 host)
    export BUILD_KERNEL_CACHE_DIR=${BUILD_KERNEL_CACHE_DIR:-/tmp/bkc}
    tool_setup "$R/tool.log"
    python3 -m build_kernel --offline --json build --recipe "${RECIPE:-.device/h9.toml}" > "$R/build.json" 2> "$R/build.err"
    step "build rc=$?"
    WHEEL=$(ls -t "$BUILD_KERNEL_OUTPUT_DIR"/*.whl 2>/dev/null | head -1)
  fi
  [ -n "$WHEEL" ] || { step "no kernel wheel (WHEEL, one in $BUILD_KERNEL_OUTPUT_DIR, or a build): see build.err"; exit 1; }
  echo "wheel: $WHEEL" >> "$R/host.txt"
  [ -x /tmp/sgenv/bin/python ] || serve_env "$R/env.log" .device/wh
  /tmp/sgenv/bin/python -m pip install -q --no-index --no-deps --force-reinstall --no-compile "$WHEEL" >> "$R/env.log" 2>&1
  SERVE_PYTHON=/tmp/sgenv/bin/python
fi
"$SERVE_PYTHON" -c 'import sglang, sgl_kernel; print("sglang", sglang.__version__, "sgl_kernel", sgl_kernel.__file__)' \
  >> "$R/host.txt" 2>&1; step "serve environment $SERVE_PYTHON rc=$?"
MODULE=${MODULE:-sglang.launch_server}
MODEL=${MODEL:-/tmp/api-key-model}
[ -f "$MODEL/config.json" ] || "$SERVE_PYTHON" bench/serving/tiny_model.py "$MODEL" > "$R/model.log" 2>&1
step "tiny model rc=$?"

# The key: the tool's own api_key.ensure (0600, written whole).
KEY_FILE=/tmp/api-key-credstore/tiny.api-key
rm -rf /tmp/api-key-credstore
python3 - "$KEY_FILE" "$REPO/build_kernel/stages/serve/api_key.py" > "$R/key.txt" 2>&1 <<'PY'
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("api_key", sys.argv[2])  # the module alone: the stages' imports need rich
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
print("made:", mod.ensure(Path(sys.argv[1])))
PY
stat -c '%a %U %n' "$KEY_FILE" >> "$R/key.txt" 2>&1
KEY=$(cat "$KEY_FILE")

ask() {  # $1: label, $2: URL path, $3: key ("" none), $4: port -> "label status" into statuses.txt
  python3 - "$1" "$2" "$3" "$4" >> "$R/statuses.txt" 2>&1 <<'PY'
import json, sys, urllib.error, urllib.request
label, path, key, port = sys.argv[1:5]
data = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data if path == "/generate" else None,
                             headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})})
try:
    with urllib.request.urlopen(req, timeout=120) as resp:
        print(label, resp.status, resp.read()[:200].decode(errors="replace").replace(key or "\0", "***"))
except urllib.error.HTTPError as exc:
    print(label, exc.code, exc.read()[:200].decode(errors="replace"))
except OSError as exc:
    print(label, 0, exc)
PY
}

descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }

serve_and_ask() {  # $1: run name, $2: port, the rest: the command that starts the server (its env set by the caller)
  local name=$1 port=$2; shift 2
  "$@" --model-path "$MODEL" --host 0.0.0.0 --port "$port" $ARGS > "$R/$name-server.log" 2>&1 &
  local pid=$! waited=0
  until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' \
      "http://127.0.0.1:$port/health_generate" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { echo "$name: server exited before healthy" >> "$R/statuses.txt"; step "$name died"; return 1; }
    [ $waited -ge "$HEALTH_S" ] && { echo "$name: not healthy after $HEALTH_S s" >> "$R/statuses.txt"; break; }
    sleep 2; waited=$((waited + 2))
  done
  echo "$name: healthy after ~$waited s" >> "$R/statuses.txt"
  ask "$name without-key" /generate "" "$port"
  ask "$name wrong-key" /generate "not-$KEY" "$port"
  ask "$name with-key" /generate "$KEY" "$port"
  ask "$name health-without-key" /health_generate "" "$port"
  # Every process of the server: its command line and environment must not hold the key.
  for p in $pid $(descendants $pid); do
    [ -r /proc/$p/cmdline ] || continue
    { tr '\0' ' ' < /proc/$p/cmdline; echo; } >> "$R/$name-cmdlines.txt"
    if grep -qF -- "$KEY" /proc/$p/cmdline /proc/$p/environ 2>/dev/null; then echo "$name: KEY IN pid $p" >> "$R/statuses.txt"; fi
  done
  local tree; tree="$pid $(descendants $pid)"  # the server and every child (sglang's scheduler, detokenizer)
  kill -INT $tree 2>/dev/null; sleep 5; kill -9 $tree 2>/dev/null; wait $pid 2>/dev/null
  echo "$name: key in the server log: $(grep -cF -- "$KEY" "$R/$name-server.log") line(s); api_key shown as: \
$(grep -o "api_key='[^']*'" "$R/$name-server.log" | head -1 | sed "s/$KEY/THE-KEY/")" >> "$R/statuses.txt"
  step "$name done"
}

# 1. keyed, as this host's user (root in the container). KEYED=0: step 2 alone (a hold with little time left).
if [ "${KEYED:-1}" = 1 ]; then
  BUILD_KERNEL_API_KEY_FILE=$KEY_FILE serve_and_ask keyed 30000 \
    "$SERVE_PYTHON" "$REPO/build_kernel/stages/serve/keyed/launch_with_key.py" "$MODULE"
fi

# 2. the unit's restrictions, as far as this host allows.
if [ "$UNIT" = 1 ]; then
  U=/tmp/bk-unit; rm -rf "$U"; mkdir -p "$U/state" "$U/cache" "$U/credentials" "$U/model"
  # read-only, root's, readable by the service user: transformers writes the weights 0600 (its first GPU run: sglang
  # as nobody could not open model.safetensors, which safetensors reports as "No such file or directory")
  cp -r "$MODEL"/. "$U/model/"; chmod -R a+rX,a-w "$U/model"
  cp "$REPO/build_kernel/stages/serve/keyed/launch_with_key.py" "$U/launch_with_key.py"  # the repo may be under /root
  install -m 0400 -o nobody "$KEY_FILE" "$U/credentials/api-key"                         # as LoadCredential= leaves it
  chown -R nobody "$U/state" "$U/cache"; chmod 0755 "$U"
  RUN=(setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs --bounding-set=-all --inh-caps=-all)
  applied="User (nobody), NoNewPrivileges, CapabilityBoundingSet= (empty), AmbientCapabilities=, UMask=0077, StateDirectory/CacheDirectory (HOME, XDG_CACHE_HOME, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, FLASHINFER_WORKSPACE_BASE), the model read-only, LoadCredential= (a 0400 file of the user's)"
  # / read-only, a private /tmp with the serve environment and the unit's folders bound back (the state and cache
  # writable), empty homes; /dev stays the host's (the GPU, /dev/shm for NCCL).
  # As the unit binds them back: the environment and its base interpreter's prefix (either may be under /tmp or /root).
  ENV_ROOT=$(dirname "$(dirname "$SERVE_PYTHON")"); BASE_ROOT=$(dirname "$(dirname "$(readlink -f "$SERVE_PYTHON")")")
  BW=(bwrap --unshare-pid --ro-bind / / --dev-bind /dev /dev --proc /proc --tmpfs /tmp --tmpfs /home --tmpfs /root
      --ro-bind "$ENV_ROOT" "$ENV_ROOT" --ro-bind "$BASE_ROOT" "$BASE_ROOT" --ro-bind "$U" "$U"
      --bind "$U/state" "$U/state" --bind "$U/cache" "$U/cache")
  if "${BW[@]}" true 2>>"$R/bwrap.txt"; then
    RUN=("${BW[@]}" "${RUN[@]}")
    applied="$applied, ProtectSystem=strict, PrivateTmp, ProtectHome=tmpfs (bwrap: / read-only, /dev kept for the GPU and /dev/shm)"
  else
    echo "ProtectSystem=strict, PrivateTmp, ProtectHome: bwrap cannot make a mount namespace here (bwrap.txt)" >> "$R/not-applied.txt"
  fi
  echo "applied: $applied" > "$R/applied.txt"
  cat >> "$R/not-applied.txt" <<'EOF'
SystemCallFilter=, SystemCallErrorNumber=, SystemCallArchitectures=: systemd's seccomp filter (no systemd here)
RestrictAddressFamilies=, RestrictNamespaces=, RestrictRealtime=, RestrictSUIDSGID=, LockPersonality=: seccomp (systemd)
DevicePolicy=closed, DeviceAllow=: systemd's cgroup device filter (the container's /dev is what it is)
ProtectKernelTunables/Modules/Logs, ProtectControlGroups, ProtectClock, ProtectHostname, ProtectProc, PrivateMounts, KeyringMode, RemoveIPC: systemd's namespaces
DynamicUser=: nobody stands in (a fixed unprivileged user)
EOF
  export BUILD_KERNEL_API_KEY_FILE=$U/credentials/api-key HOME=$U/state XDG_CACHE_HOME=$U/cache \
    TRITON_CACHE_DIR=$U/cache/triton TORCHINDUCTOR_CACHE_DIR=$U/cache/inductor FLASHINFER_WORKSPACE_BASE=$U/cache
  MODEL_SAVED=$MODEL; MODEL=$U/model
  (umask 0077; cd "$U/state" && serve_and_ask unit 30001 "${RUN[@]}" "$SERVE_PYTHON" "$U/launch_with_key.py" "$MODULE")
  MODEL=$MODEL_SAVED
  ls -laR "$U/state" "$U/cache" 2>&1 | head -60 > "$R/unit-folders.txt"
fi
step "end"
cat "$R/statuses.txt"
