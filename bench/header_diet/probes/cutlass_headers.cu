// (b)'s floor: the CUTLASS headers nvfp4_scaled_mm_kernels.cu includes, without torch (its GEMM TU behind a plain C++ interface).
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
