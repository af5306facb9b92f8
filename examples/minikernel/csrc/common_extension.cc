// Torch binding of the common ops library (compiled by the host compiler, g++).
//
// Like sgl-kernel's common_extension.cc, every op is registered UNCONDITIONALLY:
// scaled_fp4_quant exists in torch.ops.minikernel even in a build without
// ENABLE_NVFP4, where calling it raises. A registered op proves nothing; the
// cubins (cuobjdump) do.
//
// The first include needs CCCL's <cuda/std/...> (see fp4_layout.h): on CUDA 13
// this file only compiles once <toolkit>/include/cccl is on the include path.
// <ATen/cuda/CUDAContext.h> (as in sgl-kernel's sources) needs cublas_v2.h and
// cusparse.h, which a minimal toolkit lacks: the build then has to add the torch
// wheel's site-packages/nvidia/cu13/include (after the toolkit's own headers).
#include "minikernel/fp4_layout.h"

// The tensor type and the two factories used, not all of <ATen/ATen.h>: the same objects, ~20% less
// compile time (this file is the longest compile of every miniature build).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "minikernel/ops.h"

namespace {

minikernel::DType to_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return minikernel::DType::kFloat32;
    case at::kHalf:
      return minikernel::DType::kFloat16;
    case at::kBFloat16:
      return minikernel::DType::kBFloat16;
    default:
      TORCH_CHECK(false, "minikernel: unsupported dtype ", t.scalar_type(), " (float32, float16, bfloat16)");
  }
}

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "minikernel: ", what, " failed: ", cudaGetErrorString(err));
}

at::Tensor silu_and_mul(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "silu_and_mul: input must be a CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "silu_and_mul: last dimension must be even");
  const at::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  const int64_t d = xc.size(-1) / 2;
  auto out_shape = xc.sizes().vec();
  out_shape.back() = d;
  at::Tensor out = at::empty(out_shape, xc.options());
  const int64_t tokens = d == 0 ? 0 : xc.numel() / (2 * d);
  check_cuda(minikernel::launch_silu_and_mul(xc.data_ptr(), out.data_ptr(), tokens, d, to_dtype(xc),
                                             at::cuda::getCurrentCUDAStream()),
             "silu_and_mul kernel launch");
  return out;
}

std::tuple<at::Tensor, at::Tensor> scaled_fp4_quant(const at::Tensor& x, const at::Tensor& global_scale) {
  TORCH_CHECK(minikernel::nvfp4_enabled(),
              "minikernel was built without ENABLE_NVFP4: scaled_fp4_quant has no kernel in this build");
  TORCH_CHECK(x.is_cuda() && global_scale.is_cuda(), "scaled_fp4_quant: inputs must be CUDA tensors");
  TORCH_CHECK(x.dim() == 2, "scaled_fp4_quant: input must be 2-D [m, n]");
  TORCH_CHECK(global_scale.numel() == 1 && global_scale.scalar_type() == at::kFloat,
              "scaled_fp4_quant: global_scale must be a float32 tensor with one element");
  const int64_t m = x.size(0);
  const int64_t n = x.size(1);
  TORCH_CHECK(minikernel::fp4_row_ok(n), "scaled_fp4_quant: n must be a positive multiple of ",
              minidep::nvfp4::kBlockSize, ", got ", n);
  const at::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  const at::Tensor gs = global_scale.contiguous();
  const auto layout = minikernel::fp4_row_layout(n);
  at::Tensor out = at::empty({m, layout[0]}, xc.options().dtype(at::kByte));
  at::Tensor scales = at::empty({m, layout[1]}, xc.options().dtype(at::kFloat8_e4m3fn));
  check_cuda(minikernel::launch_scaled_fp4_quant(xc.data_ptr(), gs.data_ptr<float>(), out.data_ptr<uint8_t>(),
                                                 static_cast<uint8_t*>(scales.data_ptr()), m, n, to_dtype(xc),
                                                 at::cuda::getCurrentCUDAStream()),
             "scaled_fp4_quant kernel launch");
  return {out, scales};
}

at::Tensor arch_tag(const at::Tensor& x) {
  // The arch dispatch comes first, as in sgl-kernel's entry points: on a GPU family this
  // build has no kernel for it raises before any tensor is looked at.
  const minikernel::ArchTagLaunch launch = minikernel::arch_tag_dispatch();
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "arch_tag: input must be a float32 CUDA tensor");
  const at::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  check_cuda(launch(xc.data_ptr<float>(), out.data_ptr<float>(), xc.numel(), at::cuda::getCurrentCUDAStream()),
             "arch_tag kernel launch");
  return out;
}

bool nvfp4_enabled() { return minikernel::nvfp4_enabled(); }

}  // namespace

TORCH_LIBRARY(minikernel, m) {
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.impl("silu_and_mul", c10::kCUDA, &silu_and_mul);

  m.def("scaled_fp4_quant(Tensor x, Tensor global_scale) -> (Tensor, Tensor)");
  m.impl("scaled_fp4_quant", c10::kCUDA, &scaled_fp4_quant);

  // Registered for every backend (no dispatch key), so that on a host without a GPU the
  // MINIKERNEL_FAKE_SM seam reaches the arch dispatch; the op itself still needs CUDA tensors.
  m.def("arch_tag(Tensor x) -> Tensor", &arch_tag);

  // Backend-less: callable on a host without a GPU (the verify stage's import check).
  m.def("nvfp4_enabled() -> bool", &nvfp4_enabled);
}
