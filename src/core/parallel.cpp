#include "core/parallel.h"

#include <omp.h>

#include <algorithm>

namespace lucid {

int NumThreads() { return omp_get_max_threads(); }
void SetNumThreads(int n) { omp_set_num_threads(std::max(1, n)); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // Chunks of at least `grain` items, no more chunks than threads; each thread of the team that
  // OpenMP actually grants walks the chunks by the team size, so none is skipped.
  const int64_t chunks = std::min<int64_t>(NumThreads(), std::max<int64_t>(1, n / grain));
  if (chunks <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const int64_t team = omp_get_num_threads();
    for (int64_t c = omp_get_thread_num(); c < chunks; c += team) {
      // Balanced split: every chunk has floor(n / chunks) >= grain items or one more.
      fn(c * n / chunks, (c + 1) * n / chunks);
    }
  }
}

}  // namespace lucid
