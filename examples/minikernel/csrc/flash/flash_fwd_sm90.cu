// Stand-in for FA3 (sgl-kernel's flash_ops): a trivial kernel that exists only
// for sm_90a. Real FA3 uses Hopper-only wgmma/TMA; here the body is guarded by
// the sm_90a feature macro so that the library is useless on any other target,
// which is the property that matters for the build (flash_ops is sm_90a-only).
// out[i] = q[i] * softmax_scale, float32.
#include <cstdint>

#include <cuda_runtime.h>

namespace minikernel {
namespace flash {

__global__ void fa3_fwd_kernel(const float* __restrict__ q, float* __restrict__ out, float scale, int64_t n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = q[i] * scale;
#else
  __trap();  // compiled for something other than sm_90a
#endif
}

cudaError_t launch_fa3_fwd(const float* q, float* out, float scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  fa3_fwd_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(q, out, scale, n);
  return cudaGetLastError();
}

}  // namespace flash
}  // namespace minikernel
