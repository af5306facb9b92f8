// Header probe: the torch headers nvfp4_scaled_mm_kernels.cu includes (its lines 16-21), nothing else.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>

#include "utils.h"
#include "sgl_kernel_arch_prune.h"
