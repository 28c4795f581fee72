#include "core/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace lucid {
namespace {

// Restores the thread count a test changed.
class ParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = NumThreads(); }
  void TearDown() override {
    SetNumThreads(saved_);
    SetTeamLimit(0);
  }

 private:
  int saved_ = 1;
};

struct Chunk {
  int64_t begin, end;
  std::thread::id thread;
};

std::vector<Chunk> RecordChunks(int64_t n, int64_t grain) {
  std::mutex mu;
  std::vector<Chunk> chunks;
  ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.push_back({b, e, std::this_thread::get_id()});
  });
  std::sort(chunks.begin(), chunks.end(),
            [](const Chunk& a, const Chunk& b) { return a.begin < b.begin; });
  return chunks;
}

// Chunks are non-empty, disjoint and tile [0, n) exactly.
void ExpectTiles(const std::vector<Chunk>& chunks, int64_t n) {
  int64_t next = 0;
  for (const Chunk& c : chunks) {
    EXPECT_LT(c.begin, c.end) << "empty chunk";
    EXPECT_EQ(c.begin, next) << "gap or overlap at " << next;
    next = c.end;
  }
  EXPECT_EQ(next, n);
}

TEST_F(ParallelTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    SetNumThreads(threads);
    for (int64_t n : {1, 2, 3, 7, 8, 9, 100, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16, 1000}) {
        std::vector<std::atomic<int>> hits(n);
        ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1)
              << "index " << i << " n=" << n << " grain=" << grain << " threads=" << threads;
        }
        ExpectTiles(RecordChunks(n, grain), n);
      }
    }
  }
}

TEST_F(ParallelTest, NoMoreChunksThanGrainAllows) {
  SetNumThreads(8);
  for (int64_t n : {10, 50, 51, 1000}) {
    for (int64_t grain : {1, 10, 100}) {
      const auto chunks = RecordChunks(n, grain);
      const int64_t max_chunks = (n + grain - 1) / grain;
      EXPECT_LE(static_cast<int64_t>(chunks.size()), std::min<int64_t>(8, max_chunks))
          << "n=" << n << " grain=" << grain;
    }
  }
}

// Regression: the header promises chunks of at least `grain` items (n=51, grain=10 with 8 threads
// was once split into six chunks of 9).
TEST_F(ParallelTest, ChunksHoldAtLeastGrainItems) {
  SetNumThreads(8);
  const auto chunks = RecordChunks(51, 10);
  ExpectTiles(chunks, 51);
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_GE(chunks[i].end - chunks[i].begin, 10) << "chunk " << i;
  }
}

// Regression: chunks were once sized for the number of threads *requested*; when the runtime
// granted fewer (OMP_DYNAMIC, OMP_THREAD_LIMIT), the chunks of the missing threads never ran. With
// dynamic adjustment and 256 requested threads (more than the machine has cores) libgomp grants at
// most one per core, so this reproduces reliably.
TEST_F(ParallelTest, CoversRangeWhenRuntimeGrantsFewerThreads) {
  const int saved_dynamic = omp_get_dynamic();
  omp_set_dynamic(1);
  SetNumThreads(256);
  std::vector<std::atomic<int>> hits(1000);
  ParallelFor(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  omp_set_dynamic(saved_dynamic);
  int64_t missed = 0;
  for (auto& h : hits) missed += h.load() != 1;
  EXPECT_EQ(missed, 0);
}

TEST_F(ParallelTest, SplitsAcrossThreadsWhenWorthIt) {
  SetNumThreads(2);
  const auto chunks = RecordChunks(1000, 1);
  ASSERT_EQ(chunks.size(), 2u);
  ExpectTiles(chunks, 1000);
  EXPECT_NE(chunks[0].thread, chunks[1].thread);
}

TEST_F(ParallelTest, RunsInlineWhenNAtMostGrain) {
  SetNumThreads(4);
  for (int64_t n : {1, 5, 64}) {
    const auto chunks = RecordChunks(n, 64);
    ASSERT_EQ(chunks.size(), 1u) << n;
    EXPECT_EQ(chunks[0].begin, 0);
    EXPECT_EQ(chunks[0].end, n);
    EXPECT_EQ(chunks[0].thread, std::this_thread::get_id());
  }
}

TEST_F(ParallelTest, RunsInlineWithOneThread) {
  SetNumThreads(1);
  const auto chunks = RecordChunks(100000, 1);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].end, 100000);
  EXPECT_EQ(chunks[0].thread, std::this_thread::get_id());
}

TEST_F(ParallelTest, NestedCallsRunInline) {
  SetNumThreads(2);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> inner_calls;
  std::atomic<int> outer_calls{0};
  std::atomic<int> inner_on_other_thread{0};
  ParallelFor(100, 1, [&](int64_t, int64_t) {
    outer_calls.fetch_add(1);
    const auto me = std::this_thread::get_id();
    ParallelFor(1000, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() != me) inner_on_other_thread.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      inner_calls.emplace_back(b, e);
    });
  });
  ASSERT_EQ(outer_calls.load(), 2);
  ASSERT_EQ(inner_calls.size(), 2u);  // one inline call per outer chunk
  for (const auto& [b, e] : inner_calls) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
  }
  EXPECT_EQ(inner_on_other_thread.load(), 0);
}

// The team limit (what the serving engine lowers on a contended CPU) changes which threads run
// the chunks, never the chunks: a kernel's bits do not depend on it.
TEST_F(ParallelTest, TeamLimitKeepsTheChunksAndRunsThemOnFewerThreads) {
  SetNumThreads(4);
  const auto free_chunks = RecordChunks(1000, 1);
  ASSERT_EQ(free_chunks.size(), 4u);
  for (int limit : {1, 2, 3}) {
    SetTeamLimit(limit);
    EXPECT_EQ(TeamLimit(), limit);
    const auto chunks = RecordChunks(1000, 1);
    ASSERT_EQ(chunks.size(), free_chunks.size()) << "limit " << limit;
    std::set<std::thread::id> threads;
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].begin, free_chunks[i].begin) << "limit " << limit << " chunk " << i;
      EXPECT_EQ(chunks[i].end, free_chunks[i].end) << "limit " << limit << " chunk " << i;
      threads.insert(chunks[i].thread);
    }
    EXPECT_LE(static_cast<int>(threads.size()), limit) << "limit " << limit;
    if (limit == 1) {
      EXPECT_EQ(*threads.begin(), std::this_thread::get_id());
    }
  }
  SetTeamLimit(0);
  std::set<std::thread::id> threads;
  for (const Chunk& c : RecordChunks(1000, 1)) threads.insert(c.thread);
  EXPECT_GT(threads.size(), 1u) << "no limit: the chunks are shared by the team";
}

// With a limit of one the chunks run in order on the calling thread, one call each.
TEST_F(ParallelTest, TeamLimitOfOneRunsTheChunksInOrder) {
  SetNumThreads(3);
  SetTeamLimit(1);
  std::vector<std::pair<int64_t, int64_t>> calls;  // no lock: one thread
  ParallelFor(10, 1, [&](int64_t b, int64_t e) { calls.emplace_back(b, e); });
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 3}, {3, 6}, {6, 10}};
  EXPECT_EQ(calls, want);
  SetTeamLimit(-3);  // clamped to 0: no limit
  EXPECT_EQ(TeamLimit(), 0);
}

// The limit is the calling thread's, like the thread count.
TEST_F(ParallelTest, TeamLimitIsPerThread) {
  SetTeamLimit(1);
  int other = -1;
  std::thread([&] { other = TeamLimit(); }).join();
  EXPECT_EQ(other, 0);
  EXPECT_EQ(TeamLimit(), 1);
}

TEST_F(ParallelTest, EmptyOrNegativeRangeCallsNothing) {
  int calls = 0;
  ParallelFor(0, 1, [&](int64_t, int64_t) { ++calls; });
  ParallelFor(-5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST_F(ParallelTest, NonPositiveGrainIsTreatedAsOne) {
  SetNumThreads(3);
  for (int64_t grain : {0, -4}) {
    std::vector<std::atomic<int>> hits(10);
    ParallelFor(10, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int i = 0; i < 10; ++i) EXPECT_EQ(hits[i].load(), 1);
  }
}

TEST_F(ParallelTest, SetNumThreads) {
  SetNumThreads(3);
  EXPECT_EQ(NumThreads(), 3);
  SetNumThreads(0);  // clamped to at least one
  EXPECT_EQ(NumThreads(), 1);
  SetNumThreads(-2);
  EXPECT_EQ(NumThreads(), 1);
}

}  // namespace
}  // namespace lucid
