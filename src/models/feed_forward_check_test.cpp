// Model::CheckFeedForwardWeights: a checkpoint with NaN or Inf in one routed expert, the shared
// expert or a dense MLP is refused, naming the layer and the expert, through the reference and the
// fast kernels; the unpoisoned fixtures pass. The poison is written into a copy of the tiny
// fixture's safetensors (the oracle: which tensor was poisoned), the kind of weights the warm-up
// generation may never route to.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "formats/safetensors.h"
#include "models/registry.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// A copy of tiny_glm_moe_dsa whose tensor `name` has `value` in its element `at`.
class PoisonedModel {
 public:
  PoisonedModel(const std::string& name, float value, int64_t at) {
    dir_ = fs::path(::testing::TempDir()) / ("lucid_ffn_check_" + std::to_string(getpid()) + "_" +
                                             std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string src = Fixture("tiny_glm_moe_dsa");
    fs::copy_file(src + "/config.json", dir_ / "config.json");
    auto f = SafetensorsFile::Open(src + "/model.safetensors").value();
    std::vector<std::pair<std::string, Tensor>> tensors;
    bool found = false;
    for (const auto& [n, info] : f->tensors()) {
      Tensor t = f->Get(n)->Clone();
      if (n == name) {
        found = true;
        EXPECT_EQ(t.dtype(), DType::kBF16) << n;
        uint32_t bits;
        std::memcpy(&bits, &value, 4);
        t.data<uint16_t>()[at] = static_cast<uint16_t>(bits >> 16);  // NaN and Inf survive
      }
      tensors.push_back({n, std::move(t)});
    }
    EXPECT_TRUE(found) << name;
    EXPECT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), tensors).ok());
  }
  ~PoisonedModel() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

struct Case {
  const char* tensor;
  int64_t at;
  const char* names;  // what the refusal must say
};

class FeedForwardCheckTest : public ::testing::TestWithParam<Case> {};

TEST_P(FeedForwardCheckTest, PoisonedBlockIsRefusedByName) {
  const CpuOps reference;
  const CpuFastOps fast;
  for (float poison :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    PoisonedModel m(GetParam().tensor, poison, GetParam().at);
    for (const Ops* ops : {static_cast<const Ops*>(&reference), static_cast<const Ops*>(&fast)}) {
      SCOPED_TRACE(std::string(ops->name()) + " poison " + std::to_string(poison));
      auto model = LoadModel(m.dir(), *ops);
      ASSERT_TRUE(model.ok()) << model.status().message();  // loading reads no values
      Status s = (*model)->CheckFeedForwardWeights();
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(GetParam().names), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s.message();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Blocks, FeedForwardCheckTest,
    ::testing::Values(
        // Last routed expert of the last layer, in the middle of its down projection.
        Case{"model.layers.2.mlp.experts.7.down_proj.weight", 64 * 32 / 2 + 3,
             "layer 2 routed expert 7:"},
        Case{"model.layers.1.mlp.experts.5.gate_proj.weight", 0, "layer 1 routed expert 5:"},
        Case{"model.layers.1.mlp.shared_experts.up_proj.weight", 100, "layer 1 shared expert:"},
        Case{"model.layers.0.mlp.down_proj.weight", 17, "layer 0 dense MLP:"}));

TEST(FeedForwardCheckCleanTest, TheFixturesPass) {
  const CpuOps reference;
  const CpuFastOps fast;
  for (const char* name : {"tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3"})
    for (const Ops* ops : {static_cast<const Ops*>(&reference), static_cast<const Ops*>(&fast)}) {
      auto model = LoadModel(Fixture(name), *ops);
      ASSERT_TRUE(model.ok()) << name << ": " << model.status().message();
      Status s = (*model)->CheckFeedForwardWeights();
      EXPECT_TRUE(s.ok()) << name << " " << ops->name() << ": " << s.message();
    }
}

}  // namespace
}  // namespace lucid
