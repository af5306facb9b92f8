// minicppext's one kernel: y = alpha * x (float32, CUDA). Registered with TORCH_LIBRARY (no pybind11:
// fewer headers, a faster compile); PyInit__C only makes `_C` importable so the registration runs.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

namespace {

__global__ void scale_kernel(const float* x, float* y, float alpha, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = alpha * x[i];
}

at::Tensor scale(const at::Tensor& x, double alpha) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous(), "scale: a contiguous float32 CUDA tensor");
  at::Tensor y = at::empty_like(x);
  int64_t n = x.numel();
  if (n == 0) return y;
  int threads = 256;
  auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  scale_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                                         static_cast<float>(alpha), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

}  // namespace

TORCH_LIBRARY(minicppext, m) { m.def("scale(Tensor x, float alpha) -> Tensor"); }
TORCH_LIBRARY_IMPL(minicppext, CUDA, m) { m.impl("scale", &scale); }

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&def);
}
