#!/usr/bin/env bash
# dev-build.sh: build a minikernel wheel by hand, with exactly the environment
# and CMake defines that build-kernel's build stage passes (a dev aid; the tool
# does the same in Python). Run it on a PATCHED copy: the project as committed
# reproduces upstream's failures (see patches/minikernel/v1).
#
#   dev-build.sh [SRC_DIR]            SRC_DIR defaults to this script's folder
#
# Environment (all optional):
#   PYTHON        python of the build venv (torch + scikit-build-core + build + cmake>=3.26 + ninja)
#                 default: python3 on PATH
#   ARCH          TORCH_CUDA_ARCH_LIST, default 12.0a (e.g. "9.0a" or "9.0a;12.0a")
#   CUDA_HOME     CUDA toolkit root, default /usr/local/cuda-13.0
#   MINIDEP_DIR   checkout of minidep for FETCHCONTENT_SOURCE_DIR_MINIDEP,
#                 default SRC_DIR/../minidep
#   OUT_DIR       where the wheel goes, default SRC_DIR/dist
#   JOBS          parallel compile jobs, default 2
#   EXTRA_DEFINES extra "-C cmake.define.X=Y" words, e.g. "-C cmake.define.MINIKERNEL_ENABLE_NVFP4=ON"
set -euo pipefail

SRC_DIR=$(cd "${1:-$(dirname "$0")}" && pwd)
PYTHON=${PYTHON:-python3}
ARCH=${ARCH:-12.0a}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0}
MINIDEP_DIR=$(cd "${MINIDEP_DIR:-$SRC_DIR/../minidep}" && pwd)
OUT_DIR=${OUT_DIR:-$SRC_DIR/dist}
JOBS=${JOBS:-2}

# The build venv's bin first: its cmake (>= 3.26; Debian's 3.25 is too old) and ninja.
PATH="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')"):$PATH"
export PATH

# Where torch's CMake package and the CUDA wheels (nvidia/cu13) live.
TORCH_CMAKE=$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
SITE=$(dirname "$(dirname "$(dirname "$TORCH_CMAKE")")")
NVRTC="$SITE/nvidia/cu13/lib/libnvrtc.so.13"
NVINC="$SITE/nvidia/cu13/include"
[ -e "$NVRTC" ] || { echo "no libnvrtc at $NVRTC" >&2; exit 1; }
[ -e "$NVINC/cusparse.h" ] || { echo "no cusparse.h in $NVINC" >&2; exit 1; }

# TORCH_CUDA_ARCH_LIST: read by torch's CMake config (else it autodetects and
# asks nvcc 13 for compute_50) and, once patched, by minikernel's own gencode list.
export TORCH_CUDA_ARCH_LIST="$ARCH"
# Job count for ninja (scikit-build-core passes it on to `cmake --build`).
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"

set -x
"$PYTHON" -m build --wheel --no-isolation --outdir "$OUT_DIR" \
  -C build-dir="$SRC_DIR/build/{wheel_tag}" \
  -C cmake.define.CMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" \
  -C cmake.define.CUDA_TOOLKIT_ROOT_DIR="$CUDA_HOME" \
  -C cmake.define.Torch_DIR="$TORCH_CMAKE/Torch" \
  -C cmake.define.CUDA_nvrtc_LIBRARY="$NVRTC" \
  -C cmake.define.CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$NVINC" \
  -C cmake.define.CMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES="$NVINC" \
  -C cmake.define.FETCHCONTENT_SOURCE_DIR_MINIDEP="$MINIDEP_DIR" \
  -C cmake.define.MINIKERNEL_COMPILE_THREADS=1 \
  -C cmake.define.CMAKE_EXPORT_COMPILE_COMMANDS=ON \
  ${EXTRA_DEFINES:-} \
  "$SRC_DIR"
