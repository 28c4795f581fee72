#include "runtime/token_constraint.h"

#include "core/parallel.h"

namespace lucid {

void MaskLogitsInParallel(std::span<const MaskJob> jobs) {
  ParallelFor(static_cast<int64_t>(jobs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) jobs[i].matcher->MaskLogits(jobs[i].row);
  });
}

}  // namespace lucid
