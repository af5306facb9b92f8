// minidep: a tiny header-only dependency of the minikernel example project.
//
// It plays the part of the FetchContent dependencies of sgl-kernel (cutlass,
// DeepGEMM, flashinfer, ...): minikernel's CMakeLists.txt fetches it by a pinned
// commit that no repository holds, so a build only works when the build tool
// passes -DFETCHCONTENT_SOURCE_DIR_MINIDEP=<checkout of this folder>.
//
// Usable from host code (g++) and device code (nvcc); no CUDA headers needed.
#pragma once

#if defined(__CUDACC__)
#define MINIDEP_HD __host__ __device__
#else
#define MINIDEP_HD
#endif

namespace minidep {
namespace nvfp4 {

// Elements that share one e4m3 scale factor (NVFP4 "micro-block").
constexpr int kBlockSize = 16;

// Largest magnitude representable in FP4 e2m1: 0b0111 = 1.5 * 2^2.
constexpr float kE2M1Max = 6.0f;

// Largest finite magnitude of FP8 e4m3 (the per-block scale type).
constexpr float kE4M3Max = 448.0f;

// Two e2m1 values are packed per byte (element 2i in the low nibble).
constexpr int kElemsPerByte = 2;

MINIDEP_HD constexpr long long packed_bytes(long long n_elems) { return n_elems / kElemsPerByte; }

MINIDEP_HD constexpr long long num_blocks(long long n_elems) { return n_elems / kBlockSize; }

}  // namespace nvfp4
}  // namespace minidep

// Version of this header, bumped when the constants above change.
#define MINIDEP_VERSION_MAJOR 1
#define MINIDEP_VERSION_MINOR 0
