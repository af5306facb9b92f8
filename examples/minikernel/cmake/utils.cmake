# Helpers for minikernel's CMakeLists.txt (shaped like sgl-kernel's cmake/utils.cmake).

# torch's CMake config (Caffe2/public/cuda.cmake) appends one
# "-gencode arch=compute_XX,code=sm_XX" per TORCH_CUDA_ARCH_LIST entry to
# CMAKE_CUDA_FLAGS. Like sgl-kernel, strip them so only the project's own
# gencode list applies. The removed flags are returned in OUT_VAR.
macro(clear_cuda_arches OUT_VAR)
  string(REGEX MATCHALL "-gencode[ =]arch=[^ ]+" ${OUT_VAR} "${CMAKE_CUDA_FLAGS}")
  string(REGEX REPLACE "-gencode[ =]arch=[^ ]+ *" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
endmacro()
