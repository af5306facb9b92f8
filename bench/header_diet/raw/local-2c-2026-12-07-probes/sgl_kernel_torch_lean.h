// build-kernel: the parts of torch that a CUTLASS GEMM TU's entry points use, instead of <torch/all.h>.
#ifndef SGL_KERNEL_TORCH_LEAN_H
#define SGL_KERNEL_TORCH_LEAN_H

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace torch {
using namespace at;  // NOLINT
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
}  // namespace torch

#endif
