// The threaded engine under the CPU-contention rule (runtime/cpu_contention.h) with the default
// CPU kernels (CpuFastOps, whose work splits follow the thread count: attention over a context
// longer than 64 rows is split into a partial per thread and merged).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "backends/cpu/cpu_fast_ops.h"
#include "runtime/engine_test_util.h"

namespace lucid {
namespace {

using namespace testing_util;

const CpuFastOps& FastOps() {
  static const CpuFastOps ops;
  return ops;
}

class EngineContentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "a team of two OpenMP threads: libgomp is not instrumented, so ThreadSanitizer "
                    "would take its fork and join for races (scripts/sanitize.sh runs with one)";
#endif
    saved_ = NumThreads();
    SetNumThreads(2);  // the team the kernels plan for, carried to the engine thread
  }
  void TearDown() override { SetNumThreads(saved_); }

 private:
  int saved_ = 1;
};

EngineOptions Options() {
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 128;
  o.max_running_requests = 4;
  // The runs below must be the same steps: a prefix-cache hit on a prompt the warm-up loop ran
  // would prefill fewer tokens, and a many-token GEMM over fewer rows is other (valid) bits.
  o.enable_prefix_cache = false;
  return o;
}

// A CPU where the engine thread waits for a CPU as long as it runs (a competitor on its core) and
// other processes keep every CPU busy: each reading advances the counters by that much.
CpuReader ContendedCpu() {
  auto state = std::make_shared<std::pair<std::mutex, CpuReading>>();
  state->second = CpuReading{true, 0, 0, true, 0, 0, 2};
  return [state](bool machine) {
    std::lock_guard<std::mutex> lock(state->first);
    CpuReading& r = state->second;
    r.own_cpu_s += 0.02;
    r.own_wait_s += 0.02;
    r.machine_busy_s += 10.0;  // others hold both CPUs whatever the window
    CpuReading out = r;
    out.machine_valid = machine;
    return out;
  };
}

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// One request at a time (the same batches in every run).
std::vector<Answer> Sequential(Engine& engine, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<Answer> out;
  for (const auto& p : prompts) {
    GenerationRequest r = Greedy(p, 8);
    r.sampling.logprobs = 0;
    auto res = GenerateAll(engine, {r});
    LUCID_CHECK(res.ok(), res.status().ToString());
    Answer a{(*res)[0].tokens, {}};
    for (const TokenLogprob& l : (*res)[0].logprobs) a.logprobs.push_back(l.logprob);
    out.push_back(std::move(a));
  }
  return out;
}

EngineStats Published(Engine& engine, int64_t requests_ok) {
  EngineStats st;
  for (int i = 0; i < 400 && (st = engine.Stats()).requests_ok < requests_ok; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return st;
}

TEST_F(EngineContentionTest, AContendedCpuLowersTheTeamAndChangesNoBit) {
  // Dense MLA over contexts of 100..208 rows: decode attention is split in a partial per planned
  // thread and merged, so a plan for one thread would give other bits.
  const auto prompts = RandomPrompts(4, 100, 200, 41);
  auto whole = MakeEngine(LoadTiny("tiny_deepseek_v3", FastOps()), nullptr, Options());
  const std::vector<Answer> want = Sequential(*whole, prompts);
  const EngineStats ws = Published(*whole, static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(ws.cpu_team_threads, 2);
  EXPECT_EQ(ws.cpu_team_lowerings, 0);  // the rule is off by default
  whole->Stop();

  EngineOptions o = Options();
  o.cpu_busy_threads = 1;
  o.cpu_reader = ContendedCpu();
  auto engine = MakeEngine(LoadTiny("tiny_deepseek_v3", FastOps()), nullptr, o);
  // The rule reads the counters at most every 10 ms of the engine's steps: run requests until it
  // has lowered the team (bounded).
  int64_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (engine->Stats().cpu_team_lowerings == 0 && std::chrono::steady_clock::now() < deadline) {
    Sequential(*engine, {prompts[0]});
    Published(*engine, ++done);
  }
  EngineStats st = engine->Stats();
  ASSERT_EQ(st.cpu_team_lowerings, 1) << "the contended CPU never lowered the team";
  EXPECT_EQ(st.cpu_team_threads, 1);
  const std::vector<Answer> got = Sequential(*engine, prompts);
  st = Published(*engine, done + static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(st.cpu_team_threads, 1) << "others still hold the CPUs: no raise";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << "request " << i;
    EXPECT_EQ(std::memcmp(got[i].logprobs.data(), want[i].logprobs.data(),
                          want[i].logprobs.size() * sizeof(float)),
              0)
        << "request " << i << ": the logprobs' bits changed with the team";
  }
}

TEST_F(EngineContentionTest, ANegativeBusyTeamIsRefused) {
  EngineOptions o = Options();
  o.cpu_busy_threads = -1;
  auto engine = CreateEngine(LoadTiny("tiny_deepseek_v3", FastOps()), nullptr, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("cpu_busy_threads"), std::string::npos);
}

}  // namespace
}  // namespace lucid
