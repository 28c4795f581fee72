// The device kernels' weight decoding (cuda_weight_view.cuh, compiled here for the host) against
// the host's (core/dtype.h, itself checked against ml_dtypes) for every code, and WeightAt against
// DequantizeRowSpan (backends/cpu/cpu_ops.h) on FP8 block (f32 and ue8m0 scales) and NVFP4 views:
// runs without a GPU.
#include "backends/cuda/cuda_weight_view.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/dtype.h"

namespace lucid::cuda {
namespace {

// Equal as values, NaN equal to NaN.
void ExpectSame(float got, float want, int code) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "code " << code;
  } else {
    EXPECT_EQ(got, want) << "code " << code;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << code;
  }
}

TEST(CudaWeightViewTest, EveryCodeDecodesAsTheHostDecodesIt) {
  for (int c = 0; c < 256; ++c) {
    ExpectSame(E4m3Value(static_cast<uint8_t>(c)), F8E4M3ToF32(static_cast<uint8_t>(c)), c);
    ExpectSame(Ue8m0Value(static_cast<uint8_t>(c)), Ue8m0ToF32(static_cast<uint8_t>(c)), c);
  }
  for (int c = 0; c < 16; ++c)
    ExpectSame(E2m1Value(static_cast<uint8_t>(c)), F4E2M1ToF32(static_cast<uint8_t>(c)), c);
}

// A weight of `rows` x `cols` in `format` with random codes and scales, as a Weight and as the
// DeviceWeight view of its rows [row_begin, rows) (host pointers).
struct Packed {
  Weight w;
  DeviceWeight view;
};

Packed MakePacked(WeightFormat format, bool ue8m0, int64_t rows, int64_t cols, int64_t row_begin) {
  std::mt19937 rng(static_cast<uint32_t>(rows * 131 + cols + ue8m0));
  Packed p;
  Weight& w = p.w;
  w.format = format;
  w.name = "w";
  w.rows = rows;
  w.cols = cols;
  if (format == WeightFormat::kFp8Block) {
    w.block_rows = w.block_cols = 128;
    const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
    w.data = Tensor::Empty(DType::kF8E4M3, {rows, cols});
    for (int64_t i = 0; i < w.data.numel(); ++i) w.data.data<uint8_t>()[i] = rng() & 0xFF;
    w.scale = Tensor::Empty(ue8m0 ? DType::kUE8M0 : DType::kF32, {br, bc});
    for (int64_t i = 0; i < br * bc; ++i) {
      if (ue8m0)
        w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(110 + rng() % 20);
      else
        w.scale.data<float>()[i] = 1e-3f * static_cast<float>(1 + rng() % 1000);
    }
  } else {
    w.block_rows = 1;
    w.block_cols = 16;
    const int64_t groups = (cols + 15) / 16;
    w.data = Tensor::Empty(DType::kU8, {rows, groups * 8});
    for (int64_t i = 0; i < w.data.numel(); ++i) w.data.data<uint8_t>()[i] = rng() & 0xFF;
    w.scale = Tensor::Empty(DType::kF8E4M3, {rows, groups});
    for (int64_t i = 0; i < w.scale.numel(); ++i)
      w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 0x7E);
    w.scale2 = Tensor::Empty(DType::kF32, {});
    *w.scale2.data<float>() = 3.7e-4f;
  }
  w = w.RowRange(row_begin, rows - row_begin);
  p.view = DeviceWeightOf(w);
  return p;
}

TEST(CudaWeightViewTest, WeightAtEqualsTheHostDequantization) {
  struct Case {
    WeightFormat format;
    bool ue8m0;
    int64_t rows, cols, row_begin;
  };
  for (const Case& c : {Case{WeightFormat::kFp8Block, false, 300, 259, 130},
                        Case{WeightFormat::kFp8Block, true, 200, 131, 0},
                        Case{WeightFormat::kNvfp4, false, 9, 77, 3}}) {
    const Packed p = MakePacked(c.format, c.ue8m0, c.rows, c.cols, c.row_begin);
    std::vector<float> host(static_cast<size_t>(p.w.cols));
    for (int64_t r = 0; r < p.w.rows; ++r) {
      DequantizeRowSpan(p.w, r, 0, p.w.cols, host.data());
      for (int64_t k = 0; k < p.w.cols; ++k) {
        const float got = WeightAt(p.view, r, k), want = host[k];
        if (std::isnan(want))
          ASSERT_TRUE(std::isnan(got)) << r << " " << k;
        else
          ASSERT_EQ(got, want) << WeightFormatName(c.format) << " row " << r << " col " << k;
      }
    }
  }
}

}  // namespace
}  // namespace lucid::cuda
