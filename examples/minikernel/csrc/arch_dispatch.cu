// arch_tag: a run-time compute-capability dispatch shaped like sgl-kernel's fp8_scaled_mm.
//
// The host entry point asks getSMVersion() and picks one branch per GPU family
// (sm >= 120, >= 100, >= 90, >= 80); each branch instantiates its own kernel template,
// so every gencode of the library compiles all four kernels although a GPU of that
// gencode can only ever take one branch (upstream's waste that patch 0006 prunes). The
// kernels differ on purpose (out = x + family), so their SASS differs and a GPU test
// can tell which branch ran. Torch-free like the other .cu files: the error for a GPU
// with no branch is a std::runtime_error, which torch turns into a Python RuntimeError.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "minikernel/ops.h"
#include "minikernel/sm_version.h"

namespace minikernel {
namespace {

template <int kFamily>
__global__ void arch_tag_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + static_cast<float>(kFamily);
}

template <int kFamily>
cudaError_t launch_arch_tag(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  arch_tag_kernel<kFamily><<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

}  // namespace

ArchTagLaunch arch_tag_dispatch() {
  const int sm_version = getSMVersion();
  if (sm_version >= 120) {
    return &launch_arch_tag<120>;
  } else if (sm_version >= 100) {
    return &launch_arch_tag<100>;
  } else if (sm_version >= 90) {
    return &launch_arch_tag<90>;
  } else if (sm_version >= 80) {
    return &launch_arch_tag<80>;
  }
  throw std::runtime_error("arch_tag: no kernel for compute capability " + std::to_string(sm_version / 10) + "." +
                           std::to_string(sm_version % 10) + " (needs 8.0 or later)");
}

}  // namespace minikernel
