// Tensor-parallel generation under `mpirun -np 2` (ctest mpi/tp_generate) against the
// single-process run of the same checkpoint with the reference kernels: for the tiny GLM-5
// (glm_moe_dsa), DeepSeek-V3.2 and DeepSeek-V3 fixtures, the prompt's logits through the TP group
// (TP 2, and TP 2 + EP 2) are within 1e-5 of each row's largest magnitude of the single-process
// logits, and the greedy continuations (prefill, then one decode step per token, through the
// engine) are identical; and the same with data-parallel attention (DpAttentionGenerate, below).
// Every step also checks that the router's and the indexer's choices are the
// same bytes on both ranks (tp_check_replicated). The oracle is the single-process model, which the
// transformers goldens check (models/deepseek_v3_family_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "dist/mpi_communicator.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"
#include "runtime/tp_step.h"

namespace lucid {
namespace {

Communicator* g_comm = nullptr;
const CpuOps kOps;

std::string FixtureDir(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// 24 prompt tokens (past index_topk 8, so the DSA fixtures' indexer really selects) and 12 new.
const std::vector<int32_t> kPrompt = {1,  17, 42, 99, 3,   200, 7,  64,  128, 5,   250, 33,
                                      81, 12, 9,  77, 160, 2,   45, 190, 11,  240, 66,  101};
constexpr int64_t kNewTokens = 12;

// (fixture, ep_size): ep_size 1 is TP 2 alone, 2 is TP 2 + EP 2.
class TpGenerate : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(TpGenerate, MatchesSingleProcess) {
  const char* name = std::get<0>(GetParam());
  const int ep = std::get<1>(GetParam());
  const std::string dir = FixtureDir(name);
  const bool leader = g_comm->rank() == 0;
  std::vector<int32_t> want;
  Tensor want_logits;
  if (leader) {
    auto single = LoadModel(dir, kOps);
    ASSERT_TRUE(single.ok()) << single.status().ToString();
    auto out = GreedyGenerate(**single, kPrompt, kNewTokens, &want_logits);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    want = *out;
  }
  ModelLoadOptions opt;
  opt.tp = g_comm;
  opt.tp_check_replicated = true;
  opt.ep_size = ep;
  auto shard = LoadModel(dir, kOps, opt);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  // Each rank holds its shard: together the two hold every weight once, plus what both keep whole
  // (so each holds well under the whole and over half of it).
  auto whole = LoadModel(dir, kOps);
  ASSERT_TRUE(whole.ok());
  const uint64_t mine = (*shard)->weight_bytes(), all = (*whole)->weight_bytes();
  EXPECT_LT(mine, all * 9 / 10) << "rank " << g_comm->rank();
  EXPECT_GT(mine, all / 2) << "rank " << g_comm->rank();
  if (!leader) {
    const Status s = RunTpWorker(**shard, *g_comm);
    ASSERT_TRUE(s.ok()) << s.ToString();
    return;
  }
  TpLeaderModel tp(**shard, *g_comm);
  Tensor got_logits;
  auto got = GreedyGenerate(tp, kPrompt, kNewTokens, &got_logits);
  const Status stopped = tp.Stop();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(stopped.ok()) << stopped.ToString();
  EXPECT_EQ(*got, want);
  ASSERT_EQ(got_logits.shape(), want_logits.shape());
  const int64_t rows = want_logits.size(0), V = want_logits.size(1);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = want_logits.data<const float>() + r * V;
    const float* g = got_logits.data<const float>() + r * V;
    float scale = 0;
    for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::fabs(w[v]));
    for (int64_t v = 0; v < V; ++v) {
      const double rel = std::fabs(g[v] - w[v]) / scale;
      worst = std::max(worst, rel);
      ASSERT_LE(rel, 1e-5) << "row " << r << " column " << v << ": " << g[v] << " vs " << w[v];
    }
  }
  std::printf("%s TP 2 EP %d: greedy %zu tokens equal, logits worst relative difference %.3g\n",
              name, ep, want.size(), worst);
}

// Data-parallel attention (--enable-dp-attention, with and without EP 2): three sequences in one
// batch, two in rank 0's KV partition and one in rank 1's, interleaved in the StepInput; C's
// prompt in two chunks, the second beside A's and B's first decode. The oracle runs the same
// steps on one process over one storage of both partitions' pages (the same global page ids).
// Every step's logits within 1e-5 of each row's largest magnitude, and each sequence's greedy
// continuation identical.
class DpAttentionGenerate : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

constexpr int64_t kDpPageSize = 16, kDpPagesPerRank = 8, kDpDecodeSteps = 8;

// Runs the steps on `model` over `kv` (every rank: the worker's model gets them through the
// broadcast); appends each step's logits rows to *logits and returns each sequence's tokens.
StatusOr<std::vector<std::vector<int32_t>>> RunDpSteps(Model& model, KvStorage& kv,
                                                       std::vector<Tensor>* logits) {
  const std::vector<int32_t> c_prompt = {5, 90, 14, 201, 37, 8, 150, 63, 29};
  std::vector<std::vector<int32_t>> toks = {
      kPrompt, {7, 3, 88, 240, 19, 55, 102, 4, 77, 31, 160, 12, 9, 200, 45, 66, 18}, c_prompt};
  // A and C in partition 0 (pages [0, 8)), B in partition 1 ([8, 16)).
  const std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3}, {8, 9, 10, 11}, {4, 5, 6, 7}};
  std::vector<int64_t> done(3, 0);  // tokens with KV
  const std::vector<int64_t> prompt = {24, 17, 9};
  for (int step = 0; step < kDpDecodeSteps + 1; ++step) {
    StepInput in;
    std::vector<int> sampled;  // sequences whose last row gives the next token
    for (int q = 0; q < 3; ++q) {
      int64_t n = static_cast<int64_t>(toks[q].size()) - done[q];
      if (q == 2 && step == 0) n = 5;  // C's first chunk: no logits
      const bool last = done[q] + n == static_cast<int64_t>(toks[q].size());
      AddSequence(in, tables[q], done[q], std::span(toks[q]).subspan(done[q], n),
                  last ? ChunkRows::kLast : ChunkRows::kNone);
      if (last) sampled.push_back(q);
      done[q] += n;
    }
    StepOutput out;
    LUCID_RETURN_IF_ERROR(model.Forward(in, kv, &out));
    const int64_t V = out.logits.size(1);
    for (size_t i = 0; i < sampled.size(); ++i) {
      const float* row = out.logits.data<const float>() + i * V;
      toks[sampled[i]].push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
    }
    logits->push_back(std::move(out.logits));
  }
  for (int q = 0; q < 3; ++q) toks[q].erase(toks[q].begin(), toks[q].begin() + prompt[q]);
  return toks;
}

TEST_P(DpAttentionGenerate, MatchesSingleProcess) {
  const char* name = std::get<0>(GetParam());
  const int ep = std::get<1>(GetParam());
  const std::string dir = FixtureDir(name);
  const bool leader = g_comm->rank() == 0;
  ModelLoadOptions opt;
  opt.tp = g_comm;
  opt.tp_check_replicated = true;  // the router's choice (the indexer's differs by rank here)
  opt.ep_size = ep;
  opt.dp_attention = true;
  auto shard = LoadModel(dir, kOps, opt);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  if (!leader) {
    const Status s = RunTpWorker(**shard, *g_comm);
    ASSERT_TRUE(s.ok()) << s.ToString();
    return;
  }
  auto single = LoadModel(dir, kOps);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  KvStorage whole((*single)->kv_spec(), 2 * kDpPagesPerRank, kDpPageSize, KvDtype::kF32);
  std::vector<Tensor> want_logits;
  auto want = RunDpSteps(**single, whole, &want_logits);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  // Rank 0's storage holds its partition only; rank 1's, of the same geometry, its own.
  KvStorage mine((*shard)->kv_spec(), kDpPagesPerRank, kDpPageSize, KvDtype::kF32);
  TpLeaderModel tp(**shard, *g_comm);
  std::vector<Tensor> got_logits;
  auto got = RunDpSteps(tp, mine, &got_logits);
  const Status stopped = tp.Stop();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(stopped.ok()) << stopped.ToString();
  EXPECT_EQ(*got, *want);
  ASSERT_EQ(got_logits.size(), want_logits.size());
  double worst = 0;
  for (size_t k = 0; k < want_logits.size(); ++k) {
    ASSERT_EQ(got_logits[k].shape(), want_logits[k].shape()) << "step " << k;
    const int64_t V = want_logits[k].size(1);
    for (int64_t r = 0; r < want_logits[k].size(0); ++r) {
      const float* w = want_logits[k].data<const float>() + r * V;
      const float* g = got_logits[k].data<const float>() + r * V;
      float scale = 0;
      for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::fabs(w[v]));
      for (int64_t v = 0; v < V; ++v) {
        const double rel = std::fabs(g[v] - w[v]) / scale;
        worst = std::max(worst, rel);
        ASSERT_LE(rel, 1e-5) << "step " << k << " row " << r << " column " << v;
      }
    }
  }
  std::printf(
      "%s DP-attention 2 EP %d: 3 sequences x %lld greedy tokens equal, logits worst "
      "relative difference %.3g\n",
      name, ep, static_cast<long long>(kDpDecodeSteps), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DpAttentionGenerate,
                         ::testing::Combine(::testing::Values("tiny_glm_moe_dsa",
                                                              "tiny_deepseek_v32",
                                                              "tiny_deepseek_v3"),
                                            ::testing::Values(1, 2)));

INSTANTIATE_TEST_SUITE_P(Fixtures, TpGenerate,
                         ::testing::Combine(::testing::Values("tiny_glm_moe_dsa",
                                                              "tiny_deepseek_v32",
                                                              "tiny_deepseek_v3"),
                                            ::testing::Values(1, 2)));

}  // namespace
}  // namespace lucid

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = lucid::MakeMpiCommunicator(std::chrono::milliseconds(60000));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  lucid::g_comm = comm->get();
  if (lucid::g_comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  float failed = static_cast<float>(rc != 0);
  if (!lucid::g_comm->AllReduceSum(&failed, 1).ok()) return 1;
  return failed > 0 ? 1 : 0;
}
