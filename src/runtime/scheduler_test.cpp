// Scheduler policies without a model: a fake step advances each chunk's KV, commits it, and
// "samples" a token when the chunk reaches the last known token.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

namespace lucid {
namespace {

std::vector<int32_t> Prompt(int32_t n, int32_t from = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// What the engine does after a step: Commit advances the KV and commits pages, completed
// chunks get a new token (its value is a function of the position, so recompute is consistent).
// Returns ids that produced a token.
std::vector<uint64_t> FakeStep(Scheduler& s, const StepPlan& plan, int64_t page_size) {
  std::vector<uint64_t> produced;
  for (const auto& c : plan.chunks) {
    EXPECT_EQ(c.begin, c.seq->kv.length);
    EXPECT_GE(static_cast<int64_t>(c.seq->kv.page_table.size()) * page_size, c.begin + c.count)
        << "pages must be allocated before the forward";
    s.Commit(c);
    EXPECT_EQ(c.seq->kv.length, c.begin + c.count);
    if (c.completes()) {
      s.Append(c.seq->id, static_cast<int32_t>(1000 + c.seq->tokens.size()));
      produced.push_back(c.seq->id);
    }
  }
  return produced;
}

std::map<uint64_t, int64_t> ChunkSizes(const StepPlan& plan) {
  std::map<uint64_t, int64_t> m;
  for (const auto& c : plan.chunks) m[c.seq->id] = c.count;
  return m;
}

TEST(SchedulerTest, ChunkedPrefillWithinTheTokenBudget) {
  KvBlockManager bm(64, 4, true);
  Scheduler s({8, 10}, bm);
  s.Add(1, Prompt(25));
  auto p1 = s.Schedule();
  EXPECT_EQ(ChunkSizes(p1), (std::map<uint64_t, int64_t>{{1, 10}}));
  EXPECT_FALSE(p1.chunks[0].completes());
  FakeStep(s, p1, 4);
  auto p2 = s.Schedule();
  EXPECT_EQ(ChunkSizes(p2), (std::map<uint64_t, int64_t>{{1, 10}}));
  FakeStep(s, p2, 4);
  auto p3 = s.Schedule();
  EXPECT_EQ(ChunkSizes(p3), (std::map<uint64_t, int64_t>{{1, 5}}));
  EXPECT_TRUE(p3.chunks[0].completes());
  EXPECT_EQ(FakeStep(s, p3, 4), std::vector<uint64_t>{1});
  auto p4 = s.Schedule();  // decode
  EXPECT_EQ(ChunkSizes(p4), (std::map<uint64_t, int64_t>{{1, 1}}));
}

TEST(SchedulerTest, DecodesGoFirstThenPrefillsThenAdmissionFifo) {
  KvBlockManager bm(64, 4, true);
  Scheduler s({8, 12}, bm);
  s.Add(1, Prompt(3));
  FakeStep(s, s.Schedule(), 4);  // 1 is now decoding
  s.Add(2, Prompt(30, 100));
  s.Add(3, Prompt(2, 200));
  auto p = s.Schedule();
  // 1 decodes (1 token), 2 takes the remaining 11, 3 waits: budget exhausted.
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{1, 1}, {2, 11}}));
  EXPECT_EQ(p.chunks[0].seq->id, 1u);
  FakeStep(s, p, 4);
  p = s.Schedule();
  // Next: 1 decodes, running prefill 2 continues (11 more) before admitting 3.
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{1, 1}, {2, 11}}));
  EXPECT_EQ(s.waiting(), 1);
}

TEST(SchedulerTest, MaxRunningRequestsLimitsAdmission) {
  KvBlockManager bm(64, 4, true);
  Scheduler s({2, 100}, bm);
  for (uint64_t id = 1; id <= 4; ++id) s.Add(id, Prompt(3, 10 * id));
  auto p = s.Schedule();
  EXPECT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 2);
  FakeStep(s, p, 4);
  ASSERT_TRUE(s.Finish(1));
  p = s.Schedule();
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{2, 1}, {3, 3}}));
}

TEST(SchedulerTest, AdmissionIsFifoEvenWhenALaterRequestWouldFit) {
  KvBlockManager bm(4, 4, true);  // 16 tokens
  Scheduler s({8, 100}, bm);
  s.Add(1, Prompt(8));
  FakeStep(s, s.Schedule(), 4);  // 1 holds 2 pages (+1 soon)
  s.Add(2, Prompt(12, 50));      // needs 3 pages: does not fit now
  s.Add(3, Prompt(2, 90));       // would fit, but must not overtake 2
  auto p = s.Schedule();
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{1, 1}}));
  EXPECT_EQ(s.waiting(), 2);
}

TEST(SchedulerTest, PreemptsTheNewestAndRequeuesItInArrivalOrder) {
  KvBlockManager bm(4, 4, false);
  Scheduler s({8, 100}, bm);
  s.Add(1, Prompt(4));
  s.Add(2, Prompt(4, 10));
  s.Add(3, Prompt(4, 20));
  auto p = s.Schedule();
  EXPECT_EQ(p.chunks.size(), 3u);  // 3 pages used
  FakeStep(s, p, 4);
  // Each now needs a 2nd page; only one is free: 1 gets it, 2 can take none -> 3 is preempted and
  // its page goes to 2.
  p = s.Schedule();
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{3});
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{1, 1}, {2, 1}}));
  EXPECT_EQ(s.Find(3)->kv.length, 0);
  EXPECT_EQ(s.Find(3)->tokens.size(), 5u);  // keeps its generated token: recomputed later
  EXPECT_EQ(s.total_preemptions(), 1);
  EXPECT_EQ(bm.used_pages(), 4);
}

TEST(SchedulerTest, TheNewestPreemptsItselfWhenItIsShort) {
  KvBlockManager bm(3, 4, false);
  Scheduler s({8, 100}, bm);
  s.Add(1, Prompt(3));  // 1 page; its next token still fits that page
  s.Add(2, Prompt(8));  // 2 pages; its next token needs a third
  FakeStep(s, s.Schedule(), 4);
  auto p = s.Schedule();
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{2});
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{1, 1}}));
  EXPECT_EQ(bm.used_pages(), 1);
}

TEST(SchedulerTest, PrefixHitsSkipPrefillButNeverTheLastToken) {
  KvBlockManager bm(16, 4, true);
  Scheduler s({8, 100}, bm);
  s.Add(1, Prompt(12));
  FakeStep(s, s.Schedule(), 4);
  ASSERT_TRUE(s.Finish(1));
  EXPECT_EQ(bm.cached_pages(), 3);
  s.Add(2, Prompt(12));  // identical prompt: 8 tokens reused, the last page recomputed
  auto p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].begin, 8);
  EXPECT_EQ(p.chunks[0].count, 4);
  EXPECT_EQ(s.Find(2)->cached_tokens, 8);
  s.Add(3, Prompt(14));  // shares 12 tokens: 3 pages reused
  p = s.Schedule();
  EXPECT_EQ(s.Find(3)->cached_tokens, 12);
  EXPECT_EQ(s.prefix_hit_tokens(), 20);
}

TEST(SchedulerTest, FinishReleasesPagesOfRunningAndWaitingSequences) {
  KvBlockManager bm(8, 4, false);
  Scheduler s({1, 100}, bm);
  s.Add(1, Prompt(9));
  s.Add(2, Prompt(9));
  FakeStep(s, s.Schedule(), 4);
  EXPECT_EQ(bm.used_pages(), 3);
  EXPECT_TRUE(s.Finish(2));  // waiting
  EXPECT_TRUE(s.Finish(1));  // running
  EXPECT_FALSE(s.Finish(1));
  EXPECT_EQ(bm.used_pages(), 0);
  EXPECT_TRUE(s.empty());
}

// Random workloads on tiny pools: everything finishes, no step is empty while work remains, and
// no page leaks.
// Data-parallel attention's partitioned pool: each admitted sequence goes to the partition with
// the most room, and a sequence short of pages preempts the newest of its own partition, not a
// newer one of another partition (whose pages it could not use).
TEST(SchedulerTest, PartitionsAdmitToTheEmptiestAndPreemptWithinThePartition) {
  KvBlockManager bm(8, 4, false, 2);
  Scheduler s({8, 100}, bm);
  s.Add(1, Prompt(8));      // a tie: partition 0, 2 pages
  s.Add(2, Prompt(2, 10));  // partition 1 (4 free against 2), 1 page
  s.Add(3, Prompt(4, 20));  // partition 1 (3 against 2), 1 page
  s.Add(4, Prompt(4, 30));  // a tie, 2 and 2: partition 0, 1 page
  s.Add(5, Prompt(2, 40));  // partition 1 (2 against 1), 1 page
  auto p = s.Schedule();
  EXPECT_EQ(p.chunks.size(), 5u);
  const std::vector<int32_t> want = {0, 1, 1, 0, 1};
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_EQ(s.Find(id)->kv.partition, want[id - 1]) << id;
  FakeStep(s, p, 4);
  // 1, 3 and 4 need a page each; partition 0 has one and partition 1 one. 1 and 3 get them; 4
  // preempts the newest of partition 0, itself, not 5 (the newest overall, whose pages it could
  // not use), and 5, after it, still decodes (its next token fits its page).
  p = s.Schedule();
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{4});
  EXPECT_EQ(ChunkSizes(p), (std::map<uint64_t, int64_t>{{1, 1}, {2, 1}, {3, 1}, {5, 1}}));
  for (const auto& c : p.chunks)
    for (int32_t page : c.seq->kv.page_table) EXPECT_EQ(page / 4, c.seq->kv.partition);
}

TEST(SchedulerTest, RandomWorkloadsOnTinyPoolsAlwaysFinish) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t page = 1 + rng() % 4, parts = 1 + rng() % 2, pages = (4 + rng() % 12) * parts;
    KvBlockManager bm(pages, page, rng() % 2 == 0, static_cast<int>(parts));
    Scheduler s({1 + static_cast<int64_t>(rng() % 6), 1 + static_cast<int64_t>(rng() % 20)}, bm);
    std::map<uint64_t, int64_t> want;  // id -> total tokens (prompt + generated) to reach
    const int n = 1 + rng() % 10;
    for (uint64_t id = 1; id <= static_cast<uint64_t>(n); ++id) {
      const int64_t total = 2 + rng() % (pages / parts * page - 1);  // fits a partition alone
      const int64_t prompt = 1 + rng() % (total - 1);
      s.Add(id, Prompt(static_cast<int32_t>(prompt), static_cast<int32_t>(rng() % 3)));
      want[id] = total;
    }
    int steps = 0;
    while (!s.empty()) {
      ASSERT_LT(++steps, 10000) << "trial " << trial << " did not finish";
      StepPlan p = s.Schedule();
      ASSERT_FALSE(p.chunks.empty()) << "trial " << trial << ": empty step with work left";
      for (uint64_t id : FakeStep(s, p, page)) {
        if (static_cast<int64_t>(s.Find(id)->tokens.size()) == want[id]) {
          ASSERT_TRUE(s.Finish(id));
        }
      }
    }
    EXPECT_EQ(bm.used_pages(), 0) << "trial " << trial;
  }
}

}  // namespace
}  // namespace lucid
