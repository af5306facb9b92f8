// silu_and_mul: a plain (non-FP4) elementwise kernel. Torch-free on purpose.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "minikernel/ops.h"

namespace minikernel {
namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void silu_and_mul_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t d) {
  const int64_t t = blockIdx.x;
  const T* row = x + t * 2 * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float a = to_float(row[i]);
    const float b = to_float(row[d + i]);
    const float silu = a / (1.0f + expf(-a));
    out[t * d + i] = from_float<T>(silu * b);
  }
}

template <typename T>
cudaError_t launch(const void* x, void* out, int64_t tokens, int64_t d, cudaStream_t stream) {
  if (tokens == 0 || d == 0) return cudaSuccess;
  const int threads = d < 1024 ? static_cast<int>((d + 31) / 32 * 32) : 1024;
  silu_and_mul_kernel<T><<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(out), d);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_silu_and_mul(const void* x, void* out, int64_t tokens, int64_t d, DType dtype,
                                cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return launch<float>(x, out, tokens, d, stream);
    case DType::kFloat16:
      return launch<__half>(x, out, tokens, d, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(x, out, tokens, d, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace minikernel
