#include "core/parallel.h"

#include <omp.h>

#include <algorithm>

namespace lucid {

int NumThreads() { return omp_get_max_threads(); }
void SetNumThreads(int n) { omp_set_num_threads(std::max(1, n)); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(NumThreads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int64_t per = (n + threads - 1) / threads;
    const int64_t b = std::min<int64_t>(n, t * per), e = std::min<int64_t>(n, b + per);
    if (b < e) fn(b, e);
  }
}

}  // namespace lucid
