// The NVFP4 GEMM on int16 activations (GemmQ16: GemmKernels::tile_q16 at the AVX2 level) against
// the CpuOps reference run on activations rounded to bf16: Linear and MoeExperts through
// CpuFastOps with FastActivations::kBf16 on odd shapes; one-hot activations giving each weight
// exactly; activations whose groups span more than 2^7 (the int16 rounding's bound); a
// non-finite activation taking the f32 GEMM so that it reaches the output as the reference has
// it; and a token split whose sub-ranges start off PackX's panels. Levels without the kernel
// (every one but AVX2) check that GemmQ16 says so and the same expectations hold on their path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_gemm.h"
#include "backends/cpu/cpu_fast_kernels.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RelErr;
using testing_util::RoundedToBf16;

const CpuOps kRef;

Weight Nvfp4(int64_t rows, int64_t cols, uint32_t seed, int64_t skip = 0) {
  return testing_util::RandomNvfp4(skip + rows + 3, cols, seed).RowRange(skip, rows);
}

class Q16GemmTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuFastOps ops_{GetParam(), FastActivations::kBf16};
  const fast::KernelTable& kt() const { return fast::Kernels(ops_.isa()); }
};

TEST_P(Q16GemmTest, OnlyTheAvx2LevelTakesIt) {
  EXPECT_EQ(fast::GemmQ16(kt(), WeightFormat::kNvfp4, FastActivations::kBf16),
            ops_.isa() == CpuIsa::kAvx2);
  EXPECT_FALSE(fast::GemmQ16(kt(), WeightFormat::kNvfp4, FastActivations::kF32));
  EXPECT_FALSE(fast::GemmQ16(kt(), WeightFormat::kFp8Block, FastActivations::kBf16));
}

// Sums of bf16 activations times NVFP4 weights: int16 x is exact for these values (uniform in
// [-1, 1], within 2^7 of their group's largest but for a few near zero), the rest is f32
// rounding.
TEST_P(Q16GemmTest, LinearMatchesReferenceOnBf16Activations) {
  struct Case {
    int64_t T, N, K, skip;
  };
  const Case cases[] = {{32, 37, 200, 0},   {129, 131, 1000, 5}, {300, 37, 2049, 130},
                        {513, 131, 208, 1}, {64, 16, 2048, 0},   {97, 45, 1536, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) +
                 " K=" + std::to_string(c.K));
    Weight w = Nvfp4(c.N, c.K, 7 + static_cast<uint32_t>(c.K), c.skip);
    Tensor x = Random({c.T, c.K}, 3 + static_cast<uint32_t>(c.T));
    Tensor y = Tensor::Zeros(DType::kF32, {c.T, c.N}), r = y.Clone();
    ops_.Linear(x, w, y);
    kRef.Linear(RoundedToBf16(x), w, r);
    EXPECT_LE(RelErr(y, r), 1e-5);
  }
}

// x[t][k] = 1 for k = t: y[t][n] = W[n][t] exactly ((e2m1 * gs) * s2, DequantizeRowSpan's value).
TEST_P(Q16GemmTest, OneHotActivationsGiveEachWeightExactly) {
  const int64_t K = 1100, N = 45;
  Weight w = Nvfp4(N, K, 31, 100);
  Tensor x = Tensor::Zeros(DType::kF32, {K, K});
  for (int64_t t = 0; t < K; ++t) x.data<float>()[t * K + t] = 1.0f;
  Tensor y = Tensor::Zeros(DType::kF32, {K, N});
  ops_.Linear(x, w, y);
  std::vector<float> row(K);
  int64_t bad = 0;
  for (int64_t n = 0; n < N; ++n) {
    DequantizeRowSpan(w, n, 0, K, row.data());
    for (int64_t k = 0; k < K; ++k)
      if (!(row[k] == y.data<float>()[k * N + n]) && bad++ < 5)
        ADD_FAILURE() << "n=" << n << " k=" << k << " " << row[k] << " vs "
                      << y.data<float>()[k * N + n];
  }
  EXPECT_EQ(bad, 0);
}

// Groups holding values 2^-20 .. 2^10 of each other (int16 keeps ~15 bits of the largest) and
// whole groups of tiny values (their own scale): the result is within 2^-15 of the sum of
// |w x| of the reference on the bf16 values.
TEST_P(Q16GemmTest, WideGroupsStayWithinTheInt16Bound) {
  const int64_t T = 70, N = 40, K = 512;
  Weight w = Nvfp4(N, K, 41);
  Tensor x = Random({T, K}, 42);
  float* xs = x.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = k / 16;
      if (g % 3 == 0) xs[t * K + k] *= std::ldexp(1.0f, static_cast<int>((k * 7 + t) % 31) - 20);
      if (g % 3 == 1) xs[t * K + k] *= 1e-30f;
    }
  Tensor y = Tensor::Zeros(DType::kF32, {T, N});
  ops_.Linear(x, w, y);
  const Tensor xr = RoundedToBf16(x);
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    DequantizeRowSpan(w, n, 0, K, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        sum += double(row[k]) * xr.data<float>()[t * K + k];
        mag += std::abs(double(row[k]) * xr.data<float>()[t * K + k]);
      }
      ASSERT_LE(std::abs(y.data<float>()[t * N + n] - sum), std::ldexp(mag, -15) + 1e-37)
          << "t=" << t << " n=" << n;
    }
  }
}

// A NaN or an Inf among the activations reaches the outputs as in the reference (NaN where it
// meets a weight, Inf * w otherwise): such an x takes the f32 GEMM instead of int16.
TEST_P(Q16GemmTest, NonFiniteActivationsReachTheOutputAsInTheReference) {
  const int64_t T = 64, N = 33, K = 256;
  Weight w = Nvfp4(N, K, 51);
  Tensor x = Random({T, K}, 52);
  x.data<float>()[5 * K + 17] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[40 * K + 3] = std::numeric_limits<float>::infinity();
  Tensor y = Tensor::Zeros(DType::kF32, {T, N}), r = y.Clone();
  ops_.Linear(x, w, y);
  kRef.Linear(RoundedToBf16(x), w, r);
  int64_t nonfinite = 0;
  for (int64_t i = 0; i < T * N; ++i) {
    const float a = y.data<float>()[i], b = r.data<float>()[i];
    if (!std::isfinite(b)) {
      ++nonfinite;
      EXPECT_TRUE(std::isnan(b) ? std::isnan(a) : a == b) << "i=" << i << " " << a << " vs " << b;
    } else {
      EXPECT_NEAR(a, b, 1e-4 * (1 + std::abs(b))) << "i=" << i;
    }
  }
  EXPECT_GE(nonfinite, 2 * N - 2);  // the NaN row and the Inf row (a zero weight gives NaN too)
}

// GemmRows on token ranges that do not start on PackX's 6-token panels (the token split of
// Linear): the int16 groups are gathered from the panels; every sub-range equals the whole.
TEST_P(Q16GemmTest, TokenSubRangesOffThePanelsEqualTheWholeCall) {
  const int64_t T = 150, N = 48, K = 400;
  Weight w = Nvfp4(N, K, 61);
  Tensor x = Random({T, K}, 62);
  fast::PackedX px;
  fast::PackX(kt(), x.data<const float>(), K, T, K, w.format, FastActivations::kBf16, &px);
  EXPECT_EQ(px.gemm_q16, fast::GemmQ16(kt(), w.format, FastActivations::kBf16));
  if (!px.gemm_panels) {  // the scalar level has no GEMM: x stays f32 rows
    EXPECT_EQ(ops_.isa(), CpuIsa::kScalar);
    return;
  }
  std::vector<float> whole(T * N), parts(T * N);
  ASSERT_TRUE(fast::GemmRows(kt(), px, 0, T, w, 0, N, whole.data(), N));
  const int64_t cuts[] = {0, 37, 79, T};
  for (int i = 0; i + 1 < 4; ++i)
    ASSERT_TRUE(fast::GemmRows(kt(), px, cuts[i], cuts[i + 1], w, 0, N, parts.data(), N));
  for (int64_t i = 0; i < T * N; ++i) ASSERT_EQ(whole[i], parts[i]) << "i=" << i;
}

TEST_P(Q16GemmTest, MoeExpertsMatchReferenceOnBf16Activations) {
  const int64_t E = 4, D = 256, I = 144, k = 2, T = 300;
  std::vector<ExpertWeights> ex;
  for (int64_t e = 0; e < E; ++e) {
    const uint32_t s = static_cast<uint32_t>(e);
    ex.push_back({Nvfp4(I, D, 100 + s), Nvfp4(I, D, 200 + s), Nvfp4(D, I, 300 + s)});
  }
  Tensor x = Random({T, D}, 17);
  std::vector<int32_t> idx;
  std::vector<float> wt;
  testing_util::Top2Routing(T, E, &idx, &wt);
  Tensor out = Random({T, D}, 18), ref = out.Clone();
  ops_.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), out);
  // The reference on bf16 x; its hidden activations are f32 where the fast path rounds them too,
  // so the tolerance is bf16's (the hidden rows' rounding), not f32's.
  kRef.MoeExperts(RoundedToBf16(x), ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k),
                  ref);
  EXPECT_LE(RelErr(out, ref), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Isa, Q16GemmTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                           CpuIsa::kAvx512Bf16),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace lucid
