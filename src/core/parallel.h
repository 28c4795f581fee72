// The one way kernels run in parallel: OpenMP underneath, shared by every backend kernel.
// Thread count: OMP_NUM_THREADS or SetNumThreads(); default all cores.
#pragma once

#include <cstdint>
#include <functional>

namespace lucid {

int NumThreads();
void SetNumThreads(int n);

// Calls fn(begin, end) over disjoint chunks covering [0, n); chunks of at least `grain` items.
// Runs inline when n <= grain or when already inside a parallel region. fn must be thread-safe.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace lucid
