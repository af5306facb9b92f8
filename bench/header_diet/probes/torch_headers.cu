// The torch headers nvfp4_scaled_mm_kernels.cu includes in v8 (and utils.h with them), nothing else.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>

#include "utils.h"
