// comm_ops: the miniature's mscclpp. It calls the CUDA driver API directly, so it links
// CUDA::cuda_driver (libcuda), which a host without a GPU driver does not have.
#include <cuda.h>

__global__ void minikernel_comm_fill(int* out, int value) { out[threadIdx.x] = value; }

// The driver's version, or -1 when the driver cannot be reached (no GPU, a stub).
extern "C" int minikernel_comm_driver_version() {
    int version = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDriverGetVersion(&version) != CUDA_SUCCESS) return -1;
    return version;
}
