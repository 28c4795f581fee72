// The memory plan against what a device backend holds: each tiny fixture loaded and its engine
// made the way `lucid serve` does (LoadServedModel, EngineOptionsFrom, HeldGrowth around
// CreateEngine) on GuardedDeviceBackend, whose allocator counts like CudaAllocator, over reference
// ops that keep a scratch as CudaOps does; the plan is the resolver's, made before a weight is
// read.
#include "cli/memory_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/guarded_device.h"
#include "cli/serve_parallel.h"
#include "config/resolver.h"
#include "config/settings.h"
#include "ops/forwarding_ops.h"

namespace lucid::cli {
namespace {

StatusOr<config::ResolvedConfig> ResolveFixture(const std::string& name,
                                                const std::string& kv_dtype) {
  config::ExplicitSettings s;
  const std::pair<std::string, std::string> flags[] = {
      {"model-path", std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name},
      {"target", "cpu"},
      {"cpu-memory", "8GiB"},
      {"max-total-tokens", "1000"},  // not a page multiple: the pool holds whole pages
      {"kv-cache-dtype", kv_dtype}};
  for (const auto& [k, v] : flags)
    if (Status st = s.Set(k, v, config::Source::kCli, "--" + k); !st.ok()) return st;
  return config::Resolve(s);
}

// The reference ops with a scratch of their own, as CudaOps keeps one for the activations it
// rounds or quantizes for a GEMM: the largest Linear input seen, held.
class ScratchKeepingOps final : public ForwardingOps {
 public:
  ScratchKeepingOps() : ForwardingOps(ref_) {}
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    largest_ = std::max<int64_t>(largest_, static_cast<int64_t>(x.nbytes()));
    ForwardingOps::Linear(x, w, y);
  }
  std::optional<int64_t> scratch_held_bytes() const override { return largest_; }

 private:
  const CpuOps ref_;
  mutable int64_t largest_ = 0;
};

class PlanAgainstDevice : public ::testing::TestWithParam<const char*> {};

TEST_P(PlanAgainstDevice, WeightsAndKvPoolEqualWhatTheBackendHolds) {
  for (const char* kv : {"f32", "bf16", "fp8_e4m3"}) {
    StatusOr<config::ResolvedConfig> rc = ResolveFixture(GetParam(), kv);
    ASSERT_TRUE(rc.ok()) << rc.status().ToString();
    ScratchKeepingOps ops;
    GuardedDeviceBackend device(ops);
    StatusOr<ServedModel> loaded =
        LoadServedModel(*rc, device, nullptr, /*leader=*/false, nullptr, [](const std::string&) {});
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    ASSERT_TRUE(loaded->weights_held.has_value());
    const EngineOptions eo = EngineOptionsFrom(*rc, rc->Int("context-length"));
    const int64_t hidden = loaded->model->config().hidden_size;
    StatusOr<std::unique_ptr<Engine>> engine = Internal("not made");
    MemoryCheck m{.device = "cuda",
                  .weights_planned = rc->memory().weights,
                  .kv_pool_planned = rc->memory().kv_pool_bytes,
                  .weights_held = loaded->weights_held};
    m.kv_pool_held = HeldGrowth(
        device.allocator(), [&] { engine = CreateEngine(std::move(loaded->model), nullptr, eo); });
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    EXPECT_TRUE(m.agrees()) << GetParam() << " " << kv << ": " << m.Describe();
    EXPECT_EQ(*m.weights_held, static_cast<int64_t>(rc->memory().weights)) << GetParam();
    EXPECT_GT(*m.kv_pool_held, 0);
    EXPECT_EQ(*m.kv_pool_held, static_cast<int64_t>(rc->memory().kv_pool_bytes))
        << GetParam() << " " << kv;
    // 1000 tokens in pages of 16: 63 pages.
    EXPECT_EQ(rc->memory().kv_pool_bytes,
              static_cast<uint64_t>(63 * 16 * rc->memory().kv_bytes_per_token));
    EXPECT_NE(m.Describe().find("as planned; KV pool"), std::string::npos) << m.Describe();
    // The largest step grows the workspace; the plan's activations, an estimate for the
    // resolved kernels, cover what the reference ops took.
    m.activations_planned = rc->memory().activations;
    m.largest_step_tokens = LargestStepTokens(eo);
    EXPECT_EQ(m.largest_step_tokens,
              std::min({rc->Int("chunked-prefill-size"), rc->Int("context-length") - 1,
                        int64_t{63 * 16 - 1}}));
    m.runtime_overhead_planned = rc->memory().runtime_overhead;
    StatusOr<std::optional<StepMemory>> grew =
        ProfileLargestStep(**engine, device.allocator(), ops, eo, 1);
    ASSERT_TRUE(grew.ok()) << grew.status().ToString();
    ASSERT_TRUE(grew->has_value());
    m.activations_held = (*grew)->activations;
    m.ops_scratch_held = (*grew)->ops_scratch;
    // The ops' scratch after the step: at least the step's hidden states, which every layer's
    // first projection reads.
    ASSERT_TRUE(m.ops_scratch_held.has_value());
    EXPECT_GE(*m.ops_scratch_held, m.largest_step_tokens * hidden * int64_t{4});
    EXPECT_TRUE(m.ops_scratch_within_plan()) << m.Describe();
    EXPECT_NE(m.Describe().find("; ops scratch " + std::to_string(*m.ops_scratch_held) +
                                " B held, runtime overhead plan"),
              std::string::npos)
        << m.Describe();
    EXPECT_GT(*m.activations_held, 0);
    EXPECT_TRUE(m.activations_within_plan()) << m.Describe();
    EXPECT_NE(m.Describe().find("activations " + std::to_string(*m.activations_held) +
                                " B held after the largest step (" +
                                std::to_string(m.largest_step_tokens) + " tokens)"),
              std::string::npos)
        << m.Describe();
    // A step no larger takes no more workspace: the next one merges the first one's blocks into
    // one of its most in use (Workspace), then the same again takes nothing. (A few hundred
    // bytes of the last step's outputs may or may not have been dropped yet by the engine's
    // thread when the generation's result arrives.)
    const int64_t blocks = device.workspace().blocks_allocated();
    EXPECT_LE(ProfileLargestStep(**engine, device.allocator(), ops, eo, 2)->value().activations,
              1024);
    EXPECT_LE(
        std::abs(ProfileLargestStep(**engine, device.allocator(), ops, eo, 3)->value().activations),
        1024);
    EXPECT_EQ(device.workspace().blocks_allocated(), blocks + 1);
    (*engine)->Stop();
  }
}

INSTANTIATE_TEST_SUITE_P(TinyFixtures, PlanAgainstDevice,
                         ::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32",
                                           "tiny_deepseek_v3"));

TEST(MemoryCheck, SaysByHowMuchAndWhichWayThePlanIsOff) {
  MemoryCheck m{.device = "cuda",
                .weights_planned = 1000,
                .kv_pool_planned = 4096,
                .weights_held = 1000,
                .kv_pool_held = 5120};
  EXPECT_FALSE(m.agrees());
  EXPECT_EQ(m.Describe(),
            "memory on cuda: weights 1000 B held, as planned; KV pool 5120 B held, plan 4096 B "
            "(1024 B more than planned)");
  m.kv_pool_held = 4096;
  m.weights_held = 990;
  EXPECT_FALSE(m.agrees());
  EXPECT_NE(m.Describe().find("weights 990 B held, plan 1000 B (10 B less than planned)"),
            std::string::npos)
      << m.Describe();
  EXPECT_EQ(m.ToJson()["weights_held_bytes"], 990);
  EXPECT_EQ(m.ToJson()["agrees"], false);
}

TEST(MemoryCheck, SaysWhenTheOpsScratchPassesTheRuntimeOverhead) {
  MemoryCheck m{.device = "cuda",
                .weights_planned = 1000,
                .kv_pool_planned = 4096,
                .weights_held = 1000,
                .kv_pool_held = 4096,
                .activations_planned = 800,
                .activations_held = 700,
                .largest_step_tokens = 16,
                .runtime_overhead_planned = 500,
                .ops_scratch_held = 600};
  EXPECT_TRUE(m.agrees());
  EXPECT_TRUE(m.activations_within_plan());
  EXPECT_FALSE(m.ops_scratch_within_plan());
  EXPECT_NE(m.Describe().find("activations 700 B held after the largest step (16 tokens), plan "
                              "800 B; ops scratch 600 B held, runtime overhead plan 500 B (100 B "
                              "more than planned)"),
            std::string::npos)
      << m.Describe();
  EXPECT_EQ(m.ToJson()["ops_scratch_held_bytes"], 600);
  EXPECT_EQ(m.ToJson()["runtime_overhead_planned_bytes"], 500);
  m.ops_scratch_held = 500;
  EXPECT_TRUE(m.ops_scratch_within_plan());
  m.ops_scratch_held.reset();
  EXPECT_TRUE(m.ops_scratch_within_plan());
  EXPECT_EQ(m.Describe().find("ops scratch"), std::string::npos) << m.Describe();
  EXPECT_TRUE(m.ToJson()["ops_scratch_held_bytes"].is_null());
}

TEST(MemoryCheck, OnTheCpuOnlyThePlanIsReported) {
  const MemoryCheck m{.device = "cpu", .weights_planned = 1000, .kv_pool_planned = 4096};
  EXPECT_TRUE(m.agrees());
  EXPECT_EQ(m.Describe(),
            "memory on cpu: weights 1000 B planned (mapped from the checkpoint); KV pool 4096 B "
            "planned (host memory, not counted)");
  EXPECT_TRUE(m.ToJson()["kv_pool_held_bytes"].is_null());
}

// An allocator with a budget, counting like a device's.
class BudgetAllocator final : public Allocator {
 public:
  explicit BudgetAllocator(size_t budget) : budget_(budget) {}
  Device device() const override { return Device::kCpu; }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    if (bytes > budget_ - held_)
      return ResourceExhausted("out of memory allocating " + std::to_string(bytes) + " bytes");
    held_ += bytes;
    return HostAllocator().Allocate(bytes);
  }
  void Zero(void* p, size_t bytes) override { HostAllocator().Zero(p, bytes); }
  std::optional<int64_t> held_bytes() const override { return static_cast<int64_t>(held_); }

 private:
  size_t budget_, held_ = 0;
};

TEST(MemoryCheck, HeldGrowthIsWhatTheCallTookAndNothingWhereUncounted) {
  BudgetAllocator device(1 << 20);
  std::shared_ptr<void> keep;
  EXPECT_EQ(HeldGrowth(device, [&] { keep = *device.Allocate(1234); }), 1234);
  EXPECT_EQ(HeldGrowth(HostAllocator(), [&] { keep = *HostAllocator().Allocate(64); }),
            std::nullopt);
}

// A pool larger than the device has is an error naming the pool, not an abort.
TEST(MemoryCheck, AKvPoolThatDoesNotFitIsAnError) {
  KvCacheSpec spec;
  spec.num_layers = 2;
  spec.latent_dim = 512;
  spec.rope_dim = 64;
  BudgetAllocator device(1 << 20);
  StatusOr<KvStorage> kv = KvStorage::Make(spec, 1024, 64, KvDtype::kBF16, device);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(kv.status().message().find("the KV pool (1024 pages of 64 tokens"), std::string::npos)
      << kv.status().message();
  EXPECT_NE(kv.status().message().find("out of memory allocating"), std::string::npos)
      << kv.status().message();
  EXPECT_TRUE(KvStorage::Make(spec, 4, 64, KvDtype::kBF16, device).ok());
}

}  // namespace
}  // namespace lucid::cli
