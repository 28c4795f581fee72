// The model on a Backend (backends/backend.h): activations from the backend's workspace (a steady
// step takes no memory from the allocator, and reused, dirty memory gives the same bits as fresh
// memory), weights through UploadWeight, the KV pool from the backend's allocator.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_ops.h"
#include "models/registry.h"
#include "models/step_test_util.h"

namespace lucid {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab, int32_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 7 + salt) % vocab));
  return t;
}

// Prefill of `tokens` on a fresh KV pool from the model's allocator; every row's logits.
std::vector<float> Prefill(Model& m, const std::vector<int32_t>& tokens) {
  KvStorage kv(m.kv_spec(), 8, 16, KvDtype::kF32, m.kv_allocator());
  SequenceKv seq = TestPages(16).New(static_cast<int64_t>(tokens.size()));
  Tensor logits;
  Status s = ForwardChunk(m, kv, seq, tokens, ChunkRows::kAll, &logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

class BackendModel : public ::testing::TestWithParam<const char*> {};

TEST_P(BackendModel, ReusedWorkspaceGivesTheBitsOfFreshMemoryWithoutAllocating) {
  CpuBackend backend(std::make_unique<CpuOps>(), "reference");
  auto m = LoadModel(Fixture(GetParam()), backend);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(&(*m)->kv_allocator(), &backend.allocator());
  const int64_t V = (*m)->config().vocab_size;
  const std::vector<int32_t> a = Tokens(21, V, 3), b = Tokens(9, V, 11);
  const std::vector<float> first = Prefill(**m, a);  // fresh workspace memory
  const int64_t blocks = backend.workspace().blocks_allocated();
  EXPECT_GE(blocks, 1);
  Prefill(**m, b);  // a smaller step writes other values over the same memory
  const std::vector<float> again = Prefill(**m, a);
  const std::vector<float> third = Prefill(**m, a);
  ASSERT_EQ(first.size(), again.size());
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
      << "a step depends on what its workspace held before";
  EXPECT_EQ(std::memcmp(first.data(), third.data(), first.size() * sizeof(float)), 0);
  // The first steps may merge the workspace's blocks once; then steps of a seen size take none.
  const int64_t settled = backend.workspace().blocks_allocated();
  EXPECT_LE(settled, blocks + 1);
  Prefill(**m, b);
  Prefill(**m, a);
  EXPECT_EQ(backend.workspace().blocks_allocated(), settled);
  // The same through LoadModel with borrowed Ops (a CpuBackend of the model's own).
  const CpuOps ops;
  auto borrowed = LoadModel(Fixture(GetParam()), ops);
  ASSERT_TRUE(borrowed.ok());
  const std::vector<float> other = Prefill(**borrowed, a);
  EXPECT_EQ(std::memcmp(first.data(), other.data(), first.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, BackendModel,
                         ::testing::Values("tiny_deepseek_v3", "tiny_deepseek_v32",
                                           "tiny_glm_moe_dsa"));

// A backend whose device refuses one weight: the load fails with its Status, naming the weight.
class RefusingBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu:refusing"; }
  const Ops& ops() const override { return ops_; }
  Allocator& allocator() override { return HostAllocator(); }
  StatusOr<Tensor> UploadWeight(const Tensor& host) override {
    ++uploads;
    if (uploads == 4) return ResourceExhausted("device full");
    return host;
  }
  Workspace& workspace() override { return ws_; }
  StatusOr<Tensor> ReadableOnHost(const Tensor& t) override { return t; }
  int uploads = 0;

 private:
  CpuOps ops_;
  Workspace ws_{HostAllocator()};
};

TEST(BackendModelLoad, EveryWeightGoesThroughUploadAndARefusalIsTheLoadsStatus) {
  RefusingBackend b;
  auto m = LoadModel(Fixture("tiny_deepseek_v32"), b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("device full"), std::string::npos) << m.status().ToString();
  EXPECT_GT(b.uploads, 3);
}

}  // namespace
}  // namespace lucid
