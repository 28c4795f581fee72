#include "grammar/token_bitmask.h"

#include <algorithm>
#include <limits>

namespace lucid::grammar {
// target_clones makes an ifunc, whose resolver the dynamic loader runs before a sanitizer's
// runtime is initialised, and an instrumented resolver crashes there (ThreadSanitizer: SIGSEGV in
// libtsan before main, found by scripts/sanitize.sh tsan). Sanitizer builds take the default only.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define LUCID_BITMASK_CLONES
#else
#define LUCID_BITMASK_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Whole words: `words` covers logits[0, 32 * n).
LUCID_BITMASK_CLONES void ApplyWords(const int32_t* words, size_t n, float* logits) {
  for (size_t w = 0; w < n; ++w) {
    const uint32_t bits = static_cast<uint32_t>(words[w]);
    if (bits == 0xffffffffu) continue;
    float* p = logits + w * 32;
    if (bits == 0) {  // stores only: the row is not read
      for (int j = 0; j < 32; ++j) p[j] = kNegInf;
      continue;
    }
    const uint32_t rejected = ~bits;
    if (__builtin_popcount(rejected) <= 4) {
      for (uint32_t r = rejected; r != 0; r &= r - 1) p[__builtin_ctz(r)] = kNegInf;
      continue;
    }
    for (int j = 0; j < 32; ++j) p[j] = (bits >> j) & 1u ? p[j] : kNegInf;
  }
}

}  // namespace

void ApplyTokenBitmask(std::span<const int32_t> bitmask, std::span<float> logits) {
  const size_t covered = std::min(logits.size(), bitmask.size() * 32);
  const size_t whole = covered / 32;
  ApplyWords(bitmask.data(), whole, logits.data());
  for (size_t i = whole * 32; i < covered; ++i)
    if (!((static_cast<uint32_t>(bitmask[i / 32]) >> (i % 32)) & 1u)) logits[i] = kNegInf;
  std::fill(logits.begin() + static_cast<std::ptrdiff_t>(covered), logits.end(), kNegInf);
}

}  // namespace lucid::grammar
