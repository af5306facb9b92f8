// Torch binding of the FA3 stand-in (library flash_ops, sm_90a only).
// Registers into the minikernel namespace as a fragment, like sgl-kernel's
// flash_ops registers its fwd op next to common_ops' ops.
// The tensor type and empty_like, not all of <ATen/ATen.h>: the same objects, less compile time.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

namespace minikernel {
namespace flash {
cudaError_t launch_fa3_fwd(const float* q, float* out, float scale, int64_t n, cudaStream_t stream);
}  // namespace flash
}  // namespace minikernel

namespace {

at::Tensor fa3_fwd(const at::Tensor& q, double softmax_scale) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == at::kFloat, "fa3_fwd: q must be a float32 CUDA tensor");
  const at::cuda::CUDAGuard guard(q.device());
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty_like(qc);
  const cudaError_t err = minikernel::flash::launch_fa3_fwd(qc.data_ptr<float>(), out.data_ptr<float>(),
                                                           static_cast<float>(softmax_scale), qc.numel(),
                                                           at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "fa3_fwd launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(minikernel, m) {
  m.def("fa3_fwd(Tensor q, float softmax_scale) -> Tensor");
  m.impl("fa3_fwd", c10::kCUDA, &fa3_fwd);
}
