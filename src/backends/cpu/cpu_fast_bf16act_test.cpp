// CpuFastOps with FastActivations::kBf16 (`--cpu-kernels fast-bf16act`) against the reference run
// on activations rounded to bf16 first: Linear in every weight format and at token counts that
// take every path (one-token tiles, token tiles, the many-token GEMM), MoeExperts (both matmul
// inputs rounded: x for gate/up, the SwiGLU output for down) and MlaProjectOutput, at every
// instruction-set level this machine has. The rounding itself is checked to happen: the results
// sit ~1e-3 from the reference on the unrounded activations.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RelErr;
using testing_util::RoundedToBf16;

const CpuOps kRef;

// 0 f32, 1 bf16, 2 FP8 block (f32 scales), 3 FP8 block (UE8M0 scales), 4 NVFP4.
Weight AnyWeight(int kind, int64_t rows, int64_t cols, uint32_t seed) {
  switch (kind) {
    case 0:
    case 1:
      return testing_util::RandomDense(kind == 1, rows, cols, seed);
    case 2:
    case 3:
      return testing_util::RandomFp8(rows, cols, seed, kind == 3);
    default:
      return testing_util::RandomNvfp4(rows, cols, seed);
  }
}
const char* KindName(int kind) {
  static const char* const kNames[] = {"f32", "bf16", "fp8", "fp8-ue8m0", "nvfp4"};
  return kNames[kind];
}

class FastBf16ActTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuFastOps ops_{GetParam(), FastActivations::kBf16};
};

TEST_P(FastBf16ActTest, ReportsItsActivations) {
  EXPECT_EQ(ops_.activations(), FastActivations::kBf16);
  EXPECT_EQ(std::string(ops_.name()), std::string(CpuFastOps(GetParam()).name()) + "-bf16act");
}

TEST_P(FastBf16ActTest, LinearMatchesReferenceOnRoundedActivations) {
  struct Case {
    int64_t T, N, K;
  };
  // T 1 (one-token tiles: the row-after-row ones for FP8, and for bf16 from 1024 columns, 2100
  // here; NVFP4's integer tile at 1024, a multiple of 64), 2-12 (token tiles, 8 whole-row bf16, 12
  // k blocks; 5 and 7 leave a 1- and a 3-token tile), 33 (packed weights: the hi-only tiles, up to
  // 63 tokens), 70 (packed and f32 weights: the GEMM; bf16 the tiles, up to 79), 100, 130 and 150
  // (the GEMM for every format, on bf16 pairs but for f32 weights, with an odd K at 77 and 301; 130
  // x 20 splits the tokens across threads off the 12-token panels).
  for (int kind = 0; kind < 5; ++kind) {
    for (Case c : {Case{1, 37, 300}, Case{1, 300, 2100}, Case{1, 70, 1024}, Case{2, 19, 129},
                   Case{3, 21, 1100}, Case{5, 9, 260}, Case{7, 31, 520}, Case{8, 45, 2100},
                   Case{12, 21, 2100}, Case{33, 40, 300}, Case{70, 33, 260}, Case{130, 20, 140},
                   Case{100, 37, 77}, Case{150, 70, 301}}) {
      SCOPED_TRACE(std::string(KindName(kind)) + " T=" + std::to_string(c.T) +
                   " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K));
      const Weight w = AnyWeight(kind, c.N, c.K, 7 + c.K);
      const Tensor x = Random({c.T, c.K}, 3 + c.T);
      Tensor y = Tensor::Zeros(DType::kF32, {c.T, c.N}), r = y.Clone(), r32 = y.Clone();
      ops_.Linear(x, w, y);
      kRef.Linear(RoundedToBf16(x), w, r);
      EXPECT_LE(RelErr(y, r), 2e-5);
      kRef.Linear(x, w, r32);
      EXPECT_GT(RelErr(y, r32), 1e-4);  // the activations were rounded
    }
  }
}

// One token against NVFP4 rows at K a multiple of 64 (the AVX2 integer tile, which puts x per
// 16-column group on int16 with a power-of-two scale): groups whose values span 2^-30 to 2^30 of
// each other stay within the bound that scale allows, and a NaN or Inf in x, or a group beyond
// the scales' range (1e-36), gives the reference's non-finite or tiny outputs through the f32
// tiles.
TEST_P(FastBf16ActTest, Nvfp4OneTokenKeepsRangeAndNonFiniteValues) {
  const int64_t N = 40, K = 512;
  const Weight w = testing_util::RandomNvfp4(N, K, 5);
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    Tensor x = Random({1, K}, 6);
    float* xv = x.data<float>();
    for (int64_t k = 0; k < K; ++k) xv[k] *= std::ldexp(1.0f, static_cast<int>(k % 61) - 30);
    if (variant == 1) xv[77] = std::numeric_limits<float>::quiet_NaN();
    if (variant == 2) xv[300] = std::numeric_limits<float>::infinity();
    if (variant == 3) {
      for (int64_t k = 128; k < 144; ++k) xv[k] = 1e-36f * static_cast<float>(k - 135);
    }
    Tensor y = Tensor::Zeros(DType::kF32, {1, N}), r = y.Clone();
    ops_.Linear(x, w, y);
    kRef.Linear(RoundedToBf16(x), w, r);
    for (int64_t n = 0; n < N; ++n) {
      const float a = y.data<float>()[n], b = r.data<float>()[n];
      ASSERT_EQ(std::isnan(a), std::isnan(b)) << n;
      ASSERT_EQ(std::isinf(a), std::isinf(b)) << n;
    }
    if (variant == 1 || variant == 2) continue;
    // The bound of the int16 step, 2^-15 of each group's largest |x| per value, plus f32
    // rounding: |y - r| <= sum over k of |W[n][k]| * (2^-15 * max |x| of k's group + 1e-6 |x[k]|).
    const Tensor xr = RoundedToBf16(x);
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
      DequantizeRow(w, n, row.data());
      double bound = 0;
      for (int64_t k = 0; k < K; ++k) {
        float mx = 0;
        for (int64_t i = k / 16 * 16; i < k / 16 * 16 + 16; ++i)
          mx = std::max(mx, std::abs(xr.data<float>()[i]));
        bound += std::abs(row[k]) * (std::ldexp(mx, -15) + 1e-6 * std::abs(xr.data<float>()[k]));
      }
      EXPECT_LE(std::abs(y.data<float>()[n] - r.data<float>()[n]), bound) << n;
    }
  }
}

// Row-range views whose row groups straddle the FP8 128-row scale blocks (each output takes its
// own row's block scale): the GEMM's 32-row panels (140 tokens) and the tiles' row groups (6
// tokens), in every format the pair GEMM takes.
TEST_P(FastBf16ActTest, RowViewsMatchReferenceOnRoundedActivations) {
  for (int kind : {1, 2, 3, 4})
    for (int64_t T : {6, 140}) {
      SCOPED_TRACE(std::string(KindName(kind)) + " T=" + std::to_string(T));
      const int64_t N = 200, K = 270, skip = 5;
      const Weight w = AnyWeight(kind, skip + N + 3, K, 11).RowRange(skip, N);
      const Tensor x = Random({T, K}, 12);
      Tensor y = Tensor::Zeros(DType::kF32, {T, N}), r = y.Clone();
      ops_.Linear(x, w, y);
      kRef.Linear(RoundedToBf16(x), w, r);
      EXPECT_LE(RelErr(y, r), 2e-5);
    }
}

TEST_P(FastBf16ActTest, MoeExpertsRoundBothMatmulInputs) {
  const int64_t E = 6, D = 48, I = 40, k = 2;
  for (int kind : {1, 2, 4}) {
    for (int64_t T : {1, 9}) {
      SCOPED_TRACE(std::string(KindName(kind)) + " T=" + std::to_string(T));
      std::vector<ExpertWeights> ex;
      for (int64_t e = 0; e < E; ++e)
        ex.push_back({AnyWeight(kind, I, D, 100 + e), AnyWeight(kind, I, D, 200 + e),
                      AnyWeight(kind, D, I, 300 + e)});
      const Tensor x = Random({T, D}, 17);
      std::vector<int32_t> idx;
      std::vector<float> wt;
      testing_util::Top2Routing(T, E, &idx, &wt);  // k == 2
      Tensor out = Random({T, D}, 18), ref = out.Clone();
      ops_.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), out);
      // The reference, one token and expert at a time from the reference's Linear and SwiGlu.
      const Tensor xr = RoundedToBf16(x);
      for (int64_t t = 0; t < T; ++t) {
        Tensor xt = Tensor::Zeros(DType::kF32, {1, D});
        for (int64_t d = 0; d < D; ++d) xt.data<float>()[d] = xr.data<float>()[t * D + d];
        for (int64_t j = 0; j < k; ++j) {
          const ExpertWeights& e = ex[idx[t * k + j]];
          Tensor g = Tensor::Zeros(DType::kF32, {1, I}), u = g.Clone(), h = g.Clone();
          Tensor o = Tensor::Zeros(DType::kF32, {1, D});
          kRef.Linear(xt, e.gate, g);
          kRef.Linear(xt, e.up, u);
          kRef.SwiGlu(g, u, h);
          kRef.Linear(RoundedToBf16(h), e.down, o);
          for (int64_t d = 0; d < D; ++d)
            ref.data<float>()[t * D + d] += wt[t * k + j] * o.data<float>()[d];
        }
      }
      EXPECT_LE(RelErr(out, ref), 2e-5);
    }
  }
}

TEST_P(FastBf16ActTest, MlaProjectOutputMatchesReferenceOnRoundedLatent) {
  const int64_t heads = 3, nope = 24, v = 20, R = 200;
  for (int kind = 0; kind < 5; ++kind) {
    for (int64_t T : {1, 5}) {
      SCOPED_TRACE(std::string(KindName(kind)) + " T=" + std::to_string(T));
      const Weight kv_b = AnyWeight(kind, heads * (nope + v), R, 40 + kind);
      const Tensor lat = Random({T, heads * R}, 41);
      Tensor o = Tensor::Zeros(DType::kF32, {T, heads * v}), o_ref = o.Clone();
      ops_.MlaProjectOutput(lat, heads, nope, v, kv_b, o);
      kRef.MlaProjectOutput(RoundedToBf16(lat), heads, nope, v, kv_b, o_ref);
      EXPECT_LE(RelErr(o, o_ref), 2e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FastBf16ActTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                           CpuIsa::kAvx512Bf16),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace lucid
