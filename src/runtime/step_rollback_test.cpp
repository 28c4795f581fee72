// Rolling a step back: the engine drops the KV of rejected tokens (KvBlockManager::Truncate) and
// the next step's output is bit-identical to never having run the rolled-back step (reference
// kernels, all three families). Also: StepInput's logits_rows select rows of the full output.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/engine_test_util.h"
#include "runtime/kv_block_manager.h"

namespace lucid {
namespace {

using testing_util::LoadTiny;
using testing_util::RandomPrompts;

// One sequence driven as the engine drives it: pages from a block manager, lengths advanced only
// after a step is accepted.
struct Driver {
  Driver(Model& m, int64_t pages, int64_t page_size)
      : model(m), bm(pages, page_size, true), kv(m.kv_spec(), pages, page_size, KvDtype::kF32) {}

  // Computes `tokens` after the sequence's KV; returns the logits of `rows`. Accepts the step.
  Tensor Step(std::span<const int32_t> tokens, ChunkRows rows) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    EXPECT_TRUE(bm.Grow(seq, seq.length + n).ok());
    StepInput in;
    AddSequence(in, seq.page_table, seq.length, tokens, rows);
    const StepInput before = in;
    StepOutput out;
    const Status s = model.Forward(in, kv, &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(in.tokens, before.tokens);  // the model reads the StepInput only
    seq.length += n;
    return out.logits;
  }

  Model& model;
  KvBlockManager bm;
  KvStorage kv;
  SequenceKv seq;
  PageChain chain;
};

bool BitEqual(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class StepRollbackTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StepRollbackTest, ARolledBackStepLeavesTheNextStepBitIdentical) {
  auto m = LoadTiny(GetParam());
  const auto prompt = RandomPrompts(1, 13, 13, 5)[0];
  const auto draft = RandomPrompts(1, 6, 6, 6)[0];  // crosses into a new page (page size 4)
  const std::vector<int32_t> next = {draft[0], 17, 23};
  // Reference: prompt, then `next`, then one decode token.
  Driver ref(*m, 16, 4);
  ref.Step(prompt, ChunkRows::kLast);
  const Tensor ref_next = ref.Step(next, ChunkRows::kAll);
  const int32_t tail[] = {42};
  const Tensor ref_tail = ref.Step(tail, ChunkRows::kLast);
  // Rolled back: prompt, a draft step whose KV is dropped, then the same `next` and decode.
  Driver rb(*m, 16, 4);
  rb.Step(prompt, ChunkRows::kLast);
  const Tensor drafted = rb.Step(draft, ChunkRows::kAll);
  ASSERT_EQ(drafted.size(0), 6);
  const int64_t pages_with_draft = static_cast<int64_t>(rb.seq.page_table.size());
  EXPECT_EQ(rb.bm.Truncate(rb.seq, rb.chain, 13), 13);
  EXPECT_LT(static_cast<int64_t>(rb.seq.page_table.size()), pages_with_draft);
  const Tensor got_next = rb.Step(next, ChunkRows::kAll);
  const Tensor got_tail = rb.Step(tail, ChunkRows::kLast);
  EXPECT_TRUE(BitEqual(got_next, ref_next));
  EXPECT_TRUE(BitEqual(got_tail, ref_tail));
  // The draft's first row is `next`'s first row (same token, same context): a check that the
  // comparison above compares something the draft could have changed.
  const int64_t V = m->config().vocab_size;
  EXPECT_EQ(std::memcmp(drafted.data<float>(), ref_next.data<float>(), V * 4), 0);
  EXPECT_NE(std::memcmp(drafted.data<float>() + V, ref_next.data<float>() + V, V * 4), 0);
}

TEST_P(StepRollbackTest, LogitsRowsAreRowsOfTheFullOutput) {
  auto m = LoadTiny(GetParam());
  const auto a = RandomPrompts(1, 9, 9, 7)[0], b = RandomPrompts(1, 5, 5, 8)[0];
  const int64_t V = m->config().vocab_size;
  KvStorage kv(m->kv_spec(), 8, 4, KvDtype::kF32);
  const std::vector<int32_t> pa = {0, 1, 2}, pb = {3, 4};
  StepInput all, some;
  AddSequence(all, pa, 0, a, ChunkRows::kAll, ChunkRows::kAll);
  AddSequence(all, pb, 0, b, ChunkRows::kAll, ChunkRows::kAll);
  AddSequence(some, pa, 0, a, ChunkRows::kLast, ChunkRows::kLast);
  AddSequence(some, pb, 0, b, ChunkRows::kNone, ChunkRows::kNone);
  EXPECT_EQ(some.logits_rows, std::vector<int64_t>{8});
  StepOutput full, part;
  ASSERT_TRUE(m->Forward(all, kv, &full).ok());
  ASSERT_TRUE(m->Forward(some, kv, &part).ok());
  ASSERT_EQ(full.logits.size(0), 14);
  ASSERT_EQ(part.logits.size(0), 1);
  ASSERT_EQ(part.hidden.size(0), 1);
  const int64_t D = m->config().hidden_size;
  EXPECT_EQ(std::memcmp(part.logits.data<float>(), full.logits.data<float>() + 8 * V, V * 4), 0);
  EXPECT_EQ(std::memcmp(part.hidden.data<float>(), full.hidden.data<float>() + 8 * D, D * 4), 0);
  // Malformed row lists are refused.
  StepInput bad = some;
  bad.logits_rows = {8, 8};
  EXPECT_EQ(m->Forward(bad, kv, &part).code(), StatusCode::kInvalidArgument);
  bad.logits_rows = {14};
  EXPECT_EQ(m->Forward(bad, kv, &part).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Families, StepRollbackTest,
                         ::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32",
                                           "tiny_deepseek_v3"));

}  // namespace
}  // namespace lucid
