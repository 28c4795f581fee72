// KvBlockManager without a model: allocation, reference counts, the prefix cache and LRU eviction.
#include "runtime/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace lucid {
namespace {

std::vector<int32_t> Iota(int32_t n, int32_t from = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Allocates pages for `tokens`, pretends the model computed them, and registers the full pages.
void Compute(KvBlockManager& bm, const std::vector<int32_t>& tokens, SequenceKv& seq,
             PageChain& chain) {
  ASSERT_TRUE(bm.Grow(seq, static_cast<int64_t>(tokens.size())).ok());
  seq.length = static_cast<int64_t>(tokens.size());
  bm.CommitFullPages(tokens, seq, chain);
}

TEST(KvBlockManagerTest, GrowTakesWholePagesAndFailsWithoutTakingAnything) {
  KvBlockManager bm(4, 16, true);
  SequenceKv a, b;
  ASSERT_TRUE(bm.Grow(a, 17).ok());
  EXPECT_EQ(a.page_table.size(), 2u);
  EXPECT_EQ(bm.used_pages(), 2);
  EXPECT_EQ(bm.PagesNeeded(a, 32), 0);
  EXPECT_EQ(bm.PagesNeeded(a, 33), 1);
  Status s = bm.Grow(b, 48);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.page_table.empty());
  EXPECT_EQ(bm.free_pages(), 2);
  PageChain ca, cb;
  bm.Release(a, ca);
  EXPECT_EQ(bm.free_pages(), 4);  // nothing registered: straight back to free
  EXPECT_EQ(a.length, 0);
}

TEST(KvBlockManagerTest, FullPagesAreSharedByAPrefixAndRefCounted) {
  KvBlockManager bm(8, 4, true);
  const auto tokens = Iota(10);  // pages [0..4) [4..8) and a partial one
  SequenceKv a;
  PageChain ca;
  Compute(bm, tokens, a, ca);
  EXPECT_EQ(ca.keys.size(), 2u);
  // Same first 9 tokens then a different one: both full pages are reused.
  std::vector<int32_t> other = tokens;
  other.back() = 99;
  SequenceKv b;
  PageChain cb;
  EXPECT_EQ(bm.AcquirePrefix(other, 9, b, cb), 8);
  EXPECT_EQ(b.length, 8);
  EXPECT_EQ(b.page_table[0], a.page_table[0]);
  EXPECT_EQ(b.page_table[1], a.page_table[1]);
  EXPECT_EQ(bm.ref_count(a.page_table[0]), 2);
  EXPECT_EQ(bm.used_pages(), 3);
  bm.Release(a, ca);
  EXPECT_EQ(bm.used_pages(), 2);  // a's partial page freed, the shared ones still used by b
  EXPECT_EQ(bm.cached_pages(), 0);
  bm.Release(b, cb);
  EXPECT_EQ(bm.used_pages(), 0);
  EXPECT_EQ(bm.cached_pages(), 2);
}

TEST(KvBlockManagerTest, LookupNeverCoversMoreThanMaxTokens) {
  KvBlockManager bm(8, 4, true);
  const auto tokens = Iota(8);
  SequenceKv a;
  PageChain ca;
  Compute(bm, tokens, a, ca);
  bm.Release(a, ca);
  SequenceKv b;
  PageChain cb;
  // The whole 8-token prompt is cached, but the last token must be recomputed for its logits.
  EXPECT_EQ(bm.AcquirePrefix(tokens, 7, b, cb), 4);
  bm.Release(b, cb);
  EXPECT_EQ(bm.AcquirePrefix(tokens, 8, b, cb), 8);
  bm.Release(b, cb);
}

TEST(KvBlockManagerTest, KeyCoversEverythingBeforeThePage) {
  KvBlockManager bm(8, 4, true);
  std::vector<int32_t> x = {1, 2, 3, 4, 5, 6, 7, 8, 0};
  std::vector<int32_t> y = {9, 9, 9, 9, 5, 6, 7, 8, 0};  // same second page, different first
  SequenceKv a, b;
  PageChain ca, cb;
  Compute(bm, x, a, ca);
  EXPECT_EQ(bm.AcquirePrefix(y, 8, b, cb), 0);
  EXPECT_NE(KvBlockManager::ChainHash(ca.keys[0], {x.data() + 4, 4}),
            KvBlockManager::ChainHash(KvBlockManager::kRootHash, {x.data() + 4, 4}));
}

TEST(KvBlockManagerTest, EvictsLeastRecentlyReleasedChainFromItsTail) {
  KvBlockManager bm(4, 2, true);
  SequenceKv a, b, c;
  PageChain ca, cb, cc;
  const std::vector<int32_t> ta = {1, 1, 2, 2}, tb = {3, 3, 4, 4};
  Compute(bm, ta, a, ca);
  Compute(bm, tb, b, cb);
  const int32_t a_tail = a.page_table[1];
  bm.Release(a, ca);  // older
  bm.Release(b, cb);
  EXPECT_EQ(bm.cached_pages(), 4);
  EXPECT_EQ(bm.available_pages(), 4);
  ASSERT_TRUE(bm.Grow(c, 2).ok());  // one page: evicts a's tail first
  EXPECT_EQ(c.page_table[0], a_tail);
  EXPECT_EQ(bm.evictions(), 1);
  SequenceKv d;
  PageChain cd;
  EXPECT_EQ(bm.AcquirePrefix(ta, 4, d, cd), 2);  // a's head is still cached
  bm.Release(d, cd);
  EXPECT_EQ(bm.AcquirePrefix(tb, 4, d, cd), 4);  // b untouched
  bm.Release(d, cd);
  bm.Release(c, cc);
}

TEST(KvBlockManagerTest, ReusedPagesAreNotEvictable) {
  KvBlockManager bm(2, 2, true);
  SequenceKv a, b, c;
  PageChain ca, cb, cc;
  const std::vector<int32_t> t = {1, 2, 3, 4, 5};
  ASSERT_TRUE(bm.Grow(a, 4).ok());
  a.length = 4;
  bm.CommitFullPages(t, a, ca);
  bm.Release(a, ca);
  EXPECT_EQ(bm.AcquirePrefix(t, 4, b, cb), 4);
  EXPECT_EQ(bm.available_pages(), 0);
  EXPECT_FALSE(bm.Grow(c, 1).ok());
  bm.Release(b, cb);
}

TEST(KvBlockManagerTest, TheSamePrefixComputedTwiceIsCachedOnce) {
  KvBlockManager bm(8, 2, true);
  const std::vector<int32_t> t = {5, 6, 7, 8};
  SequenceKv a, b;
  PageChain ca, cb;
  Compute(bm, t, a, ca);
  Compute(bm, t, b, cb);  // computed concurrently, before a's pages were visible
  bm.Release(a, ca);
  bm.Release(b, cb);
  EXPECT_EQ(bm.cached_pages(), 2);
  EXPECT_EQ(bm.free_pages(), 6);
}

TEST(KvBlockManagerTest, DisabledPrefixCacheNeverCaches) {
  KvBlockManager bm(4, 2, false);
  const std::vector<int32_t> t = {5, 6, 7, 8};
  SequenceKv a, b;
  PageChain ca, cb;
  Compute(bm, t, a, ca);
  bm.Release(a, ca);
  EXPECT_EQ(bm.cached_pages(), 0);
  EXPECT_EQ(bm.AcquirePrefix(t, 4, b, cb), 0);
}

TEST(KvBlockManagerTest, TruncateDropsThePagesPastTheKeptTokens) {
  KvBlockManager bm(8, 4, true);
  const auto tokens = Iota(10);  // full pages [0, 4) [4, 8), a partial [8, 10)
  SequenceKv a;
  PageChain ca;
  Compute(bm, tokens, a, ca);
  const int32_t first = a.page_table[0], third = a.page_table[2];
  EXPECT_EQ(bm.Truncate(a, ca, 10), 10);  // nothing to drop
  EXPECT_EQ(a.page_table.size(), 3u);
  EXPECT_EQ(bm.Truncate(a, ca, 9), 9);  // inside the partial page: it stays
  EXPECT_EQ(a.page_table.size(), 3u);
  EXPECT_EQ(bm.Truncate(a, ca, 8), 8);  // the partial page goes back to free
  EXPECT_EQ(a.page_table.size(), 2u);
  EXPECT_EQ(bm.ref_count(third), 0);
  EXPECT_EQ(bm.free_pages(), 6);
  EXPECT_EQ(ca.keys.size(), 2u);
  // Into a registered (cached) full page: it is never written again, so it is dropped as well and
  // the length comes out at its start; it stays in the cache for others.
  EXPECT_EQ(bm.Truncate(a, ca, 6), 4);
  EXPECT_EQ(a.length, 4);
  EXPECT_EQ(a.page_table.size(), 1u);
  EXPECT_EQ(ca.keys.size(), 1u);
  EXPECT_EQ(bm.cached_pages(), 1);
  EXPECT_EQ(bm.ref_count(first), 1);
  // Growing again and recomputing registers the same chain: the cached page is found again.
  ASSERT_TRUE(bm.Grow(a, 10).ok());
  a.length = 10;
  bm.CommitFullPages(tokens, a, ca);
  EXPECT_EQ(ca.keys.size(), 2u);
  SequenceKv b;
  PageChain cb;
  EXPECT_EQ(bm.AcquirePrefix(tokens, 9, b, cb), 8);
  EXPECT_EQ(bm.Truncate(b, cb, 0), 0);
  EXPECT_TRUE(b.page_table.empty());
  EXPECT_TRUE(cb.keys.empty());
}

TEST(KvBlockManagerTest, TruncateNeverLeavesASharedPagePartlyFilled) {
  KvBlockManager bm(8, 4, true);
  const auto tokens = Iota(8);
  SequenceKv a, b;
  PageChain ca, cb;
  Compute(bm, tokens, a, ca);
  EXPECT_EQ(bm.AcquirePrefix(tokens, 8, b, cb), 8);
  EXPECT_EQ(bm.ref_count(a.page_table[1]), 2);
  EXPECT_EQ(bm.Truncate(b, cb, 7), 4);  // page 1 is a's too: b drops it and recomputes [4, 7)
  EXPECT_EQ(bm.ref_count(a.page_table[1]), 1);
  EXPECT_EQ(b.page_table.size(), 1u);
}

// Partitions (data-parallel attention): a sequence's pages all come from its partition's id range;
// a partition runs out on its own; a cached prefix is reused only in the partition that holds it,
// and eviction takes only the sequence's partition's cached pages.
TEST(KvBlockManagerTest, PartitionsKeepEachSequenceInItsOwnPageRange) {
  KvBlockManager bm(8, 4, true, 2);
  EXPECT_EQ(bm.partitions(), 2);
  EXPECT_EQ(bm.pages_per_partition(), 4);
  EXPECT_EQ(bm.EmptiestPartition(), 0);  // a tie: the lowest
  SequenceKv a, b;
  PageChain ca, cb;
  b.partition = 1;
  Compute(bm, Iota(12), a, ca);      // 3 pages of partition 0
  Compute(bm, Iota(12, 50), b, cb);  // 3 of partition 1
  for (int32_t p : a.page_table) EXPECT_LT(p, 4);
  for (int32_t p : b.page_table) EXPECT_GE(p, 4);
  EXPECT_EQ(bm.available_pages(0), 1);
  EXPECT_EQ(bm.available_pages(1), 1);
  // Partition 0 cannot lend partition 1's free page.
  SequenceKv c;
  EXPECT_EQ(bm.Grow(c, 8).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(c.page_table.empty());
  bm.Release(b, cb);  // partition 1's pages become cached
  EXPECT_EQ(bm.EmptiestPartition(), 1);
  // The same tokens in partition 0 find the prefix cached in partition 1 but do not take it.
  SequenceKv d;
  PageChain cd;
  EXPECT_EQ(bm.AcquirePrefix(Iota(12, 50), 12, d, cd), 0);
  d.partition = 1;
  EXPECT_EQ(bm.AcquirePrefix(Iota(12, 50), 12, d, cd), 12);
  for (int32_t p : d.page_table) EXPECT_GE(p, 4);
  bm.Release(d, cd);
  // Partition 0 is short: growing there evicts none of partition 1's cached pages.
  const int64_t cached = bm.cached_pages();
  SequenceKv e;
  EXPECT_TRUE(bm.Grow(e, 4).ok());
  EXPECT_EQ(e.page_table, std::vector<int32_t>{3});
  EXPECT_EQ(bm.cached_pages(), cached);
  EXPECT_EQ(bm.Grow(e, 8).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(bm.cached_pages(), cached);
}

}  // namespace
}  // namespace lucid
