// Internal to the AVX-512 kernel files (cpu_fast_kernels_avx512*.cpp, cpu_fast_gemm_avx512.cpp):
// the target attributes and the small always-inline helpers they share. Include only from files
// compiled for x86-64; every function here carries a target attribute and is reached only after
// CPUID said yes.
#pragma once

#include <immintrin.h>

#include <array>
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

// e4m3fn -> bf16, exactly (every e4m3 value is a bf16 value): the bf16 bits of each magnitude
// code 0..127 (0x7F is NaN), made at compile time.
constexpr std::array<uint16_t, 128> MakeE4m3Bf16Table() {
  std::array<uint16_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    const int e = c >> 3, m = c & 7;
    if (c == 0x7F) {
      t[c] = 0x7FC0;
    } else if (e > 0) {  // 2^(e - 7) * (1 + m / 8): bf16 exponent e + 120, mantissa m << 4
      t[c] = static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
    } else if (m > 0) {  // m * 2^-9: normalize m = 2^p * (1 + f)
      const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;
      t[c] = static_cast<uint16_t>(((p - 9 + 127) << 7) | ((m << (7 - p)) & 0x7F));
    }
  }
  return t;
}
alignas(64) inline constexpr std::array<uint16_t, 128> kE4m3Bf16 = MakeE4m3Bf16Table();

// The table in four registers, for E4m3ToBf16.
struct E4m3Table {
  __m512i t[4];
};
LUCID_AVX512 inline E4m3Table LoadE4m3Table() {
  E4m3Table r;
  for (int i = 0; i < 4; ++i) r.t[i] = _mm512_load_si512(kE4m3Bf16.data() + 32 * i);
  return r;
}
// 32 e4m3 codes to their bf16 bits: vpermi2w on the low 6 bits, a blend on bit 6, the sign or-ed
// in (one vpternlog).
LUCID_AVX512 inline __m512i E4m3ToBf16(__m256i b, const E4m3Table& t) {
  const __m512i idx = _mm512_cvtepu8_epi16(b);
  const __m512i lo = _mm512_permutex2var_epi16(t.t[0], idx, t.t[1]);
  const __m512i hi = _mm512_permutex2var_epi16(t.t[2], idx, t.t[3]);
  const __mmask32 m = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
  const __m512i v = _mm512_mask_blend_epi16(m, lo, hi);
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(idx, 8), _mm512_set1_epi16(-0x8000), 0xF8);
}
// 64 e4m3 codes to bf16 at once (VBMI): vpermi2b looks the high and the low byte of each
// magnitude's bf16 bits up in 128-entry byte tables (index bit 7, the sign, is ignored), a
// vpternlog ors the sign into the high byte, and vpunpck{l,h}bw pair the bytes into words within
// each 128-bit lane: *lo gets codes 16 L + 0..7 and *hi codes 16 L + 8..15 of lane L = 0..3, in
// that order (kFp8XOrder in the tiles puts the activations in the same order).
struct E4m3ByteTables {
  __m512i hi0, hi1, lo0, lo1;
};
constexpr std::array<uint8_t, 128> E4m3Bf16Bytes(bool high) {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c)
    t[c] = static_cast<uint8_t>(high ? kE4m3Bf16[c] >> 8 : kE4m3Bf16[c] & 0xFF);
  return t;
}
alignas(64) inline constexpr std::array<uint8_t, 128> kE4m3Bf16High = E4m3Bf16Bytes(true);
alignas(64) inline constexpr std::array<uint8_t, 128> kE4m3Bf16Low = E4m3Bf16Bytes(false);
LUCID_AVX512 inline E4m3ByteTables LoadE4m3ByteTables() {
  return {_mm512_load_si512(kE4m3Bf16High.data()), _mm512_load_si512(kE4m3Bf16High.data() + 64),
          _mm512_load_si512(kE4m3Bf16Low.data()), _mm512_load_si512(kE4m3Bf16Low.data() + 64)};
}
LUCID_AVX512BF16 inline void E4m3ToBf16x64(__m512i codes, const E4m3ByteTables& t, __m512i* lo,
                                           __m512i* hi) {
  // The codes feed two vpermi2b, which overwrite their index register, and the sign merge. The
  // empty asm pins them in a register (GCC then copies it, or uses vpermt2b), where it used to
  // load them from memory once per use: the FP8 tiles did 3 loads per row for 1 (4g FP8 batch-1
  // steps 18% shorter in the ~80 GB/s state, where the tiles are bound by their loads).
  asm("" : "+v"(codes));
  __m512i h = _mm512_permutex2var_epi8(t.hi0, codes, t.hi1);
  const __m512i l = _mm512_permutex2var_epi8(t.lo0, codes, t.lo1);
  h = _mm512_ternarylogic_epi32(h, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  *lo = _mm512_unpacklo_epi8(l, h);
  *hi = _mm512_unpackhi_epi8(l, h);
}
// bf16 bits (16 of them, or the low / high 16 of a register of 32) widened to f32, exactly.
LUCID_AVX512 inline __m512 Bf16BitsToF32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

LUCID_AVX512 inline __m512 LoadBf16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
LUCID_AVX512 inline __m512 LoadBf16Masked(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// In-register 16 x 16 transpose: r[i] lane j -> r[j] lane i (unpack, shuffle, two rounds of
// 128-bit lane shuffles).
LUCID_AVX512 inline void Transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const int b = 4 * g;
    u[b + 0] = _mm512_shuffle_ps(t[b + 0], t[b + 2], 0x44);
    u[b + 1] = _mm512_shuffle_ps(t[b + 0], t[b + 2], 0xEE);
    u[b + 2] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0x44);
    u[b + 3] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 e = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 d = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(a, e, 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(a, e, 0xDD);
    r[c + 4] = _mm512_shuffle_f32x4(b, d, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(b, d, 0xDD);
  }
}

// The row-after-row one-token tiles (TileDpBf16Rows, TileFp8Rows) ask for each row's line this
// many bytes ahead, into L2: the next row of a 2048-column bf16 group, two rows of FP8.
constexpr int64_t kRowsPrefetchBytes = 4096;

// Software prefetch for streaming tiles. A tile's NR weight rows are equally spaced (row stride
// S = wv[1] - wv[0]; 0 for a clamped one-row tail, where the prefetch is redundant but harmless),
// and the driver walks row groups in memory order, so the next group starts NR * S past wv[0].
// Each step of a tile consumes one 64-byte line of each of its rows (at `byte` into the row) and
// asks for NR lines of the next group in their place. Prefetches never fault, so lines past the
// last group (or past the matrix) are only wasted requests.
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
// The line at `byte` of each of the next group's rows. kHint: the cache level to fill (the packed
// tiles ask for L1, see TileFp8Dp / TileNvfp4Dp).
template <int NR, _mm_hint kHint = _MM_HINT_T1>
inline void PrefetchRows(const NextRows& nx, int64_t byte) {
#pragma GCC unroll 16
  for (int j = 0; j < NR; ++j) _mm_prefetch(nx.base + j * nx.stride + byte, kHint);
}
// For a tile that reads whole rows (S is the bytes it reads per row), where the next group is one
// span of NR * S bytes: the span's next NR lines, in address order, into L2. A page is requested
// whole before the next, one DRAM page and TLB entry at a time, where PrefetchRows opens NR pages
// at once: the bf16 4g batch-1 step is 12-14% faster in the ~50 GB/s state of the dev box. (The
// packed tiles keep PrefetchRows: into L1, whose lines this order would evict before their use,
// and into L2 it was slower for them too.)
template <int NR>
inline void PrefetchSpan(const NextRows& nx, int64_t byte) {
#pragma GCC unroll 16
  for (int j = 0; j < NR; ++j) _mm_prefetch(nx.base + byte * NR + 64 * j, _MM_HINT_T1);
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
