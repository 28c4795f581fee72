// The one way kernels run in parallel: OpenMP underneath, shared by every backend kernel.
// Thread count: OMP_NUM_THREADS or SetNumThreads(); default all cores.
#pragma once

#include <cstdint>
#include <functional>

namespace lucid {

// The thread count the kernels plan their work for (OpenMP's nthreads ICV of the calling thread).
int NumThreads();
void SetNumThreads(int n);

// The most threads a ParallelFor of the calling thread runs at once (0: no limit, the default).
// It changes how many threads share the chunks, never the chunks themselves: those follow
// NumThreads(), so a kernel computes the same bits under any limit. The serving engine lowers it
// while the CPU is contended (runtime/cpu_contention.h). Per thread, like SetNumThreads.
int TeamLimit();
void SetTeamLimit(int n);

// Calls fn(begin, end) over disjoint chunks covering [0, n); chunks of at least `grain` items, no
// more than NumThreads(). The chunks run on min(chunks, TeamLimit()) threads (all of them without a
// limit); on one thread they run in order on the calling thread. Runs fn(0, n) inline when
// n <= grain or when already inside a parallel region. fn must be thread-safe.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace lucid
