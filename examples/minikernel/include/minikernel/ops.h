// Launchers of the minikernel CUDA kernels.
//
// Deliberately free of torch headers: the .cu files that define these include
// only CUDA and minidep headers, so nvcc compiles them in seconds. The torch
// binding (csrc/common_extension.cc, compiled by g++) turns tensors into raw
// pointers and calls these on the current CUDA stream.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace minikernel {

// Element types understood by the launchers (the binding maps torch dtypes).
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// out[t, i] = silu(x[t, i]) * x[t, d + i]; x is [tokens, 2*d], out is [tokens, d],
// both contiguous and of the same dtype.
cudaError_t launch_silu_and_mul(const void* x, void* out, int64_t tokens, int64_t d, DType dtype,
                                cudaStream_t stream);

// True when this library was compiled with -DENABLE_NVFP4=1 (the FP4 kernel exists).
bool nvfp4_enabled();

// NVFP4 quantisation of a contiguous [m, n] matrix (n % 16 == 0); see
// csrc/nvfp4_quant.cu for the exact definition.
//   out_fp4:    [m, n/2]  uint8, two e2m1 codes per byte (element 2i in the low nibble)
//   out_scales: [m, n/16] uint8 holding float8 e4m3 (torch.float8_e4m3fn), row-major,
//               not swizzled (sgl-kernel uses a 128x4 swizzle; the miniature does not)
//   global_scale: device pointer to one float32
// Returns cudaErrorNotSupported when built without ENABLE_NVFP4.
cudaError_t launch_scaled_fp4_quant(const void* x, const float* global_scale, uint8_t* out_fp4,
                                    uint8_t* out_scales, int64_t m, int64_t n, DType dtype,
                                    cudaStream_t stream);

// arch_tag (csrc/arch_dispatch.cu): out[i] = x[i] + family of the branch that ran (120, 100,
// 90 or 80), float32. The dispatch on getSMVersion() happens first and returns that branch's
// launcher; the binding checks the tensors and launches after it.
using ArchTagLaunch = cudaError_t (*)(const float* x, float* out, int64_t n, cudaStream_t stream);
ArchTagLaunch arch_tag_dispatch();

}  // namespace minikernel
