// The many-token GEMM (GemmRows, cpu_fast_gemm*.cpp) against the CpuOps reference: Linear and
// MoeExperts through CpuFastOps on odd shapes (token counts from kGemmMinTokens up, K not a
// multiple of the vector or k block, N not a multiple of the tile, row-range views) in every
// weight format, at every instruction-set level this machine has; and GemmRows itself on
// sub-ranges of tokens and rows (writes exactly its tile of y, nothing else) and its refusal at
// levels without a kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RelErr;

const CpuOps kRef;

// Formats: 0 f32, 1 bf16, 2 FP8-block f32 scales, 3 FP8-block ue8m0 scales, 4 NVFP4.
constexpr int kFormats = 5;
const char* FormatName(int f) {
  static const char* names[] = {"f32", "bf16", "fp8", "fp8-ue8m0", "nvfp4"};
  return names[f];
}

// A [rows, cols] weight of format f viewed from row `skip` of a [skip + rows + 3, cols] parent
// (packed formats: the view's scale rows straddle 128-row blocks when skip is not a multiple).
Weight MakeWeight(int f, int64_t rows, int64_t cols, uint32_t seed, int64_t skip = 0) {
  const int64_t total = skip + rows + 3;
  Weight w;
  if (f >= 2) {
    w = f == 4 ? testing_util::RandomNvfp4(total, cols, seed)
               : testing_util::RandomFp8(total, cols, seed, f == 3);
  } else {
    w = testing_util::RandomDense(f == 1, total, cols, seed);
  }
  return w.RowRange(skip, rows);
}

// Well below what one missing k block (or one wrong weight row) costs on these shapes: the
// smallest case has K = 200, T * N > 4000 outputs.
constexpr double kTol = 1e-5;

class FastGemmTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuFastOps ops_{GetParam()};
};

TEST_P(FastGemmTest, LinearMatchesReference) {
  struct Case {
    int64_t T, N, K, skip;
  };
  // T 0: replaced by the format's own GEMM threshold and the token count just below it.
  const Case cases[] = {{0, 37, 200, 0},    {129, 131, 1000, 5}, {300, 37, 2049, 130},
                        {513, 131, 200, 1}, {129, 37, 2049, 0},  {300, 131, 1000, 0}};
  for (int f = 0; f < kFormats; ++f) {
    std::vector<Case> all(std::begin(cases), std::end(cases));
    const int64_t g = std::max<int64_t>(
        fast::kGemmMinTokens,
        fast::GemmMinTokens(fast::Kernels(GetParam()), MakeWeight(f, 1, 16, 1, 0).format,
                            FastActivations::kF32));
    all[0].T = g;
    all.push_back({g - 1, 37, 200, 0});
    for (const Case& c : all) {
      SCOPED_TRACE(std::string(FormatName(f)) + " T=" + std::to_string(c.T) +
                   " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                   " skip=" + std::to_string(c.skip));
      Weight w = MakeWeight(f, c.N, c.K, 7 + static_cast<uint32_t>(c.K + f), c.skip);
      Tensor x = Random({c.T, c.K}, 3 + static_cast<uint32_t>(c.T));
      Tensor y = Tensor::Zeros(DType::kF32, {c.T, c.N}), r = y.Clone();
      ops_.Linear(x, w, y);
      kRef.Linear(x, w, r);
      EXPECT_LE(RelErr(y, r), kTol);
    }
  }
}

// GemmRows on a sub-range of tokens and rows: that tile of y equals the reference, the rest of y
// keeps its sentinel. At levels without a GEMM kernel it refuses and writes nothing.
TEST_P(FastGemmTest, GemmRowsWritesExactlyItsTile) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  const int64_t T = 300, N = 131, K = 1000, t0 = 7, t1 = 290, n0 = 5, n1 = 118;
  for (int f = 0; f < kFormats; ++f) {
    SCOPED_TRACE(FormatName(f));
    Weight w = MakeWeight(f, N, K, 21 + static_cast<uint32_t>(f), 3);
    Tensor x = Random({T, K}, 22);
    fast::PackedX px;
    fast::PackX(kt, x.data<const float>(), K, T, K, w.format, FastActivations::kF32, &px);
    const float kSentinel = 12345.0f;
    std::vector<float> y(T * N, kSentinel);
    const bool took = fast::GemmRows(kt, px, t0, t1, w, n0, n1, y.data(), N);
    EXPECT_EQ(took, ops_.isa() != CpuIsa::kScalar);  // AVX2 and AVX-512 have GEMM kernels
    EXPECT_EQ(took, fast::GemmMinTokens(kt, w.format, FastActivations::kF32) > 0);
    Tensor r = Tensor::Zeros(DType::kF32, {T, N});
    kRef.Linear(x, w, r);
    double e = 0, m = 1e-30;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        const float v = y[t * N + n];
        if (took && t >= t0 && t < t1 && n >= n0 && n < n1) {
          e = std::max(e, double(std::abs(v - r.data<float>()[t * N + n])));
          m = std::max(m, double(std::abs(r.data<float>()[t * N + n])));
        } else {
          ASSERT_EQ(v, kSentinel) << "t=" << t << " n=" << n;
        }
      }
    EXPECT_LE(e / m, kTol);
  }
}

// One-hot activations (x[t][k] = 1 for k = t) make y[t][n] = W[n][t] exactly, so the decoded
// weights are checked for exact equality with DequantizeRowSpan: every format, several k blocks, a
// partial last block, FP8 scales of 2^7 and more (the decode's overflow-safe path), a view whose
// rows straddle FP8 scale blocks.
TEST_P(FastGemmTest, GemmRowsDecodesWeightsExactly) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  const int64_t K = 1100, N = 45;
  for (int f = 0; f < kFormats; ++f) {
    SCOPED_TRACE(FormatName(f));
    Weight w = MakeWeight(f, N, K, 31 + static_cast<uint32_t>(f), 100);
    if (f == 2)  // big scales on every other block
      for (int64_t i = 0; i < w.scale.numel(); i += 2) w.scale.data<float>()[i] *= 3e6f;
    Tensor x = Tensor::Zeros(DType::kF32, {K, K});
    std::fill_n(x.data<float>(), K * K, 0.0f);
    for (int64_t t = 0; t < K; ++t) x.data<float>()[t * K + t] = 1.0f;
    fast::PackedX px;
    fast::PackX(kt, x.data<const float>(), K, K, K, w.format, FastActivations::kF32, &px);
    std::vector<float> y(K * N);
    if (!fast::GemmRows(kt, px, 0, K, w, 0, N, y.data(), N)) {
      EXPECT_EQ(fast::GemmMinTokens(kt, w.format, FastActivations::kF32), 0);
      continue;
    }
    std::vector<float> row(K);
    int64_t bad = 0;
    for (int64_t n = 0; n < N; ++n) {
      DequantizeRowSpan(w, n, 0, K, row.data());
      for (int64_t k = 0; k < K; ++k)
        if (!(row[k] == y[k * N + n]) && bad++ < 5)  // exact (a -0 weight sums to +0)
          ADD_FAILURE() << "n=" << n << " k=" << k << " " << row[k] << " vs " << y[k * N + n];
    }
    EXPECT_EQ(bad, 0);
  }
}

// Activations rounded to bf16 (FastActivations::kBf16) where the panels stay f32 (no bf16 pairs
// for the format at this level): the GEMM's result is bit for bit that of f32 activations rounded
// beforehand by the scalar split, whether the level rounds as it packs (AVX2) or from a rounded
// copy; with ties, the largest float (rounds to Inf), subnormals, Inf and NaN among them.
TEST_P(FastGemmTest, GemmRowsRoundsBf16ActivationsAsTheScalarSplit) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  const fast::KernelTable& scalar = fast::ScalarKernels();
  const int64_t T = 129, N = 37, K = 203;
  Tensor x = Random({T, K}, 51);
  float* xs = x.data<float>();
  xs[3] = 3.0f + 1.0f / 128.0f + 1.0f / 256.0f;  // a tie: to even (3.0078125 -> 3.015625)
  xs[5 * K + 7] = -(1.0f + 1.0f / 256.0f);       // a tie at the other parity
  xs[9 * K + 1] = std::numeric_limits<float>::max();
  xs[11 * K + 2] = 3 * std::numeric_limits<float>::denorm_min();
  xs[40 * K + 200] = std::numeric_limits<float>::infinity();
  xs[41 * K + 17] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> hi(T * K), lo(T * K);
  scalar.split_bf16(xs, hi.data(), lo.data(), T * K);
  Tensor rounded = Tensor::Zeros(DType::kF32, {T, K});
  scalar.widen_bf16(hi.data(), rounded.data<float>(), T * K);
  for (int f = 0; f < kFormats; ++f) {
    SCOPED_TRACE(FormatName(f));
    Weight w = MakeWeight(f, N, K, 61 + static_cast<uint32_t>(f));
    if (fast::GemmPairs(kt, w.format, FastActivations::kBf16) ||
        T < fast::GemmMinTokens(kt, w.format, FastActivations::kBf16) ||
        fast::GemmMinTokens(kt, w.format, FastActivations::kBf16) == 0)
      continue;  // bf16-pair panels (another kernel), or no GEMM here for this x
    fast::PackedX a, b;
    fast::PackX(kt, xs, K, T, K, w.format, FastActivations::kBf16, &a);
    fast::PackX(kt, rounded.data<const float>(), K, T, K, w.format, FastActivations::kF32, &b);
    std::vector<float> ya(T * N), yb(T * N);
    ASSERT_TRUE(fast::GemmRows(kt, a, 0, T, w, 0, N, ya.data(), N));
    ASSERT_TRUE(fast::GemmRows(kt, b, 0, T, w, 0, N, yb.data(), N));
    int64_t bad = 0, nonfinite = 0;
    for (int64_t i = 0; i < T * N; ++i) {
      nonfinite += !std::isfinite(yb[i]);
      const bool same = std::isnan(ya[i]) ? std::isnan(yb[i]) : ya[i] == yb[i];
      if (!same && bad++ < 5) ADD_FAILURE() << "i=" << i << " " << ya[i] << " vs " << yb[i];
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GE(nonfinite, 3 * N);  // the rows holding max (-> Inf), Inf and NaN
  }
}

TEST_P(FastGemmTest, MoeExpertsMatchReference) {
  // 4 experts, top-2 of 300 tokens: every expert gets ~150 tokens (the GEMM path) and K of the
  // down projection (131) is not a multiple of 16.
  const int64_t E = 4, D = 260, I = 131, k = 2, T = 300;
  for (int f : {1, 2, 4}) {
    SCOPED_TRACE(FormatName(f));
    std::vector<ExpertWeights> ex;
    for (int64_t e = 0; e < E; ++e) {
      const uint32_t s = static_cast<uint32_t>(e + 10 * f);
      ex.push_back({MakeWeight(f, I, D, 100 + s), MakeWeight(f, I, D, 200 + s),
                    MakeWeight(f, D, I, 300 + s)});
    }
    Tensor x = Random({T, D}, 17);
    std::vector<int32_t> idx(T * k);
    std::vector<float> wt(T * k);
    for (int64_t t = 0; t < T; ++t) {
      idx[t * k] = static_cast<int32_t>((t * 3) % E);
      idx[t * k + 1] = static_cast<int32_t>((t * 3 + 1 + t % 3) % E);
      wt[t * k] = 0.7f;
      wt[t * k + 1] = 0.4f;
    }
    Tensor out = Random({T, D}, 18), ref = out.Clone();
    ops_.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), out);
    kRef.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), ref);
    EXPECT_LE(RelErr(out, ref), kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FastGemmTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                           CpuIsa::kAvx512Bf16),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace lucid
