// Each reference op against an independent naive formulation computed in double precision
// (and, for attention, against the non-absorbed MLA formula), on random inputs with odd shapes.
#include "backends/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace lucid {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor FromVec(std::vector<float>& v, Shape shape) {
  return Tensor::Borrow(DType::kF32, std::move(shape), v.data());
}

Weight MakeWeight(std::vector<float>& v, int64_t rows, int64_t cols) {
  Weight w;
  w.format = WeightFormat::kF32;
  w.rows = rows;
  w.cols = cols;
  w.data = FromVec(v, {rows, cols});
  return w;
}

void ExpectClose(const float* got, const std::vector<double>& want, double rel) {
  double mx = 1e-30;
  for (double x : want) mx = std::max(mx, std::abs(x));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], rel * mx) << "at " << i;
}

const CpuOps kOps;

TEST(CpuOpsTest, LinearMatchesDoubleMatmulF32AndBf16) {
  const int64_t T = 5, in = 37, out = 19;
  auto x = Random(T * in, 1), wv = Random(out * in, 2);
  std::vector<uint16_t> wb(out * in);
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = F32ToBf16(wv[i]);
  for (bool bf16 : {false, true}) {
    Weight w = MakeWeight(wv, out, in);
    if (bf16) {
      w.format = WeightFormat::kBF16;
      w.data = Tensor::Borrow(DType::kBF16, {out, in}, wb.data());
    }
    std::vector<double> want(T * out);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
          want[t * out + o] +=
              double(x[t * in + i]) * (bf16 ? double(Bf16ToF32(wb[o * in + i])) : wv[o * in + i]);
    Tensor y = Tensor::Zeros(DType::kF32, {T, out});
    Tensor xt = FromVec(x, {T, in});
    kOps.Linear(xt, w, y);
    ExpectClose(y.data<float>(), want, 1e-5);
  }
}

TEST(CpuOpsTest, LinearOnRowRangeAndTransposed) {
  const int64_t T = 3, in = 11, out = 13, b = 4, n = 6;
  auto x = Random(T * in, 3), wv = Random(out * in, 4), xt_v = Random(T * n, 5);
  Weight w = MakeWeight(wv, out, in).RowRange(b, n);
  Tensor y = Tensor::Zeros(DType::kF32, {T, n});
  Tensor xt = FromVec(x, {T, in});
  kOps.Linear(xt, w, y);
  std::vector<double> want(T * n), want_t(T * in);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < n; ++o)
      for (int64_t i = 0; i < in; ++i) {
        want[t * n + o] += double(x[t * in + i]) * wv[(b + o) * in + i];
        want_t[t * in + i] += double(xt_v[t * n + o]) * wv[(b + o) * in + i];
      }
  ExpectClose(y.data<float>(), want, 1e-5);
  Tensor yt = Tensor::Zeros(DType::kF32, {T, in});
  Tensor xtt = FromVec(xt_v, {T, n});
  kOps.LinearTransposed(xtt, w, yt);
  ExpectClose(yt.data<float>(), want_t, 1e-5);
}

TEST(CpuOpsTest, NormsMatchDouble) {
  const int64_t T = 4, D = 29;
  auto x = Random(T * D, 6, 3.0f), w = Random(D, 7), bias = Random(D, 8);
  Tensor xt = FromVec(x, {T, D}), wt = FromVec(w, {D}), bt = FromVec(bias, {D});
  Tensor y = Tensor::Zeros(DType::kF32, {T, D}), z = Tensor::Zeros(DType::kF32, {T, D});
  kOps.RmsNorm(xt, wt, 1e-5f, y);
  kOps.LayerNorm(xt, wt, bt, 1e-6f, z);
  std::vector<double> want(T * D), want_ln(T * D);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0, mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x[t * D + i]) * x[t * D + i], mean += x[t * D + i];
    mean /= D;
    for (int64_t i = 0; i < D; ++i) var += (x[t * D + i] - mean) * (x[t * D + i] - mean);
    var /= D;
    for (int64_t i = 0; i < D; ++i) {
      want[t * D + i] = w[i] * x[t * D + i] / std::sqrt(ss / D + 1e-5);
      want_ln[t * D + i] = (x[t * D + i] - mean) / std::sqrt(var + 1e-6) * w[i] + bias[i];
    }
  }
  ExpectClose(y.data<float>(), want, 1e-5);
  ExpectClose(z.data<float>(), want_ln, 1e-5);
}

TEST(CpuOpsTest, RopeRotatesPairsAndDependsOnRelativePosition) {
  RopeTable table;
  const int64_t dim = 8;
  for (int64_t i = 0; i < dim / 2; ++i) table.inv_freq.push_back(std::pow(100.0f, -2.0f * i / dim));
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
    // Two heads of stride 11 with the rotary part at offset 3: other columns must not change.
    auto v = Random(2 * 11, 9);
    auto orig = v;
    Tensor t = FromVec(v, {1, 22});
    std::vector<int64_t> pos = {5};
    kOps.Rope(t, 2, 11, 3, table, pos, style);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 11; ++i)
        if (i < 3 || i >= 3 + dim) {
          EXPECT_EQ(v[h * 11 + i], orig[h * 11 + i]);
        }
    // Explicit formula for pair i.
    for (int64_t i = 0; i < dim / 2; ++i) {
      const int64_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int64_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + dim / 2;
      const double f = 5.0 * table.inv_freq[i];
      EXPECT_NEAR(v[3 + a], orig[3 + a] * std::cos(f) - orig[3 + b] * std::sin(f), 1e-5);
      EXPECT_NEAR(v[3 + b], orig[3 + b] * std::cos(f) + orig[3 + a] * std::sin(f), 1e-5);
    }
    // q(m).k(n) depends only on m - n.
    auto q = Random(dim, 10), k = Random(dim, 11);
    auto dot_at = [&](int64_t m, int64_t n) {
      auto qq = q, kk = k;
      Tensor qt = FromVec(qq, {1, dim}), kt = FromVec(kk, {1, dim});
      std::vector<int64_t> pm = {m}, pn = {n};
      kOps.Rope(qt, 1, dim, 0, table, pm, style);
      kOps.Rope(kt, 1, dim, 0, table, pn, style);
      return std::inner_product(qq.begin(), qq.end(), kk.begin(), 0.0);
    };
    EXPECT_NEAR(dot_at(7, 3), dot_at(14, 10), 1e-4);
  }
}

TEST(CpuOpsTest, SwiGluAndTopK) {
  std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.0f, 5.0f, -2.0f}, o(3);
  Tensor gt = FromVec(g, {1, 3}), ut = FromVec(u, {1, 3}), ot = FromVec(o, {1, 3});
  kOps.SwiGlu(gt, ut, ot);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(o[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-6);
  std::vector<float> s = {0.5f, 2.0f, -1.0f, 2.0f, 7.0f, 0.0f};
  std::vector<int32_t> idx(4);
  kOps.TopK(s.data(), 6, 4, idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{4, 1, 3, 0}));  // ties: lower index first
}

}  // namespace
}  // namespace lucid
