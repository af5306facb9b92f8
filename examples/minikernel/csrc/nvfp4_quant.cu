// NVFP4 quantisation (FP4 e2m1 values, FP8 e4m3 per-block scales, fp32 global
// scale), shaped like sgl-kernel's scaled_fp4_quant. Torch-free on purpose.
//
// Definition (what a Python reference must reproduce), for each row and each
// block of 16 consecutive elements x[0..15] (converted to float32):
//   amax     = max_i |x[i]|
//   sf       = __fmul_rn(global_scale, __fdiv_rn(amax, 6.0f))      // fp32, IEEE RN
//   sf_e4m3  = float8_e4m3fn(sf)   (round to nearest even, saturate to +-448)
//   sf_back  = float(sf_e4m3)
//   qscale   = sf_back != 0 ? __fdiv_rn(global_scale, sf_back) : 0  // fp32, IEEE RN
//   q[i]     = e2m1(__fmul_rn(x[i], qscale))   (round to nearest even, saturate to +-6;
//              e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; code = sign<<3 | index)
//   out_fp4[row, blk*8 + j] = q[2j] | (q[2j+1] << 4)
//   out_scales[row, blk]    = sf_e4m3 bits
// Dequantisation: x ~= e2m1_value * sf_back / global_scale. sgl-kernel uses
// global_scale = 448 * 6 / amax(x) and fast approximate reciprocals; the
// miniature uses explicitly rounded fp32 operations (__fmul_rn/__fdiv_rn, which
// -use_fast_math does not change) so the reference is bit-exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "minidep/nvfp4.h"
#include "minikernel/ops.h"

#if defined(ENABLE_NVFP4) && ENABLE_NVFP4
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace minikernel {

bool nvfp4_enabled() {
#if defined(ENABLE_NVFP4) && ENABLE_NVFP4
  return true;
#else
  return false;
#endif
}

#if defined(ENABLE_NVFP4) && ENABLE_NVFP4
namespace {

constexpr int kBlock = minidep::nvfp4::kBlockSize;
static_assert(kBlock == 16, "NVFP4 uses 16-element blocks");

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// One thread per 16-element block.
template <typename T>
__global__ void scaled_fp4_quant_kernel(const T* __restrict__ x, const float* __restrict__ global_scale,
                                        uint8_t* __restrict__ out_fp4, uint8_t* __restrict__ out_scales,
                                        int64_t num_blocks) {
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= num_blocks) return;
  const T* src = x + blk * kBlock;

  float v[kBlock];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) {
    v[i] = to_float(src[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }

  const float gs = *global_scale;
  const float sf = __fmul_rn(gs, __fdiv_rn(amax, minidep::nvfp4::kE2M1Max));
  const __nv_fp8_e4m3 sf_e4m3(sf);  // RN, satfinite
  const float sf_back = static_cast<float>(sf_e4m3);
  const float qscale = sf_back != 0.0f ? __fdiv_rn(gs, sf_back) : 0.0f;

  uint8_t* dst = out_fp4 + blk * (kBlock / minidep::nvfp4::kElemsPerByte);
#pragma unroll
  for (int j = 0; j < kBlock / 2; ++j) {
    const float2 pair = make_float2(__fmul_rn(v[2 * j], qscale), __fmul_rn(v[2 * j + 1], qscale));
    // .x goes to the low nibble; hardware cvt.rn.satfinite.e2m1x2 on sm_100a/sm_120a,
    // cuda_fp4.h's software path on older targets.
    dst[j] = static_cast<uint8_t>(__nv_cvt_float2_to_fp4x2(pair, __NV_E2M1, cudaRoundNearest));
  }
  out_scales[blk] = sf_e4m3.__x;
}

template <typename T>
cudaError_t launch(const void* x, const float* gs, uint8_t* out_fp4, uint8_t* out_scales, int64_t m, int64_t n,
                   cudaStream_t stream) {
  const int64_t blocks = m * (n / kBlock);
  if (blocks == 0) return cudaSuccess;
  const int threads = 128;
  const unsigned grid = static_cast<unsigned>((blocks + threads - 1) / threads);
  scaled_fp4_quant_kernel<T><<<grid, threads, 0, stream>>>(static_cast<const T*>(x), gs, out_fp4, out_scales,
                                                            blocks);
  return cudaGetLastError();
}

}  // namespace
#endif  // ENABLE_NVFP4

cudaError_t launch_scaled_fp4_quant(const void* x, const float* global_scale, uint8_t* out_fp4,
                                    uint8_t* out_scales, int64_t m, int64_t n, DType dtype,
                                    cudaStream_t stream) {
#if defined(ENABLE_NVFP4) && ENABLE_NVFP4
  if (n % kBlock != 0) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32:
      return launch<float>(x, global_scale, out_fp4, out_scales, m, n, stream);
    case DType::kFloat16:
      return launch<__half>(x, global_scale, out_fp4, out_scales, m, n, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(x, global_scale, out_fp4, out_scales, m, n, stream);
  }
  return cudaErrorInvalidValue;
#else
  (void)x, (void)global_scale, (void)out_fp4, (void)out_scales, (void)m, (void)n, (void)dtype, (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace minikernel
