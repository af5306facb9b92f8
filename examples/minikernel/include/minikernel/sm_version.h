// getSMVersion(): the current GPU's compute capability as major*10+minor (90, 100, 120, ...),
// as sgl-kernel's utils.h has it; the host entry points dispatch on it at run time.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace minikernel {

// Test seam (declared, not a hidden switch): MINIKERNEL_FAKE_SM=90 stands in for a GPU of
// compute capability 9.0, so a host without a GPU (CI) can reach the branch a dispatch takes
// for that GPU. The dispatch runs before any kernel launch; with the seam set, whatever the
// chosen branch does next (launch, or raise) still needs what it always needs.
inline int getSMVersion() {
  if (const char* fake = std::getenv("MINIKERNEL_FAKE_SM"); fake != nullptr && *fake != '\0') {
    return std::atoi(fake);
  }
  int device = -1;
  int major = 0;
  int minor = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("minikernel: cannot read the GPU's compute capability: ") +
                             cudaGetErrorString(err));
  }
  return major * 10 + minor;
}

}  // namespace minikernel
