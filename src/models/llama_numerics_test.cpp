// `--nan-check layers` for the Llama family: a copy of tiny_llama3 whose layer-1 down_proj holds a
// NaN makes the model name layer 1's MLP as the first op with a non-finite output, for every
// sequence of the step; the unpoisoned checkpoint records no site, and checking off records none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/cpu/cpu_ops.h"
#include "models/registry.h"
#include "models/step_test_util.h"

namespace lucid {
namespace {

const CpuOps kRef;
namespace fs = std::filesystem;

std::string Fixture() {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_llama3";
}

// A copy of the fixture with element 0 of `tensor` set to NaN, patched in the safetensors bytes
// (8-byte header length, JSON header with data_offsets, then the data).
std::string PoisonedCopy(const std::string& tensor) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("llama_nan_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json"})
    fs::copy_file(fs::path(Fixture()) / f, dir / f, fs::copy_options::overwrite_existing);
  std::ifstream in(fs::path(Fixture()) / "model.safetensors", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const auto& t = header.at(tensor);
  const size_t at = 8 + n + t.at("data_offsets")[0].get<size_t>();
  if (t.at("dtype") == "F32") {
    const float nan = std::nanf("");
    std::memcpy(&bytes[at], &nan, 4);
  } else {  // BF16: the high half of an f32 NaN
    const uint16_t nan = 0x7FC0;
    std::memcpy(&bytes[at], &nan, 2);
  }
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  return dir.string();
}

std::vector<std::optional<NonFiniteSite>> RunTwoSequences(Model& m, Tensor* logits) {
  const std::vector<int32_t> a = {1, 17, 42, 99, 5, 23, 61}, b = {3, 88, 12, 7};
  KvStorage kv(m.kv_spec(), 8, 8, KvDtype::kF32);
  TestPages pages(8);
  SequenceKv sa = pages.New(7), sb = pages.New(4);
  const TestChunk batch[] = {{&sa, a}, {&sb, b}};
  Status s = ForwardChunks(m, kv, batch, ChunkRows::kAll, logits);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m.LastNonFiniteSites();
}

TEST(LlamaNumericsTest, PoisonedLayerIsNamedPerSequence) {
  auto m = LoadModel(PoisonedCopy("model.layers.1.mlp.down_proj.weight"), kRef);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->SetNumericsCheck(true));
  Tensor logits;
  auto sites = RunTwoSequences(**m, &logits);
  ASSERT_EQ(sites.size(), 2u);
  for (const auto& site : sites) {
    ASSERT_TRUE(site.has_value());
    EXPECT_EQ(site->layer, 1);
    EXPECT_EQ(site->op, "L1.mlp");
  }
  bool any_nan = false;
  for (int64_t i = 0; i < logits.numel(); ++i) any_nan |= !std::isfinite(logits.data<float>()[i]);
  EXPECT_TRUE(any_nan) << "the poison must reach the logits for the site to matter";
  ASSERT_TRUE((*m)->SetNumericsCheck(false));
  RunTwoSequences(**m, &logits);
  EXPECT_TRUE((*m)->LastNonFiniteSites().empty());
}

TEST(LlamaNumericsTest, CleanCheckpointRecordsNoSite) {
  auto m = LoadModel(Fixture(), kRef);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->SetNumericsCheck(true));
  Tensor logits;
  auto sites = RunTwoSequences(**m, &logits);
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_FALSE(sites[0].has_value());
  EXPECT_FALSE(sites[1].has_value());
}

}  // namespace
}  // namespace lucid
