// Packed-weight formats (NVFP4, FP8 block) and their reference matmul: the format math against an
// element-wise formula built from core/dtype.h, and each quantized matmul against
// dequantize-the-whole-matrix-then-f32-matmul on random data, for odd shapes (partial blocks at
// the row and column ends, a single row, many rows), row-range views, LinearTransposed and MoE
// experts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

const CpuOps kOps;

using testing_util::RandomFp8;
using testing_util::RandomNvfp4;

// Element (o, i) of the full matrix, straight from the format definition.
float Element(const Weight& w, int64_t o, int64_t i) {
  if (w.format == WeightFormat::kNvfp4) {
    const uint8_t byte = w.data.data<uint8_t>()[o * w.data.size(1) + i / 2];
    const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    const float s = F8E4M3ToF32(w.scale.data<uint8_t>()[o * w.scale.size(1) + i / 16]);
    return (F4E2M1ToF32(code) * s) * *w.scale2.data<float>();
  }
  const int64_t si = (o / 128) * w.scale.size(1) + i / 128;
  const float s = w.scale.dtype() == DType::kUE8M0 ? Ue8m0ToF32(w.scale.data<uint8_t>()[si])
                                                   : w.scale.data<float>()[si];
  return F8E4M3ToF32(w.data.data<uint8_t>()[o * w.cols + i]) * s;
}

std::vector<float> Dequantized(const Weight& w) {
  std::vector<float> m(w.rows * w.cols);
  for (int64_t o = 0; o < w.rows; ++o) DequantizeRow(w, o, m.data() + o * w.cols);
  return m;
}

Tensor RandomActivations(int64_t T, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Tensor x = Tensor::Zeros(DType::kF32, {T, n});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  return x;
}

// y = x · dense^T with the same f32 column-order accumulation.
std::vector<float> DenseMatmul(const Tensor& x, const std::vector<float>& m, int64_t rows,
                               int64_t cols) {
  const int64_t T = x.size(0);
  std::vector<float> y(T * rows);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < rows; ++o) {
      float s = 0.0f;
      for (int64_t i = 0; i < cols; ++i) s += x.data<float>()[t * cols + i] * m[o * cols + i];
      y[t * rows + o] = s;
    }
  return y;
}

struct Shape2 {
  int64_t rows, cols;
};
const Shape2 kShapes[] = {{1, 16}, {1, 200}, {7, 48}, {300, 200}, {129, 257}, {256, 128}, {5, 10}};

Weight Make(int kind, int64_t rows, int64_t cols, uint32_t seed) {
  if (kind == 0) return RandomNvfp4(rows, cols, seed);
  return RandomFp8(rows, cols, seed, kind == 2);
}

class QuantMatmulTest : public ::testing::TestWithParam<int> {};  // 0 nvfp4, 1 fp8 f32, 2 fp8 ue8m0

TEST_P(QuantMatmulTest, DequantizeRowMatchesElementFormula) {
  for (const Shape2& s : kShapes) {
    Weight w = Make(GetParam(), s.rows, s.cols, 11);
    std::vector<float> m = Dequantized(w);
    for (int64_t o = 0; o < w.rows; ++o)
      for (int64_t i = 0; i < w.cols; ++i)
        ASSERT_EQ(m[o * w.cols + i], Element(w, o, i))
            << s.rows << "x" << s.cols << " at " << o << "," << i;
    // Spans starting and ending inside blocks agree with the full row.
    std::vector<float> span(w.cols);
    const int64_t r = w.rows - 1, c0 = w.cols / 3, n = w.cols - c0 - w.cols / 5;
    DequantizeRowSpan(w, r, c0, n, span.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(span[i], m[r * w.cols + c0 + i]);
  }
}

TEST_P(QuantMatmulTest, LinearEqualsDequantizeThenMatmul) {
  for (const Shape2& s : kShapes) {
    for (int64_t T : {1, 3, 33}) {  // decode and prefill
      Weight w = Make(GetParam(), s.rows, s.cols, 21 + static_cast<uint32_t>(T));
      Tensor x = RandomActivations(T, s.cols, 5);
      Tensor y = Tensor::Zeros(DType::kF32, {T, s.rows});
      kOps.Linear(x, w, y);
      std::vector<float> want = DenseMatmul(x, Dequantized(w), s.rows, s.cols);
      for (int64_t i = 0; i < T * s.rows; ++i)
        ASSERT_EQ(y.data<float>()[i], want[i])
            << s.rows << "x" << s.cols << " T=" << T << " at " << i;
    }
  }
}

TEST_P(QuantMatmulTest, RowRangeViewsFindTheirBlockScales) {
  Weight w = Make(GetParam(), 300, 200, 31);
  std::vector<float> m = Dequantized(w);
  for (auto [b, n] : {std::pair<int64_t, int64_t>{0, 1}, {100, 60}, {127, 2}, {250, 50}}) {
    Weight v = w.RowRange(b, n);
    Tensor x = RandomActivations(2, w.cols, 7);
    Tensor y = Tensor::Zeros(DType::kF32, {2, n});
    kOps.Linear(x, v, y);
    std::vector<float> sub(m.begin() + b * w.cols, m.begin() + (b + n) * w.cols);
    std::vector<float> want = DenseMatmul(x, sub, n, w.cols);
    for (int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(y.data<float>()[i], want[i]);
    // LinearTransposed through the same view: y[t, :] = x[t, :n] · W_view.
    Tensor xt = RandomActivations(3, n, 8);
    Tensor yt = Tensor::Zeros(DType::kF32, {3, w.cols});
    kOps.LinearTransposed(xt, v, yt);
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t i = 0; i < w.cols; ++i) {
        float acc = 0.0f;
        for (int64_t r = 0; r < n; ++r) acc += xt.data<float>()[t * n + r] * sub[r * w.cols + i];
        ASSERT_EQ(yt.data<float>()[t * w.cols + i], acc);
      }
  }
}

TEST_P(QuantMatmulTest, MoeExpertsWithPackedWeightsEqualDequantizedExperts) {
  const int64_t D = 48, I = 32, E = 4, T = 6, K = 2;
  std::vector<ExpertWeights> packed, dense;
  std::vector<std::vector<float>> store;
  store.reserve(3 * E);
  auto dense_of = [&](const Weight& w) {
    store.push_back(Dequantized(w));
    Weight d;
    d.format = WeightFormat::kF32;
    d.rows = w.rows;
    d.cols = w.cols;
    d.data = Tensor::Borrow(DType::kF32, {w.rows, w.cols}, store.back().data());
    return d;
  };
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights p{Make(GetParam(), I, D, 100 + e), Make(GetParam(), I, D, 200 + e),
                    Make(GetParam(), D, I, 300 + e)};
    packed.push_back(p);
    dense.push_back({dense_of(p.gate), dense_of(p.up), dense_of(p.down)});
  }
  Tensor x = RandomActivations(T, D, 9);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 1e-3f;  // keep silu finite-ish
  std::vector<int32_t> idx = {0, 1, 2, 3, 1, 3, 0, 2, 3, 0, 2, 1};
  std::vector<float> wt(T * K, 0.5f);
  Tensor a = Tensor::Zeros(DType::kF32, {T, D}), b = Tensor::Zeros(DType::kF32, {T, D});
  kOps.MoeExperts(x, packed, testing_util::IdxRows(idx, K), testing_util::WtRows(wt, K), a);
  kOps.MoeExperts(x, dense, testing_util::IdxRows(idx, K), testing_util::WtRows(wt, K), b);
  for (int64_t i = 0; i < T * D; ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmulTest, ::testing::Values(0, 1, 2),
                         [](const auto& info) {
                           return std::string(info.param == 0   ? "nvfp4"
                                              : info.param == 1 ? "fp8_f32_scales"
                                                                : "fp8_ue8m0_scales");
                         });

}  // namespace
}  // namespace lucid
