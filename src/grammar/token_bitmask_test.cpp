// ApplyTokenBitmask against the definition, bit by bit, over masks of every density and shape.
#include "grammar/token_bitmask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace lucid::grammar {
namespace {

TEST(TokenBitmask, ForbiddenColumnsBecomeMinusInfinityAndTheRestStay) {
  std::mt19937 rng(7);
  for (size_t columns :
       {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}, size_t{151936}}) {
    for (double density : {0.0, 0.02, 0.5, 0.9, 0.99, 1.0}) {
      for (int64_t extra_words : {0, 1}) {  // a bitmask longer than the row, or exactly covering
        const size_t words = (columns + 31) / 32 + static_cast<size_t>(extra_words);
        std::vector<int32_t> mask(words, 0);
        std::bernoulli_distribution allowed(density);
        for (size_t i = 0; i < words * 32; ++i)
          if (allowed(rng)) mask[i / 32] |= static_cast<int32_t>(1u << (i % 32));
        std::vector<float> row(columns);
        for (size_t i = 0; i < columns; ++i) row[i] = static_cast<float>(i) * 0.25f - 3.0f;
        const std::vector<float> before = row;
        ApplyTokenBitmask(mask, row);
        for (size_t i = 0; i < columns; ++i) {
          const bool ok = (static_cast<uint32_t>(mask[i / 32]) >> (i % 32)) & 1u;
          if (ok)
            ASSERT_EQ(row[i], before[i]) << columns << " " << density << " @" << i;
          else
            ASSERT_TRUE(std::isinf(row[i]) && row[i] < 0) << columns << " " << density << " @" << i;
        }
      }
    }
  }
}

TEST(TokenBitmask, ColumnsPastTheMaskAreForbidden) {
  std::vector<int32_t> mask = {-1};  // 32 allowed columns
  std::vector<float> row(40, 1.0f);
  ApplyTokenBitmask(mask, row);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(row[i], 1.0f);
  for (size_t i = 32; i < 40; ++i) EXPECT_TRUE(std::isinf(row[i]) && row[i] < 0) << i;
}

}  // namespace
}  // namespace lucid::grammar
