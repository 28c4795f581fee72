// The fast backend's instruction-set detection and its kernel tables: the scalar entries, and
// each level's table completed with them where the level has no kernel of its own.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/dtype.h"

namespace lucid {

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

// LUCID_CPU_ISA=scalar|avx2|avx512|avx512bf16 caps the level (for comparisons); it never raises it.
CpuIsa DetectCpuIsa() {
  static const CpuIsa isa = [] {
    __builtin_cpu_init();
    CpuIsa best = CpuIsa::kScalar;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = CpuIsa::kAvx2;
    if (best == CpuIsa::kAvx2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
      best = CpuIsa::kAvx512;
    // The bf16 level also uses VBMI's vpermb (every AVX512_BF16 CPU but Cooper Lake has it).
    if (best == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16") &&
        __builtin_cpu_supports("avx512vbmi"))
      best = CpuIsa::kAvx512Bf16;
    if (const char* cap = std::getenv("LUCID_CPU_ISA")) {
      for (CpuIsa c : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16})
        if (std::string(cap) == CpuIsaName(c)) best = std::min(best, c);
    }
    return best;
  }();
  return isa;
}

namespace fast {
namespace {

int64_t ScalarVectorK(int64_t) { return 0; }

float ScalarDot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void ScalarAxpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void ScalarScale(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}
void ScalarScaledMul(const float* x, const float* w, float inv, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * inv);
}
float ScalarSumSquares(const float* x, int64_t n) { return ScalarDot(x, x, n); }
void ScalarSwiGlu(const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}
void ScalarIndexerBlock(const float* q, const float* w, int64_t heads, int64_t D, const float* kt,
                        float* out, const void* const* warm, int64_t warm_bytes) {
  WarmAll16(warm, warm_bytes);
  for (int64_t u = 0; u < 16; ++u) {
    float s = 0.0f;
    for (int64_t j = 0; j < heads; ++j) {
      float d = 0.0f;
      for (int64_t i = 0; i < D; ++i) d += q[j * D + i] * kt[i * 16 + u];
      s += w[j] * std::max(d, 0.0f);
    }
    out[u] += s;
  }
}

void ScalarTranspose16(const float* const* rows, int64_t n, int64_t D, float* dst) {
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t d = 0; d < D; ++d) dst[d * 16 + r] = r < n ? rows[r][d] : 0.0f;
}

float ScalarExpSum(float* s, int64_t n, float m) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - m));
  return sum;
}
void ScalarWeightedRows(const float* const* rows, const float* p, int64_t nb, float* out,
                        int64_t R) {
  for (int64_t j = 0; j < nb; ++j)
    for (int64_t i = 0; i < R; ++i) out[i] += p[j] * rows[j][i];
}

void ScalarWidenBf16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t b = static_cast<uint32_t>(src[k]) << 16;
    std::memcpy(dst + k, &b, 4);
  }
}

uint16_t Bf16Rne(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  if ((b & 0x7F800000u) == 0x7F800000u)  // inf, or NaN kept a (quiet) NaN
    return static_cast<uint16_t>((b >> 16) | ((b & 0x7FFFFFu) ? 0x40u : 0u));
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

void ScalarSplitBf16(const float* x, uint16_t* hi, uint16_t* lo, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    hi[i] = Bf16Rne(x[i]);
    lo[i] = Bf16Rne(x[i] - Bf16ToF32(hi[i]));
  }
}

void ScalarWidenE4m3(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(src[i]);
}

KernelTable MakeScalar() {
  KernelTable t;
  t.vector_k = &ScalarVectorK;
  t.dot = &ScalarDot;
  t.axpy = &ScalarAxpy;
  t.scale = &ScalarScale;
  t.scaled_mul = &ScalarScaledMul;
  t.sum_squares = &ScalarSumSquares;
  t.swiglu = &ScalarSwiGlu;
  t.indexer_block = &ScalarIndexerBlock;
  t.transpose16 = &ScalarTranspose16;
  t.exp_sum = &ScalarExpSum;
  t.weighted_rows = &ScalarWeightedRows;
  t.widen_bf16 = &ScalarWidenBf16;
  t.widen_e4m3 = &ScalarWidenE4m3;
  t.split_bf16 = &ScalarSplitBf16;
  return t;
}

// Fills the entries an instruction set leaves empty with the scalar ones.
KernelTable Complete(KernelTable t) {
  const KernelTable s = MakeScalar();
  if (!t.swiglu) t.swiglu = s.swiglu;
  if (!t.indexer_block) t.indexer_block = s.indexer_block;
  if (!t.transpose16) t.transpose16 = s.transpose16;
  if (!t.exp_sum) t.exp_sum = s.exp_sum;
  if (!t.weighted_rows) t.weighted_rows = s.weighted_rows;
  if (!t.widen_bf16) t.widen_bf16 = s.widen_bf16;
  if (!t.widen_e4m3) t.widen_e4m3 = s.widen_e4m3;
  if (!t.split_bf16) t.split_bf16 = s.split_bf16;
  return t;
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable t = MakeScalar();
  return t;
}

const KernelTable& Kernels(CpuIsa isa) {
  static const KernelTable avx2 = Complete(Avx2Kernels());
  static const KernelTable avx512 = Complete(Avx512Kernels());
  static const KernelTable avx512bf16 = Complete(Avx512Bf16Kernels());
  switch (isa) {
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512:
      return avx512;
    case CpuIsa::kAvx512Bf16:
      return avx512bf16;
    default:
      return ScalarKernels();
  }
}

bool KernelTable::Fused(WeightFormat format) const {
  return (format == WeightFormat::kFp8Block && fp8_tiles[0].fn) ||
         (format == WeightFormat::kNvfp4 && nvfp4_tiles[0].fn);
}

}  // namespace fast
}  // namespace lucid
