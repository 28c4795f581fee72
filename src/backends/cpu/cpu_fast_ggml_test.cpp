// The vector decoders of GGUF block types (KernelTable::dequant_ggml) against the single
// definition of their math (DequantizeGgmlBlock, core/ggml_types.h) bit for bit, at every
// instruction-set level this machine has: blocks of uniformly random bytes, with a NaN, an
// infinite and a subnormal f16 block scale planted (a NaN only has to stay a NaN), and DequantSpan
// spans that start or end inside a block (the reference path) and on block boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "backends/cpu/cpu_fast_ops.h"

namespace lucid {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::kF16,  GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                               GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Equal bits, or both NaN.
bool Same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

class FastGgmlTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuFastOps ops_{GetParam()};
};

TEST_P(FastGgmlTest, BlockDecodersAreExact) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  if (!kt.dequant_ggml) GTEST_SKIP() << "no vector decoders at " << CpuIsaName(ops_.isa());
  std::mt19937 rng(7);
  for (GgmlType t : kTypes) {
    const GgmlTypeTraits info = *GgmlTypeInfo(static_cast<uint32_t>(t));
    // F16 "blocks" are single elements: 1000 of them (a tail after the 8-wide loop).
    const int64_t blocks = t == GgmlType::kF16 ? 1001 : 64, be = info.block_elems;
    std::vector<uint8_t> bytes(blocks * info.block_bytes);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xFF);
    // And for certain: a NaN, an infinite and a subnormal d (blocks 3, 5, 7).
    const int64_t d_at = t == GgmlType::kQ6_K ? 208 : 0;
    for (auto [b, h] : {std::pair<int64_t, uint16_t>{3, 0x7E00}, {5, 0x7C00}, {7, 0x0001}})
      std::memcpy(&bytes[b * info.block_bytes + d_at], &h, 2);
    std::vector<float> want(blocks * be), got(blocks * be, -7.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      if (t == GgmlType::kF16) {
        DequantizeGgmlRowSpan(t, bytes.data(), b, 1, &want[b]);
      } else {
        DequantizeGgmlBlock(t, bytes.data() + b * info.block_bytes, &want[b * be]);
      }
    }
    ASSERT_TRUE(kt.dequant_ggml(t, bytes.data(), blocks, got.data())) << info.name;
    int64_t bad = 0, nan = 0;
    for (int64_t i = 0; i < blocks * be; ++i) {
      bad += !Same(got[i], want[i]);
      nan += std::isnan(want[i]);
    }
    EXPECT_EQ(bad, 0) << info.name << ": " << bad << " of " << blocks * be << " values differ";
    EXPECT_GT(nan, 0) << info.name << ": the planted NaN scale decodes to NaN";
  }
  EXPECT_FALSE(kt.dequant_ggml(GgmlType::kQ5_0, nullptr, 0, nullptr)) << "no Q5_0 kernel";
}

// DequantSpan on a GGUF weight equals DequantizeRowSpan on any span, aligned or not.
TEST_P(FastGgmlTest, DequantSpanEqualsTheReference) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  std::mt19937 rng(11);
  for (GgmlType t : kTypes) {
    const GgmlTypeTraits info = *GgmlTypeInfo(static_cast<uint32_t>(t));
    const int64_t cols = 3 * 256, rows = 3, rb = GgmlRowBytes(t, cols);
    Weight w;
    w.format = WeightFormat::kGgml;
    w.ggml_type = t;
    w.name = info.name;
    w.rows = rows;
    w.cols = cols;
    w.data = Tensor::Empty(DType::kU8, {rows, rb});
    for (int64_t i = 0; i < rows * rb; ++i) w.data.data<uint8_t>()[i] = rng() & 0xFF;
    const Weight v = w.RowRange(1, 2);
    for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, cols},
                          {256, 512},
                          {32, 288},
                          {5, 700},
                          {0, 1},
                          {511, 768}}) {
      std::vector<float> want(k1 - k0), got(k1 - k0 + 16);
      DequantizeRowSpan(v, 1, k0, k1 - k0, want.data());
      fast::DequantSpan(kt, v, 1, k0, k1, got.data());
      int64_t bad = 0;
      for (int64_t i = 0; i < k1 - k0; ++i) bad += !Same(got[i], want[i]);
      EXPECT_EQ(bad, 0) << info.name << " [" << k0 << ", " << k1 << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FastGgmlTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                           CpuIsa::kAvx512Bf16),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace lucid
