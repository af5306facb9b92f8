// Host-side shape rules of the NVFP4 quantize op, shared by the torch binding.
//
// Written against CCCL's <cuda/std/...> headers on purpose: like sgl-kernel's
// .cc/.cpp sources, this is compiled by the host compiler (g++), which on CUDA 13
// only finds <cuda/std/...> when <toolkit>/include/cccl is on the include path
// (nvcc adds it by itself). That is what patch 0002 fixes.
#pragma once

#include <cuda/std/array>
#include <cuda/std/cstdint>

#include "minidep/nvfp4.h"

namespace minikernel {

// {packed fp4 bytes per row, e4m3 scales per row} for a row of n elements.
inline cuda::std::array<cuda::std::int64_t, 2> fp4_row_layout(cuda::std::int64_t n) {
  return {minidep::nvfp4::packed_bytes(n), minidep::nvfp4::num_blocks(n)};
}

inline bool fp4_row_ok(cuda::std::int64_t n) { return n > 0 && n % minidep::nvfp4::kBlockSize == 0; }

}  // namespace minikernel
