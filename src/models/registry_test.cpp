// Loading errors: unknown architectures, missing or mis-shaped tensors, unsupported dtypes. Each
// test builds a broken copy of a tiny fixture on the fly.
#include "models/registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_ops.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;
const CpuOps kOps;

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// A temporary copy of a fixture whose config or tensors a test may change.
class BrokenModel {
 public:
  explicit BrokenModel(const std::string& name) {
    dir_ =
        fs::path(::testing::TempDir()) / ("lucid_broken_" + name + "_" + std::to_string(getpid()) +
                                          "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(Fixture(name) + "/config.json", dir_ / "config.json");
    fs::copy_file(Fixture(name) + "/model.safetensors", dir_ / "model.safetensors");
  }
  ~BrokenModel() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

  void EditConfig(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = ReadJsonFile(dir() + "/config.json").value();
    edit(j);
    std::ofstream(dir() + "/config.json") << j.dump();
  }
  // Rewrites model.safetensors with `edit` applied to the list of tensors.
  void EditTensors(const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      auto f = SafetensorsFile::Open(dir() + "/model.safetensors").value();
      for (const auto& [name, info] : f->tensors())
        tensors.push_back({name, f->Get(name)->Clone()});
    }
    edit(tensors);
    ASSERT_TRUE(WriteSafetensors(dir() + "/model.safetensors", tensors).ok());
  }

 private:
  fs::path dir_;
};

TEST(RegistryTest, UnknownArchitectureListsSupportedOnes) {
  BrokenModel m("tiny_deepseek_v3");
  m.EditConfig([](nlohmann::json& j) { j["architectures"] = {"MistralForCausalLM"}; });
  auto r = LoadModel(m.dir(), kOps);
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("MistralForCausalLM"), std::string::npos) << msg;
  for (const auto& a : SupportedArchitectures())
    EXPECT_NE(msg.find(a.architecture), std::string::npos) << msg;
}

TEST(RegistryTest, EveryRowResolvesItsOwnFixture) {
  for (const char* name :
       {"tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3", "tiny_llama3", "tiny_qwen3"}) {
    auto c = LoadModelConfig(Fixture(name));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto a = FindArchitecture(*c);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ((*a)->sparse_attention, c->has_indexer) << name;
    EXPECT_EQ(KvSpecFor(*c).indexer_dim, c->has_indexer ? c->index_head_dim : 0);
  }
}

TEST(RegistryTest, MissingTensorIsNamed) {
  BrokenModel m("tiny_glm_moe_dsa");
  m.EditTensors([](auto& ts) {
    std::erase_if(ts,
                  [](auto& t) { return t.first == "model.layers.1.self_attn.indexer.wk.weight"; });
  });
  auto r = LoadModel(m.dir(), kOps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers.1.self_attn.indexer.wk.weight"),
            std::string::npos)
      << r.status().ToString();
}

TEST(RegistryTest, MisShapedTensorNamesTensorAndShapes) {
  BrokenModel m("tiny_deepseek_v3");
  m.EditTensors([](auto& ts) {
    for (auto& [name, t] : ts)
      if (name == "model.layers.2.mlp.experts.3.up_proj.weight")
        t = t.Reshape({t.size(1), t.size(0)});
  });
  auto r = LoadModel(m.dir(), kOps);
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("model.layers.2.mlp.experts.3.up_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST(RegistryTest, UnsupportedWeightDtypeIsRefusedByName) {
  BrokenModel m("tiny_deepseek_v3");
  m.EditTensors([](auto& ts) {
    for (auto& [name, t] : ts)
      if (name == "lm_head.weight") t = Tensor::Zeros(DType::kF16, t.shape());
  });
  auto r = LoadModel(m.dir(), kOps);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("lm_head.weight"), std::string::npos);
  EXPECT_NE(r.status().message().find("f16"), std::string::npos);
}

TEST(RegistryTest, TokenIdsOutOfRangeAreRejectedNotCrashed) {
  auto m = LoadModel(Fixture("tiny_deepseek_v3"), kOps);
  ASSERT_TRUE(m.ok());
  KvStorage kv((*m)->kv_spec(), 2, 64, KvDtype::kF32);
  const std::vector<int32_t> pages = {0};
  std::vector<int32_t> ids = {1, static_cast<int32_t>((*m)->config().vocab_size)};
  StepInput in;
  AddSequence(in, pages, 0, ids, ChunkRows::kLast);
  StepOutput out;
  Status s = (*m)->Forward(in, kv, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace lucid
