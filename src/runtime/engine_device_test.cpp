// The engine over a model whose backend memory the host cannot touch (GuardedDeviceBackend, the
// stand-in for a GPU): batched, chunked and prefix-cached requests, sampled ones with logprobs
// and prompt logprobs, give what the same requests give on the CPU backend, token for token and
// logprob for logprob, and no op was handed host memory where it wants device memory; a poisoned
// request fails alone, as on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "backends/cpu/guarded_device.h"
#include "ops/forwarding_ops.h"
#include "runtime/engine_test_util.h"
#include "runtime/poison_ops_for_test.h"

namespace lucid {
namespace {

using testing_util::Greedy;
using testing_util::LoadTiny;
using testing_util::MakeCore;
using testing_util::ModelDir;
using testing_util::RandomPrompts;
using testing_util::RefOps;

EngineOptions Options() {
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 64;
  o.max_running_requests = 4;
  o.chunked_prefill_size = 24;  // long prompts take several steps
  return o;
}

std::vector<GenerationRequest> Requests() {
  std::vector<GenerationRequest> reqs;
  const auto prompts = RandomPrompts(6, 3, 60, 41);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = Greedy(prompts[i], 6);
    if (i % 2 == 1) {  // sampled, seeded, with logprobs and prompt logprobs
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 7 + i;
      r.sampling.logprobs = 2;
      r.prompt_logprobs = 1;
    }
    reqs.push_back(std::move(r));
  }
  reqs.push_back(Greedy(prompts[0], 6));  // its prompt is in the prefix cache by now
  return reqs;
}

class EngineDevice : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineDevice, RequestsOnGuardedDeviceMemoryGiveTheCpuBackendsTokensAndLogprobs) {
  GuardedDeviceBackend dev(RefOps());
  auto model = LoadModel(ModelDir(GetParam()), dev);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto on_dev = MakeCore(std::move(model).value(), Options());
  auto on_cpu = MakeCore(LoadTiny(GetParam()), Options());
  auto got = RunToCompletion(*on_dev, Requests());
  auto want = RunToCompletion(*on_cpu, Requests());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    const GenerationResult &g = (*got)[i], &w = (*want)[i];
    EXPECT_EQ(g.tokens, w.tokens) << "request " << i;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << "request " << i;
    for (size_t j = 0; j < g.logprobs.size(); ++j)
      EXPECT_EQ(g.logprobs[j].logprob, w.logprobs[j].logprob) << "request " << i << " token " << j;
    ASSERT_EQ(g.prompt_logprobs.size(), w.prompt_logprobs.size()) << "request " << i;
    for (size_t j = 0; j < g.prompt_logprobs.size(); ++j)
      EXPECT_EQ(g.prompt_logprobs[j].logprob, w.prompt_logprobs[j].logprob) << "request " << i;
  }
  EXPECT_FALSE((*want)[1].prompt_logprobs.empty());  // the prompt-logprob path was exercised
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
}

// The numerics guard on device memory: with --nan-check layers the per-layer flags are read back
// from the device, and the poisoned request alone fails naming the layer and the op.
TEST_P(EngineDevice, APoisonedRequestFailsAloneNamingTheLayerOnGuardedDeviceMemory) {
  const testing_util::PoisonOps poison(RefOps());
  GuardedDeviceBackend dev(poison);
  auto model = LoadModel(ModelDir(GetParam()), dev);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto clean = LoadTiny(GetParam());
  testing_util::ExpectOnlyThePoisonedRequestFails(
      std::move(model).value(), *clean, EngineOptions::NanCheck::kLayers, "layer 1, op L1.moe");
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
}

// Counts SampleRows calls; everything else is the wrapped ops'.
class CountingOps final : public ForwardingOps {
 public:
  using ForwardingOps::ForwardingOps;
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override {
    for (const RowSampling& r : rows) ++(r.forced_token >= 0 ? forced_rows : sampled_rows);
    ForwardingOps::SampleRows(logits, rows, edits, scratch, tokens, logprobs, top_ids);
  }
  mutable int64_t sampled_rows = 0;  // rows drawn from (a token chosen)
  mutable int64_t forced_rows = 0;   // rows with a forced token (prompt logprobs)
};

// A backend that forwards to `inner` and counts the tensors of `width` columns (logits rows) the
// host reads from it.
class ReadRecordingBackend final : public Backend {
 public:
  ReadRecordingBackend(Backend& inner, int64_t width) : inner_(inner), width_(width) {}
  Device device() const override { return inner_.device(); }
  std::string name() const override { return inner_.name(); }
  const Ops& ops() const override { return inner_.ops(); }
  Allocator& allocator() override { return inner_.allocator(); }
  StatusOr<Tensor> UploadWeight(const Tensor& host) override { return inner_.UploadWeight(host); }
  Workspace& workspace() override { return inner_.workspace(); }
  bool memory_is_host() const override { return inner_.memory_is_host(); }
  StatusOr<Tensor> ReadableOnHost(const Tensor& t) override {
    if (t.rank() == 2 && t.size(1) == width_) {
      ++rows_reads;
      rows_read += t.size(0);
    }
    return inner_.ReadableOnHost(t);
  }
  int64_t rows_reads = 0;
  int64_t rows_read = 0;  // their rows, summed

 private:
  Backend& inner_;
  int64_t width_;
};

// A tiny model on GuardedDeviceBackend whose SampleRows rows and host reads of [rows, vocab]
// tensors are counted, beside the same model on the CPU backend, each under an EngineCore.
struct CountedDeviceRun {
  explicit CountedDeviceRun(const std::string& family)
      : counting(RefOps()), guarded(counting), dev(guarded, LoadTiny(family)->config().vocab_size) {
    auto model = LoadModel(ModelDir(family), dev);
    LUCID_CHECK(model.ok(), model.status().ToString());
    on_dev = MakeCore(std::move(model).value(), Options());
    on_cpu = MakeCore(LoadTiny(family), Options());
  }
  // Runs `reqs` on both; fails the test unless both complete.
  void Run(const std::vector<GenerationRequest>& reqs) {
    auto g = RunToCompletion(*on_dev, reqs);
    auto w = RunToCompletion(*on_cpu, reqs);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    got = *std::move(g);
    want = *std::move(w);
    ASSERT_EQ(got.size(), want.size());
  }
  // Request i's tokens, logprobs and alternatives equal on both.
  void ExpectSameTokensAndLogprobs(size_t i) const {
    const GenerationResult &g = got[i], &w = want[i];
    EXPECT_EQ(g.tokens, w.tokens) << "request " << i;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << "request " << i;
    for (size_t j = 0; j < g.logprobs.size(); ++j) {
      EXPECT_EQ(g.logprobs[j].logprob, w.logprobs[j].logprob) << "request " << i << " token " << j;
      EXPECT_EQ(g.logprobs[j].top, w.logprobs[j].top) << "request " << i << " token " << j;
    }
  }

  CountingOps counting;
  GuardedDeviceBackend guarded;
  ReadRecordingBackend dev;
  std::unique_ptr<EngineCore> on_dev, on_cpu;
  std::vector<GenerationResult> got, want;
};

// Device memory that runs out while serving: with the memory limited to what two short requests'
// steps took, a request whose prefill chunk needs more fails alone with the allocator's
// ResourceExhausted (the process goes on), and the same two short requests then get the CPU
// backend's tokens.
TEST_P(EngineDevice, ARequestWhoseStepDoesNotFitFailsAloneAndServingGoesOn) {
  GuardedDeviceBackend dev(RefOps());
  auto model = LoadModel(ModelDir(GetParam()), dev);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto on_dev = MakeCore(std::move(model).value(), Options());
  auto on_cpu = MakeCore(LoadTiny(GetParam()), Options());
  const auto prompts = RandomPrompts(2, 3, 5, 47);  // shorter than a page: no prefix-cache hits
  const std::vector<GenerationRequest> short_ones = {Greedy(prompts[0], 6), Greedy(prompts[1], 6)};
  ASSERT_TRUE(RunToCompletion(*on_dev, short_ones).ok());
  // Room for the short steps' logits, not for a 24-row chunk's activations.
  dev.memory().SetLimit(*dev.memory().held_bytes() + 16 * 1024);
  auto failed = RunToCompletion(*on_dev, {Greedy(RandomPrompts(1, 60, 60, 3)[0], 4)});
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  const GenerationResult& f = (*failed)[0];
  EXPECT_EQ(f.finish_reason, "error");
  EXPECT_EQ(f.error.code(), StatusCode::kResourceExhausted) << f.error.ToString();
  EXPECT_NE(f.error.message().find("GuardedMemory: cannot allocate"), std::string::npos)
      << f.error.ToString();
  EXPECT_TRUE(f.tokens.empty());
  auto got = RunToCompletion(*on_dev, short_ones);
  auto want = RunToCompletion(*on_cpu, short_ones);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  for (size_t i = 0; i < short_ones.size(); ++i) {
    EXPECT_EQ((*got)[i].finish_reason, "length") << (*got)[i].error.ToString();
    EXPECT_EQ((*got)[i].tokens, (*want)[i].tokens) << "request " << i;
  }
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
}

// Sampled requests with every sampling parameter the device applies (temperature, top_k, top_p,
// min_p, logit_bias, min_tokens, the repetition, frequency and presence penalties, logprobs with
// alternatives) and no prompt rows wanted: every token is sampled where the logits are
// (Ops::SampleRows), the host never reads a [rows, vocab] tensor, and each request
// gets the CPU backend's host-sampled tokens and logprobs exactly (the same arithmetic,
// ops/sampling.h).
TEST_P(EngineDevice, SampledRequestsAreSampledWhereTheLogitsAreAndMatchTheHostSampler) {
  CountedDeviceRun run(GetParam());
  std::vector<GenerationRequest> reqs;
  const auto prompts = RandomPrompts(6, 3, 40, 43);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = Greedy(prompts[i], 8);
    SamplingParams& p = r.sampling;
    p.seed = 100 + i;
    p.temperature = i == 0 ? 0.0f : 0.6f + 0.2f * static_cast<float>(i);
    p.logprobs = static_cast<int32_t>(i % 3) * 2;  // 0, 2, 4 alternatives
    if (i == 1) p.top_k = 3;
    if (i == 2) p.top_p = 0.7f;
    if (i == 3) p.min_p = 0.2f;
    if (i == 4) {
      p.repetition_penalty = 1.4f;
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 0.3f;
    }
    if (i == 5) {
      p.logit_bias = {{prompts[i][0], 4.0f}, {1, -2.0f}};
      p.min_tokens = 4;
      p.stop_token_ids = {prompts[i][1]};
    }
    reqs.push_back(std::move(r));
  }
  ASSERT_NO_FATAL_FAILURE(run.Run(reqs));
  int64_t tokens = 0;
  for (size_t i = 0; i < run.got.size(); ++i) {
    run.ExpectSameTokensAndLogprobs(i);
    tokens += static_cast<int64_t>(run.got[i].tokens.size());
  }
  EXPECT_EQ(run.counting.sampled_rows, tokens);
  EXPECT_EQ(run.dev.rows_reads, 0);  // no [rows, vocab] tensor reached the host
  for (const std::string& v : run.guarded.violations()) ADD_FAILURE() << v;
}

// Allows a fixed set of tokens, forever.
class AllowedTokens final : public TokenConstraint {
 public:
  explicit AllowedTokens(std::vector<int32_t> allowed) : allowed_(std::move(allowed)) {}
  const std::vector<int32_t>& allowed() const { return allowed_; }
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    return std::make_unique<Matcher>(allowed_);
  }

 private:
  class Matcher final : public TokenMatcher {
   public:
    explicit Matcher(const std::vector<int32_t>& a) : allowed_(a) {}
    void MaskLogits(std::span<float> logits) override {
      for (size_t i = 0; i < logits.size(); ++i)
        if (!Allowed(static_cast<int32_t>(i))) logits[i] = -std::numeric_limits<float>::infinity();
    }
    bool Accept(int32_t t) override { return Allowed(t); }
    bool IsTerminated() const override { return false; }

   private:
    bool Allowed(int32_t t) const {
      return std::find(allowed_.begin(), allowed_.end(), t) != allowed_.end();
    }
    const std::vector<int32_t>& allowed_;
  };
  std::vector<int32_t> allowed_;
};

// One batch of plain sampled requests, constrained ones (a grammar's bitmask uploaded and applied
// where the logits are), one with prompt logprobs (taken where the logits are, the prompt token
// forced) and one that needs its logits on the host (prompt logits, until the first token): only
// the latter's rows are copied to the host, every other token is sampled where the logits are,
// and every request gets the CPU backend's (host-masked, host-sampled) tokens, logprobs, prompt
// logprobs and prompt logits exactly.
TEST_P(EngineDevice, AMixedBatchCopiesOnlyTheRowsOfRequestsThatNeedThemOnTheHost) {
  CountedDeviceRun run(GetParam());
  const auto prompts = RandomPrompts(6, 5, 40, 47);
  const auto allowed = std::make_shared<AllowedTokens>(std::vector<int32_t>{3, 11, 12, 40, 77});
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = Greedy(prompts[i], 7);
    r.sampling.seed = 200 + i;
    r.sampling.temperature = 0.9f;
    r.sampling.logprobs = 2;
    if (i == 1 || i == 4) r.sampling.constraint = allowed;
    if (i == 2) r.prompt_logprobs = 2;
    if (i == 3) r.prompt_logits = true;
    reqs.push_back(std::move(r));
  }
  ASSERT_NO_FATAL_FAILURE(run.Run(reqs));
  int64_t tokens = 0, host_sampled = 0, host_rows = 0;
  for (size_t i = 0; i < run.got.size(); ++i) {
    run.ExpectSameTokensAndLogprobs(i);
    const GenerationResult &g = run.got[i], &w = run.want[i];
    ASSERT_EQ(g.prompt_logprobs.size(), w.prompt_logprobs.size()) << "request " << i;
    for (size_t j = 0; j < g.prompt_logprobs.size(); ++j) {
      EXPECT_EQ(g.prompt_logprobs[j].logprob, w.prompt_logprobs[j].logprob) << "request " << i;
      EXPECT_EQ(g.prompt_logprobs[j].top, w.prompt_logprobs[j].top) << "request " << i;
    }
    ASSERT_EQ(g.prompt_logits.raw() != nullptr, i == 3) << "request " << i;
    ASSERT_EQ(w.prompt_logits.raw() != nullptr, i == 3) << "request " << i;
    ASSERT_EQ(g.prompt_logits.shape(), w.prompt_logits.shape()) << "request " << i;
    for (int64_t j = 0; i == 3 && j < g.prompt_logits.numel(); ++j)
      ASSERT_EQ(g.prompt_logits.data<const float>()[j], w.prompt_logits.data<const float>()[j])
          << "request " << i << " value " << j;
    const int64_t n = static_cast<int64_t>(g.tokens.size());
    tokens += n;
    if (i == 1 || i == 4) {  // every token masked where the logits are
      for (int32_t t : g.tokens)
        EXPECT_NE(std::find(allowed->allowed().begin(), allowed->allowed().end(), t),
                  allowed->allowed().end());
    }
    if (i == 3) {  // prompt logits: every prompt row and the first token's row, on the host
      host_sampled += 1;
      host_rows += static_cast<int64_t>(prompts[i].size());
    }
  }
  // Prompt logprobs (from position 1) are taken where the logits are: one forced row each.
  EXPECT_EQ(run.got[2].prompt_logprobs.size(), prompts[2].size() - 1);
  EXPECT_EQ(run.counting.forced_rows, static_cast<int64_t>(prompts[2].size()) - 1);
  EXPECT_EQ(run.got[3].prompt_logits.size(0), static_cast<int64_t>(prompts[3].size()));
  EXPECT_EQ(run.counting.sampled_rows, tokens - host_sampled);
  EXPECT_EQ(run.dev.rows_read, host_rows);
  for (const std::string& v : run.guarded.violations()) ADD_FAILURE() << v;
}

INSTANTIATE_TEST_SUITE_P(Families, EngineDevice,
                         ::testing::Values("tiny_deepseek_v3", "tiny_deepseek_v32",
                                           "tiny_glm_moe_dsa"));

}  // namespace
}  // namespace lucid
