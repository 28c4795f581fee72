// A token bitmask applied to a logits row: xgrammar's bitmask has one bit per logits column
// (bit i%32 of word i/32; 1 = allowed); every forbidden column becomes -inf.
// Vectorised: a word with every token allowed is skipped, one with none is stored without reading
// the row, one with a few forbidden tokens is written bit by bit, any other is selected 32 lanes
// at a time (built for AVX-512, AVX2 and the
// baseline, chosen at load time by the CPU; all give the same bits, as the operation is exact).
// Thread-safety: pure (the caller owns `logits`).
#pragma once

#include <cstdint>
#include <span>

namespace lucid::grammar {

// Sets logits[i] = -inf for every i < min(logits.size(), 32 * bitmask.size()) whose bit is 0, and
// for every i at or past 32 * bitmask.size(). Other entries are left as they are.
void ApplyTokenBitmask(std::span<const int32_t> bitmask, std::span<float> logits);

}  // namespace lucid::grammar
