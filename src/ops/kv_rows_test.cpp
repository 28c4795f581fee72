// EncodeKvRow's FP8 rows (ops/ops.h): codes and scales against the OCP e4m3 table's values, and
// the NaN code's sign fixed by the value rather than by what the hardware makes of inf / inf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/ops.h"

namespace lucid {
namespace {

// One row of 4 FP8 values (one block of 4) and a bf16 tail of 2.
PagedRows Fp8Format() {
  PagedRows f;
  f.kind = KvRowKind::kFp8;
  f.row_floats = 6;
  f.fp8_values = 4;
  f.fp8_block = 4;
  f.row_bytes = KvRowBytes(f);
  return f;
}

float ScaleOf(const std::vector<uint8_t>& row) {
  float s;
  std::memcpy(&s, row.data() + 4, 4);
  return s;
}

TEST(KvRowsTest, Fp8CodesAreTheValuesOverTheBlockScale) {
  const PagedRows f = Fp8Format();
  ASSERT_EQ(f.row_bytes, 4 + 4 + 2 * 2);
  std::vector<uint8_t> row(f.row_bytes);
  const float in[6] = {448.0f, 224.0f, -1.0f, 0.0f, 1.0f, -2.0f};
  EncodeKvRow(f, in, row.data());
  EXPECT_EQ(ScaleOf(row), 1.0f);  // amax 448 / 448
  // e4m3: 448 = 1.75 x 2^8 (0x7E), 224 = 1.75 x 2^7 (0x76), -1 = 2^0 with the sign (0xB8).
  EXPECT_EQ(row[0], 0x7E);
  EXPECT_EQ(row[1], 0x76);
  EXPECT_EQ(row[2], 0xB8);
  EXPECT_EQ(row[3], 0x00);
  EXPECT_EQ(row[8] | (row[9] << 8), 0x3F80);    // bf16 1.0
  EXPECT_EQ(row[10] | (row[11] << 8), 0xC000);  // bf16 -2.0
}

TEST(KvRowsTest, ANanQuotientTakesTheValuesSign) {
  const PagedRows f = Fp8Format();
  std::vector<uint8_t> row(f.row_bytes);
  const float inf = std::numeric_limits<float>::infinity();
  const float in[6] = {inf, -inf, 3.0f, -std::numeric_limits<float>::quiet_NaN(), 0.0f, 0.0f};
  EncodeKvRow(f, in, row.data());
  EXPECT_TRUE(std::isinf(ScaleOf(row)));  // amax inf: every finite value / inf is 0
  EXPECT_EQ(row[0], 0x7F);                // inf / inf
  EXPECT_EQ(row[1], 0xFF);                // -inf / inf
  EXPECT_EQ(row[2], 0x00);
  EXPECT_EQ(row[3], 0xFF);  // a negative NaN stays negative
}

}  // namespace
}  // namespace lucid
