#include "runtime/token_constraint.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace lucid {

void TokenMatcher::FillBitmask(std::span<int32_t> words, int64_t columns) {
  std::vector<float> row(static_cast<size_t>(columns), 0.0f);
  MaskLogits(row);
  std::fill(words.begin(), words.end(), 0);
  for (int64_t j = 0; j < columns; ++j)
    if (!std::isinf(row[j])) words[j / 32] |= static_cast<int32_t>(1u << (j % 32));
}

void FillBitmasksInParallel(std::span<const BitmaskJob> jobs) {
  ParallelFor(static_cast<int64_t>(jobs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      jobs[i].matcher->FillBitmask(jobs[i].words, jobs[i].columns);
  });
}

void MaskLogitsInParallel(std::span<const MaskJob> jobs) {
  ParallelFor(static_cast<int64_t>(jobs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) jobs[i].matcher->MaskLogits(jobs[i].row);
  });
}

}  // namespace lucid
