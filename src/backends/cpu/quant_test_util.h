// Test-only helpers shared by the reference and fast CPU kernel tests: random f32 tensors, the
// relative error they are judged by, and random weights of every format (f32, bf16, NVFP4, FP8
// block) that own their tensors. Deterministic in the seed.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/weight.h"

namespace lucid::testing_util {

// Uniform in [lo, hi).
inline Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::Empty(DType::kF32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// max |a - b| / max |b| over two f32 tensors of the same size.
inline double RelErr(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double e = 0, m = 1e-30;
  for (int64_t i = 0; i < a.numel(); ++i) {
    e = std::max(e, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    m = std::max(m, double(std::abs(b.data<float>()[i])));
  }
  return e / m;
}

// x with every value rounded to the nearest bf16 (ties to even; NaN and Inf kept).
inline Tensor RoundedToBf16(const Tensor& x) {
  Tensor r = x.Clone();
  for (int64_t i = 0; i < r.numel(); ++i)
    r.data<float>()[i] = Bf16ToF32(F32ToBf16(r.data<float>()[i]));
  return r;
}

// A fixed top-2 routing of T tokens over E experts for the MoE tests: token t takes experts
// 3t and 3t + 2 (mod E) with weights 0.7 and 0.4.
inline void Top2Routing(int64_t T, int64_t E, std::vector<int32_t>* idx, std::vector<float>* wt) {
  idx->assign(T * 2, 0);
  wt->assign(T * 2, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    (*idx)[t * 2] = static_cast<int32_t>((t * 3) % E);
    (*idx)[t * 2 + 1] = static_cast<int32_t>((t * 3 + 2) % E);
    (*wt)[t * 2] = 0.7f;
    (*wt)[t * 2 + 1] = 0.4f;
  }
}

// A [rows, cols] f32 or bf16 weight of Random values (bf16: rounded to nearest even).
inline Weight RandomDense(bool bf16, int64_t rows, int64_t cols, uint32_t seed,
                          const char* name = "w") {
  Tensor src = Random({rows, cols}, seed);
  Weight w;
  w.format = bf16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  w.name = name;
  w.rows = rows;
  w.cols = cols;
  if (!bf16) {
    w.data = src;
  } else {
    w.data = Tensor::Empty(DType::kBF16, {rows, cols});
    for (int64_t i = 0; i < src.numel(); ++i)
      w.data.data<uint16_t>()[i] = F32ToBf16(src.data<float>()[i]);
  }
  return w;
}

inline Weight RandomNvfp4(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t groups = (cols + 15) / 16;
  Weight w;
  w.format = WeightFormat::kNvfp4;
  w.name = "nvfp4";
  w.rows = rows;
  w.cols = cols;
  w.block_rows = 1;
  w.block_cols = 16;
  w.data = Tensor::Empty(DType::kU8, {rows, groups * 8});
  w.scale = Tensor::Empty(DType::kF8E4M3, {rows, groups});
  w.scale2 = Tensor::Empty(DType::kF32, {});
  for (int64_t i = 0; i < w.data.numel(); ++i) w.data.data<uint8_t>()[i] = rng() & 0xFF;
  std::uniform_real_distribution<float> s(0.01f, 448.0f);
  for (int64_t i = 0; i < w.scale.numel(); ++i)
    w.scale.data<uint8_t>()[i] = F32ToF8E4M3Saturate(s(rng));
  *w.scale2.data<float>() = 1.2345e-4f;
  return w;
}

// nan_codes: keep the e4m3 NaN codes 0x7F/0xFF that the random bytes hit (else they are nudged).
inline Weight RandomFp8(int64_t rows, int64_t cols, uint32_t seed, bool ue8m0,
                        bool nan_codes = false) {
  std::mt19937 rng(seed);
  const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  Weight w;
  w.format = WeightFormat::kFp8Block;
  w.name = "fp8";
  w.rows = rows;
  w.cols = cols;
  w.block_rows = 128;
  w.block_cols = 128;
  w.data = Tensor::Empty(DType::kF8E4M3, {rows, cols});
  for (int64_t i = 0; i < w.data.numel(); ++i) {
    uint8_t b = rng() & 0xFF;
    if (!nan_codes && (b & 0x7F) == 0x7F) b &= 0xFE;
    w.data.data<uint8_t>()[i] = b;
  }
  w.scale = Tensor::Empty(ue8m0 ? DType::kUE8M0 : DType::kF32, {br, bc});
  std::uniform_real_distribution<float> s(1e-4f, 1e-2f);
  for (int64_t i = 0; i < br * bc; ++i) {
    if (ue8m0) {
      w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(127 - 14 + (rng() % 8));
    } else {
      w.scale.data<float>()[i] = s(rng);
    }
  }
  return w;
}

// [v.size() / k, k] views of a test's routing vectors (MoeRoute's outputs, MoeExperts' inputs);
// the vector must outlive the view.
inline Tensor IdxRows(const std::vector<int32_t>& v, int64_t k) {
  return Tensor::Borrow(DType::kI32, {static_cast<int64_t>(v.size()) / k, k},
                        const_cast<int32_t*>(v.data()));
}
inline Tensor WtRows(const std::vector<float>& v, int64_t k) {
  return Tensor::Borrow(DType::kF32, {static_cast<int64_t>(v.size()) / k, k},
                        const_cast<float*>(v.data()));
}

}  // namespace lucid::testing_util
