// AVX2 + FMA tiles for NVFP4 weights (e2m1 codes, 16-column groups with e4m3 scales already in
// f32) against f32 activations, the codes decoded in registers (KernelTable::nvfp4_f32_tiles).
//
// 3 to 8 tokens decode 32 codes (16 bytes) at a time: the low and high nibbles split (vpand,
// vpsrlw), each looked up by vpshufb in a 16-entry table of the high bytes of the e2m1 values' f16
// (whose low bytes are zero), interleaved back into column order (vpunpck{l,h}bw), made f16 words
// by vpunpck{l,h}bw with zero and widened by vcvtph2ps, then multiplied by the group's scale: e2m1
// * gs, exactly as the reference (one rounding of the same product). The tensor scale s2 is the
// driver's, applied to the tile's sums. e2m1 has no NaN; a NaN group scale makes its products NaN.
//
// One token reads each row of its group from start to end (TileNvfp4Rows64: one ascending stream
// per row, 64 columns a step through the bf16 byte tables of Decoder64, x in that decode's order;
// the line kAheadBytes ahead asked for in L2 each 128 bytes); two tokens the same way with each
// decoded vector scaled once and serving both (TileNvfp4Rows64x2); 3 to 8 tokens walk their rows
// 128 columns at a time (TileNvfp4: each decoded vector serves every token, the tokens' x block
// stays in L1 over the rows, read from the driver's panel). The one-token W_uk absorption
// (rows_axpy_nvfp4) uses Decoder64 too. One token of bf16 activations at K a multiple of 64 takes
// the integer tile (TileNvfp4Q16, KernelTable::nvfp4_q16_tile) instead.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "backends/cpu/cpu_fast_avx2_common.h"
#include "backends/cpu/cpu_fast_kernels.h"

namespace lucid::fast {
namespace {

using avx2::Hsum;

struct Decoder {
  __m128i table, low4;
  LUCID_AVX2 static Decoder Make() {
    // The high byte of each e2m1 value's f16 (its low byte is zero): 0, 0.5, 1, 1.5, 2, 3, 4, 6
    // and their negatives.
    return {_mm_setr_epi8(0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, static_cast<char>(0x80),
                          static_cast<char>(0xB8), static_cast<char>(0xBC), static_cast<char>(0xBE),
                          static_cast<char>(0xC0), static_cast<char>(0xC2), static_cast<char>(0xC4),
                          static_cast<char>(0xC6)),
            _mm_set1_epi8(0x0F)};
  }
  // 8 f16 high bytes (the low 8 bytes of c) as f32 times h.
  LUCID_AVX2 __attribute__((always_inline)) static __m256 Widen(__m128i f16, __m256 h) {
    return _mm256_mul_ps(_mm256_cvtph_ps(f16), h);
  }
  // 16 codes' bytes b (32 values, columns 0..31) as v[0..3] (8 columns each, in order) times s0
  // (columns 0..15) and s1 (16..31), their groups' scales.
  LUCID_AVX2 __attribute__((always_inline)) void Decode32(__m128i b, __m256 s0, __m256 s1,
                                                          __m256 (&v)[4]) const {
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, low4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low4));
    const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
    const __m128i z = _mm_setzero_si128();
    v[0] = Widen(_mm_unpacklo_epi8(z, c0), s0);
    v[1] = Widen(_mm_unpackhi_epi8(z, c0), s0);
    v[2] = Widen(_mm_unpacklo_epi8(z, c1), s1);
    v[3] = Widen(_mm_unpackhi_epi8(z, c1), s1);
  }
  // One group (8 bytes, 16 values) as v[0..1].
  LUCID_AVX2 __attribute__((always_inline)) void Decode16(const uint8_t* q, __m256 s,
                                                          __m256 (&v)[2]) const {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, low4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low4));
    const __m128i c0 = _mm_unpacklo_epi8(lo, hi), z = _mm_setzero_si128();
    v[0] = Widen(_mm_unpacklo_epi8(z, c0), s);
    v[1] = Widen(_mm_unpackhi_epi8(z, c0), s);
  }
};

LUCID_AVX2 inline __m256 Scale(const float* gs, int64_t g) { return _mm256_set1_ps(gs[g]); }

// M tokens against NR rows, groups [g0, g1) of each row (g1 - g0 <= 8), into acc[i][j] (one sum
// per token and row): V sums per token for independent FMA chains, folded at the end. xb: the
// tokens' x from column 16 * g0, token i's at xb + ldx * i (ldx 128 in a panel block).
template <int M, int NR, int V>
LUCID_AVX2 __attribute__((always_inline)) inline void Block(const Decoder& d, const float* xb,
                                                            int64_t ldx, const uint8_t* const* w,
                                                            const float* const* gs, int64_t g0,
                                                            int64_t g1, __m256 (&tot)[M][NR]) {
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    __m256 acc[M][V];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
      for (int u = 0; u < V; ++u) acc[i][u] = _mm256_setzero_ps();
    int64_t g = g0;
    for (; g + 2 <= g1; g += 2) {
      __m256 v[4];
      d.Decode32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[j] + 8 * g)), Scale(gs[j], g),
                 Scale(gs[j], g + 1), v);
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p)
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i)
          acc[i][p % V] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + ldx * i + 16 * (g - g0) + 8 * p),
                                          v[p], acc[i][p % V]);
    }
    if (g < g1) {  // an odd last group
      __m256 v[2];
      d.Decode16(w[j] + 8 * g, Scale(gs[j], g), v);
#pragma GCC unroll 2
      for (int p = 0; p < 2; ++p)
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i)
          acc[i][p % V] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + ldx * i + 16 * (g - g0) + 8 * p),
                                          v[p], acc[i][p % V]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      __m256 a = acc[i][0];
#pragma GCC unroll 4
      for (int u = 1; u < V; ++u) a = _mm256_add_ps(a, acc[i][u]);
      tot[i][j] = _mm256_add_ps(tot[i][j], a);
    }
  }
}

// 3 to 8 tokens (x[0]: their panel of 128-column blocks, KernelTable::Nvfp4F32Tile): the rows
// walked 8 groups (128 columns) at a time.
template <int M, int NR>
LUCID_AVX2 void TileNvfp4(const float* const* x, const uint8_t* const* w, const float* const* gs,
                          int64_t groups, float* out) {
  constexpr int V = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  const Decoder d = Decoder::Make();
  __m256 tot[M][NR];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) tot[i][j] = _mm256_setzero_ps();
  // The same 128 columns of the next row group's rows (MatmulNvfp4F32 passes NR consecutive
  // rows) asked for in L2 as each block starts.
  const std::ptrdiff_t ahead = NR > 1 ? (w[1] - w[0]) * NR : 0;
  for (int64_t g0 = 0; g0 < groups; g0 += 8) {
    if (ahead != 0)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(w[j] + 8 * g0 + ahead), _MM_HINT_T1);
    Block<M, NR, V>(d, x[0] + g0 / 8 * M * 128, 128, w, gs, g0, g0 + 8 < groups ? g0 + 8 : groups,
                    tot);
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) out[i * NR + j] = Hsum(tot[i][j]);
}

constexpr int64_t kAheadBytes = 2048;  // one token: the line this far ahead asked for in L2

// One token, 64 columns (4 groups, 32 bytes) a step in a ymm register: each nibble looked up
// twice by vpshufb (the low and the high byte of the e2m1 value's bf16), the two bytes
// interleaved into words (vpunpck{l,h}bw) and the words made f32 by vpunpck{l,h}wd with zero:
// eight vectors of exact e2m1 values, every operation a single-uop shuffle, where the f16 path
// above spends two on each vcvtph2ps. The vectors come out in kOrder64's column order (in-lane
// unpacking: lane 0 holds columns of groups 0 and 1, lane 1 of groups 2 and 3), which the driver
// gives x beforehand (order_x), so no unpacking back is needed. Each vector's products go into
// the partial sum of its pair of groups (a: groups 0 and 2, b: 1 and 3), which is then multiplied
// by those groups' scales: sum over the step of x * e2m1, times gs, where the per-group path
// multiplies each value by gs first (the same real sum; roundings differ, the products with a
// one-hot x are exact either way). The last groups past a multiple of 4 take Block, in column
// order (order_x leaves them there).
struct Order64 {
  int col[64];
  constexpr Order64() : col() {
    for (int v = 0; v < 8; ++v)
      for (int e = 0; e < 8; ++e) {
        const int q = v % 4, lane = e / 4, byte = 16 * lane + 8 * (q / 2) + 4 * (q % 2) + e % 4;
        col[8 * v + e] = 2 * byte + v / 4;  // v < 4: low nibbles (even columns)
      }
  }
};
constexpr Order64 kOrder64;
// OrderX64's reading of it.
constexpr bool OrderIsPairedStride2() {
  for (int v = 0; v < 8; ++v)
    for (int e = 0; e < 8; ++e)
      if (kOrder64.col[8 * v + e] != 8 * (v % 4) + v / 4 + 2 * (e % 4) + 32 * (e / 4)) return false;
  return true;
}
static_assert(OrderIsPairedStride2());

// kOrder64's vector 4 * h + q holds columns 8q + h, +2, +4, +6 and then 8q + 32 + h, +2, +4, +6:
// the even (h = 0) or odd (h = 1) columns of x[8q..8q+7] and x[8q+32..8q+39], two vpermf128 and
// a vshufps per pair of vectors.
LUCID_AVX2 void OrderX64(const float* x, int64_t groups, float* xo) {
  const int64_t body = groups / 4 * 64;
  for (int64_t b = 0; b < body; b += 64)
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256 a = _mm256_loadu_ps(x + b + 8 * q), c = _mm256_loadu_ps(x + b + 8 * q + 32);
      const __m256 t = _mm256_permute2f128_ps(a, c, 0x20), u = _mm256_permute2f128_ps(a, c, 0x31);
      _mm256_storeu_ps(xo + b + 8 * q, _mm256_shuffle_ps(t, u, _MM_SHUFFLE(2, 0, 2, 0)));
      _mm256_storeu_ps(xo + b + 8 * (4 + q), _mm256_shuffle_ps(t, u, _MM_SHUFFLE(3, 1, 3, 1)));
    }
  for (int64_t k = body; k < groups * 16; ++k) xo[k] = x[k];
}

// The ymm decode of 64 columns (see TileNvfp4Rows64): v[0..7] in kOrder64's column order, each
// the exact e2m1 values.
struct Decoder64 {
  __m256i lo_byte, hi_byte, low4, z;
  // Low / high bytes of bf16(e2m1(n)), n = sign << 3 | magnitude index, in both lanes.
  LUCID_AVX2 static Decoder64 Make() {
    static constexpr unsigned char l[16] = {0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0,
                                            0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0};
    static constexpr unsigned char h[16] = {0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                            0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0};
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(l));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
    return {_mm256_broadcastsi128_si256(lo), _mm256_broadcastsi128_si256(hi),
            _mm256_set1_epi8(0x0F), _mm256_setzero_si256()};
  }
  // The 64 codes (32 bytes) at q.
  LUCID_AVX2 __attribute__((always_inline)) void Decode(const uint8_t* q, __m256 (&v)[8]) const {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i nib[2] = {_mm256_and_si256(b, low4),
                            _mm256_and_si256(_mm256_srli_epi16(b, 4), low4)};
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i lb = _mm256_shuffle_epi8(lo_byte, nib[h]);
      const __m256i hb = _mm256_shuffle_epi8(hi_byte, nib[h]);
      const __m256i w0 = _mm256_unpacklo_epi8(lb, hb), w1 = _mm256_unpackhi_epi8(lb, hb);
      v[4 * h] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w0));
      v[4 * h + 1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w0));
      v[4 * h + 2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w1));
      v[4 * h + 3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w1));
    }
  }
};

// Vectors 0, 1, 4, 5 hold groups 0 and 2 of the step (lanes 0-3 and 4-7), vectors 2, 3, 6, 7
// groups 1 and 3: their scales, from the step's 4 group scales s.
LUCID_AVX2 inline __m256 PairA(__m256 s) {
  return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
}
LUCID_AVX2 inline __m256 PairB(__m256 s) {
  return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
}

template <int NR>
LUCID_AVX2 void TileNvfp4Rows64(const float* const* x, const uint8_t* const* w,
                                const float* const* gs, int64_t groups, float* out) {
  const Decoder64 d64 = Decoder64::Make();
  const Decoder d = Decoder::Make();
  const int64_t body = groups / 4 * 4;
  const float* xr = x[0];
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wj = w[j];
    const float* g = gs[j];
    __m256 acc_a = _mm256_setzero_ps(), acc_b = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < body; g0 += 4) {
      if (g0 % 16 == 0)
        _mm_prefetch(reinterpret_cast<const char*>(wj + 8 * g0) + kAheadBytes, _MM_HINT_T1);
      __m256 v[8];
      d64.Decode(wj + 8 * g0, v);
      const float* xb = xr + 16 * g0;
      __m256 pa = _mm256_mul_ps(_mm256_loadu_ps(xb), v[0]);
      __m256 pb = _mm256_mul_ps(_mm256_loadu_ps(xb + 16), v[2]);
      pa = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 8), v[1], pa);
      pb = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 24), v[3], pb);
      pa = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 32), v[4], pa);
      pb = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 48), v[6], pb);
      pa = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 40), v[5], pa);
      pb = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 56), v[7], pb);
      const __m256 s = _mm256_castps128_ps256(_mm_loadu_ps(g + g0));
      acc_a = _mm256_fmadd_ps(pa, PairA(s), acc_a);
      acc_b = _mm256_fmadd_ps(pb, PairB(s), acc_b);
    }
    __m256 tail[1][1] = {{_mm256_add_ps(acc_a, acc_b)}};
    if (body < groups) Block<1, 1, 4>(d, x[0] + 16 * body, 0, &w[j], &gs[j], body, groups, tail);
    out[j] = Hsum(tail[0][0]);
  }
}

// Two tokens (x[0], x[1]: their rows in kOrder64's order, order_x) against NR rows read one
// after another as TileNvfp4Rows64 does, each 64-column step decoded once (Decoder64, half a
// step at a time) and its vectors multiplied by their groups' scales (e2m1 * gs rounded once,
// the reference's product) before serving both tokens: two sums per token. The last groups past
// a multiple of 4 take Block.
template <int NR>
LUCID_AVX2 void TileNvfp4Rows64x2(const float* const* x, const uint8_t* const* w,
                                  const float* const* gs, int64_t groups, float* out) {
  const Decoder64 d64 = Decoder64::Make();
  const Decoder d = Decoder::Make();
  const int64_t body = groups / 4 * 4;
  const float* x0 = x[0];
  const float* x1 = x[1];
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wj = w[j];
    const float* g = gs[j];
    __m256 acc[2][4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) acc[0][u] = acc[1][u] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < body; g0 += 4) {
      if (g0 % 16 == 0)
        _mm_prefetch(reinterpret_cast<const char*>(wj + 8 * g0) + kAheadBytes, _MM_HINT_T1);
      __m256 v[8];
      d64.Decode(wj + 8 * g0, v);
      const __m256 s = _mm256_castps128_ps256(_mm_loadu_ps(g + g0));
      const __m256 sa = PairA(s), sb = PairB(s);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const __m256 vs = _mm256_mul_ps(v[q], q % 4 < 2 ? sa : sb);
        const int64_t k = 16 * g0 + 8 * q;
        acc[0][q % 4] = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k), vs, acc[0][q % 4]);
        acc[1][q % 4] = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + k), vs, acc[1][q % 4]);
      }
    }
    __m256 tail[2][1];
#pragma GCC unroll 2
    for (int t = 0; t < 2; ++t)
      tail[t][0] =
          _mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3]));
    if (body < groups)
      Block<2, 1, 2>(d, x0 + 16 * body, x1 - x0, &w[j], &gs[j], body, groups, tail);
    out[j] = Hsum(tail[0][0]);
    out[NR + j] = Hsum(tail[1][0]);
  }
}

// One token of bf16 activations through integer products (KernelTable::nvfp4_q16_tile): x per
// 16-column group as int16 with a power-of-two scale, the e2m1 codes looked up by vpshufb as
// 2 * e2m1 in the high byte of a word (512 * e2m1), and vpmaddwd multiplying 16 of each and
// adding them in pairs into int32 lanes: per 64 columns 2 vpshufb, 4 vpunpck and 4 vpmaddwd,
// where the f32 decode above spends 16 shuffles and 8 FMAs. The 4 products in a lane are at
// most 4 * 32767 * 6144 < 2^31, so the int32 sums are exact; each step's two sums of groups
// (groups 0 and 2 in a's lanes 0-3 and 4-7, 1 and 3 in c's) go to f32 (one rounding) and are
// multiplied by their groups' gs * s.
struct OrderQ64 {
  int col[64];
  // Word p of the step's x vector v (v 0 and 1: groups 0 and 2, even and odd columns; v 2 and
  // 3: groups 1 and 3): 8 words per 128-bit lane, the lane's first group at 32 * lane.
  constexpr OrderQ64() : col() {
    for (int v = 0; v < 4; ++v)
      for (int p = 0; p < 16; ++p)
        col[16 * v + p] = 32 * (p / 8) + 16 * (v / 2) + 2 * (p % 8) + v % 2;
  }
};
constexpr OrderQ64 kOrderQ64;

LUCID_AVX2 bool QuantizeXQ16(const float* x, int64_t groups, int16_t* q, float* s) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  alignas(32) int32_t lin[64];
  for (int64_t b = 0; b < groups * 16; b += 64) {
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const __m256 a0 = _mm256_loadu_ps(x + b + 16 * h), a1 = _mm256_loadu_ps(x + b + 16 * h + 8);
      const __m256i inf0 =
          _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a0), exp_mask), exp_mask);
      const __m256i inf1 =
          _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a1), exp_mask), exp_mask);
      if (!_mm256_testz_si256(_mm256_or_si256(inf0, inf1), _mm256_or_si256(inf0, inf1)))
        return false;  // NaN or Inf: the f32 tiles carry it
      const __m256 m8 = _mm256_max_ps(_mm256_and_ps(a0, abs_mask), _mm256_and_ps(a1, abs_mask));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      const float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
      const int64_t g = b / 16 + h;
      if (mx == 0.0f) {
        s[g] = 0.0f;
        for (int i = 0; i < 16; ++i) lin[16 * h + i] = 0;
        continue;
      }
      int e = 0;
      std::frexp(mx, &e);                   // mx in [2^(e-1), 2^e)
      const int k = 15 - e;                 // mx * 2^k in [2^14, 2^15)
      if (k < -60 || k > 90) return false;  // s = 2^(-k-9) and gs * s stay normal f32
      s[g] = std::ldexp(1.0f, -k - 9);      // 9: the tile's words hold 512 * e2m1
      const __m256 p = _mm256_set1_ps(std::ldexp(1.0f, k));
      _mm256_store_si256(reinterpret_cast<__m256i*>(lin + 16 * h),
                         _mm256_cvtps_epi32(_mm256_mul_ps(a0, p)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(lin + 16 * h + 8),
                         _mm256_cvtps_epi32(_mm256_mul_ps(a1, p)));
    }
    for (int p = 0; p < 64; ++p)
      q[b + p] = static_cast<int16_t>(std::min<int32_t>(lin[kOrderQ64.col[p]], 32767));
  }
  return true;
}

template <int NR>
LUCID_AVX2 void TileNvfp4Q16(const int16_t* q, const float* s, const uint8_t* const* w,
                             const float* const* gs, int64_t groups, float* out) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));  // 2 * e2m1
  const __m256i low4 = _mm256_set1_epi8(0x0F), z = _mm256_setzero_si256();
  for (int j = 0; j < NR; ++j) {
    const uint8_t* wj = w[j];
    const float* g = gs[j];
    __m256 acc_a = _mm256_setzero_ps(), acc_c = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < groups; g0 += 4) {
      if (g0 % 16 == 0)
        _mm_prefetch(reinterpret_cast<const char*>(wj + 8 * g0) + kAheadBytes, _MM_HINT_T1);
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wj + 8 * g0));
      const __m256i wl = _mm256_shuffle_epi8(table, _mm256_and_si256(b, low4));
      const __m256i wh =
          _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(b, 4), low4));
      const __m256i* xv = reinterpret_cast<const __m256i*>(q + 16 * g0);
      const __m256i a = _mm256_add_epi32(
          _mm256_madd_epi16(_mm256_unpacklo_epi8(z, wl), _mm256_loadu_si256(xv)),
          _mm256_madd_epi16(_mm256_unpacklo_epi8(z, wh), _mm256_loadu_si256(xv + 1)));
      const __m256i c = _mm256_add_epi32(
          _mm256_madd_epi16(_mm256_unpackhi_epi8(z, wl), _mm256_loadu_si256(xv + 2)),
          _mm256_madd_epi16(_mm256_unpackhi_epi8(z, wh), _mm256_loadu_si256(xv + 3)));
      const __m256 sc =
          _mm256_castps128_ps256(_mm_mul_ps(_mm_loadu_ps(g + g0), _mm_loadu_ps(s + g0)));
      acc_a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), PairA(sc), acc_a);
      acc_c = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), PairB(sc), acc_c);
    }
    out[j] = Hsum(_mm256_add_ps(acc_a, acc_c));
  }
}

// KernelTable::rows_axpy_nvfp4 for one token a pass (rows_axpy_packed_tokens = 1): y[c] = sum
// over rows r, in order from zero, of x[r] * s2 * (e2m1 * group scale), each row read from start
// to end (a head's rows are one ascending stream) and decoded 64 columns a step by Decoder64 into
// a buffer in kOrder64's order (put back in column order at the end), each vector times its
// groups' scales times x[r] * s2 (the same real product as the reference's (e2m1 * gs) * s2 * x,
// rounded differently). Columns past a multiple of 64 take the 16-column decoder. warm is not
// used: the rows are read in address order, which the hardware prefetcher follows.
LUCID_AVX2 void RowsAxpyNvfp4One(const uint8_t* w, int64_t ldw, int64_t rows, const float* sc,
                                 int64_t lds, float s2, const float* x, int64_t ldx, int64_t T,
                                 int64_t C, float* y, int64_t ldy, const WarmSpans&) {
  const Decoder64 d64 = Decoder64::Make();
  const Decoder d = Decoder::Make();
  const int64_t body = C / 64 * 64, groups = (C + 15) / 16;
  thread_local std::vector<float> acc;
  acc.resize(groups * 16);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * ldx;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w + r * ldw;
      const float* g = sc + r * lds;
      const __m256 a = _mm256_set1_ps(xt[r] * s2);
      for (int64_t c = 0; c < body; c += 64) {
        __m256 v[8];
        d64.Decode(row + c / 2, v);
        const __m256 s = _mm256_mul_ps(_mm256_castps128_ps256(_mm_loadu_ps(g + c / 16)), a);
        const __m256 ma = PairA(s), mb = PairB(s);
        float* o = acc.data() + c;
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u)
          _mm256_storeu_ps(o + 8 * u,
                           _mm256_fmadd_ps(v[u], u % 4 < 2 ? ma : mb, _mm256_loadu_ps(o + 8 * u)));
      }
      for (int64_t gi = body / 16; gi < groups; ++gi) {  // whole 16-column groups past the body
        __m256 v[2];
        d.Decode16(row + 8 * gi, _mm256_mul_ps(_mm256_set1_ps(g[gi]), a), v);
        float* o = acc.data() + 16 * gi;
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), v[0]));
        _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_loadu_ps(o + 8), v[1]));
      }
    }
    float* yt = y + t * ldy;
    for (int64_t b = 0; b < body; b += 64)
      for (int p = 0; p < 64; ++p) yt[b + kOrder64.col[p]] = acc[b + p];
    for (int64_t c = body; c < C; ++c) yt[c] = acc[c];
  }
}

}  // namespace

void AddNvfp4TilesAvx2(KernelTable& t) {
  t.rows_axpy_nvfp4 = &RowsAxpyNvfp4One;
  t.rows_axpy_packed_tokens = 1;
  t.nvfp4_f32_tiles[0] = {&TileNvfp4Rows64<8>, 8, &OrderX64};
  t.nvfp4_f32_tiles[1] = {&TileNvfp4Rows64x2<8>, 8, &OrderX64};
  t.nvfp4_f32_tiles[2] = {&TileNvfp4<3, 4>, 4};
  t.nvfp4_f32_tiles[3] = {&TileNvfp4<4, 4>, 4};
  t.nvfp4_f32_tiles[4] = {&TileNvfp4<5, 4>, 4};
  t.nvfp4_f32_tiles[5] = {&TileNvfp4<6, 4>, 4};
  t.nvfp4_f32_tiles[6] = {&TileNvfp4<7, 4>, 4};
  t.nvfp4_f32_tiles[7] = {&TileNvfp4<8, 4>, 4};
  t.nvfp4_f32_tokens = 8;
  t.nvfp4_q16_tile = {&QuantizeXQ16, &TileNvfp4Q16<8>, 8};
}

}  // namespace lucid::fast
