// Internal to the AVX-512 kernel files (cpu_fast_kernels_avx512*.cpp): the target attributes and
// the small always-inline helpers they share. Include only from files compiled for x86-64; every
// function here carries a target attribute and is reached only after CPUID said yes.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12's AVX-512 headers build masked and reduce intrinsics on _mm512_undefined_*(), which trips
// -W(maybe-)uninitialized inside the headers themselves (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backends/cpu/cpu_fast_kernels.h"

#define LUCID_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx2")))
#define LUCID_AVX512BF16                                                          \
  __attribute__((                                                                 \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,fma,f16c," \
             "avx2")))

namespace lucid::fast::avx512 {

LUCID_AVX512 inline __mmask16 TailMask16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

LUCID_AVX512 inline __m512 LoadBf16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
LUCID_AVX512 inline __m512 LoadBf16Masked(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// Software prefetch for streaming tiles. A tile's NR weight rows are equally spaced (row stride
// S = wv[1] - wv[0]; 0 for a clamped one-row tail, where the prefetch is redundant but harmless),
// and the driver walks row groups in memory order, so the next group's row j starts NR * S past
// wv[j]. While a tile consumes a cache line of its rows, it asks for the same line of the next
// group's rows into L2: each row of a 2048-wide bf16 matrix is one 4 KB page, which the hardware
// stream prefetchers only learn after several misses per page. Prefetches never fault, so the
// lines past the last group (or past the matrix) are only wasted requests.
struct NextRows {
  const char* base;  // the next group's row 0
  int64_t stride;    // bytes between rows
};
template <int NR>
inline NextRows NextRowGroup(const void* const* wv) {
  const char* r0 = static_cast<const char*>(wv[0]);
  const int64_t s = NR > 1 ? static_cast<const char*>(wv[1]) - r0 : 0;
  return {r0 + NR * s, s};
}
template <int NR>
inline void PrefetchRows(const NextRows& nx, int64_t byte) {
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) _mm_prefetch(nx.base + j * nx.stride + byte, _MM_HINT_T1);
}

template <int MR, int NR>
LUCID_AVX512 __attribute__((always_inline)) inline void Reduce(__m512 (&acc)[MR][NR], float* out) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) out[i * NR + j] = _mm512_reduce_add_ps(acc[i][j]);
}

// The fused FP8-block and NVFP4 tiles of cpu_fast_kernels_avx512_packed.cpp into t (avx512bf16).
void AddFusedPackedTiles(KernelTable& t);

}  // namespace lucid::fast::avx512
