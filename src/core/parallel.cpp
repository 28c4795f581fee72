#include "core/parallel.h"

#include <omp.h>

#include <algorithm>

namespace lucid {
namespace {

thread_local int t_team_limit = 0;

}  // namespace

int NumThreads() { return omp_get_max_threads(); }
void SetNumThreads(int n) { omp_set_num_threads(std::max(1, n)); }

int TeamLimit() { return t_team_limit; }
void SetTeamLimit(int n) { t_team_limit = std::max(0, n); }

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
  // Balanced split: every chunk has floor(n / chunks) >= grain items or one more.
  const auto run = [&](int64_t c) { fn(c * n / chunks, (c + 1) * n / chunks); };
  const int64_t team = t_team_limit > 0 ? std::min<int64_t>(chunks, t_team_limit) : chunks;
  if (team <= 1) {  // the same chunks, in order, without waking the OpenMP workers
    for (int64_t c = 0; c < chunks; ++c) run(c);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(team))
  {
    const int64_t granted = omp_get_num_threads();
    for (int64_t c = omp_get_thread_num(); c < chunks; c += granted) run(c);
  }
}

}  // namespace lucid
