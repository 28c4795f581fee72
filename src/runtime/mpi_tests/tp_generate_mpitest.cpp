// Tensor-parallel generation under `mpirun -np 2` (ctest mpi/tp_generate) against the
// single-process run of the same checkpoint with the reference kernels: for the tiny GLM-5
// (glm_moe_dsa), DeepSeek-V3.2 and DeepSeek-V3 fixtures, the prompt's logits through the TP group
// (TP 2, and TP 2 + EP 2) are within 1e-5 of each row's largest magnitude of the single-process
// logits, and the greedy continuations (prefill, then one decode step per token, through the
// engine) are identical. Every step also checks that the router's and the indexer's choices are the
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
