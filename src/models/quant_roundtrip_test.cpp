// Round trip of `lucid quantize`: re-quantizing the tiny DeepSeek-V3 fixture reproduces the
// committed checkpoints (tests/fixtures/quant/roundtrip_*) file for file, and lucid's own
// dequantization (DequantizeRow) of every weight equals, bit for bit, the Python reference
// dequantizer's (tools/reference/quant/quant_ref.py; its per-tensor FNV-1a hashes of the f32
// bytes are committed as roundtrip_*.dequant.json, so no Python is needed here).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/cpu/cpu_ops.h"
#include "formats/model_config.h"
#include "formats/quantize_checkpoint.h"
#include "models/deepseek_v3_weights.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = LUCID_SOURCE_DIR;

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
  const uint8_t* b = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

std::vector<const Weight*> AllWeights(const DeepseekV3Weights& w) {
  std::vector<const Weight*> out = {&w.embed, &w.lm_head};
  auto mlp = [&](const MlpWeights& m) {
    for (const Weight* x : {&m.gate, &m.up, &m.down}) out.push_back(x);
  };
  for (const LayerWeights& L : w.layers) {
    for (const Weight* x : {&L.attn.q_a, &L.attn.q_b, &L.attn.q_proj, &L.attn.kv_a, &L.attn.kv_b,
                            &L.attn.o, &L.indexer.wq_b, &L.indexer.wk, &L.indexer.weights_proj})
      if (x->valid()) out.push_back(x);
    if (!L.is_moe) {
      mlp(L.dense);
      continue;
    }
    out.push_back(&L.moe.router);
    for (const ExpertWeights& e : L.moe.experts)
      for (const Weight* x : {&e.gate, &e.up, &e.down}) out.push_back(x);
    mlp(L.moe.shared);
  }
  return out;
}

class RoundTripTest : public ::testing::TestWithParam<const char*> {};

QuantizeOptions OptionsFor(const std::string& s) {
  QuantizeOptions o;
  o.scheme = s == "nvfp4" ? QuantScheme::kNvfp4 : QuantScheme::kFp8Block;
  o.fp8_float_scales = true;  // the committed fp8 round trip uses f32 scales (V3.2 fixture: ue8m0)
  return o;
}

TEST_P(RoundTripTest, RequantizingReproducesTheCommittedCheckpointFileForFile) {
  const std::string scheme = GetParam();
  const fs::path want = kRoot + "/tests/fixtures/quant/roundtrip_" + scheme;
  const fs::path got =
      fs::temp_directory_path() / ("lucid_rt_" + scheme + std::to_string(getpid()));
  fs::remove_all(got);
  Status s = QuantizeCheckpoint(kRoot + "/tests/fixtures/models/tiny_deepseek_v3", got.string(),
                                OptionsFor(scheme));
  ASSERT_TRUE(s.ok()) << s.ToString();
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(want)) {
    ASSERT_TRUE(fs::exists(got / e.path().filename())) << e.path();
    EXPECT_EQ(ReadAll(e.path()), ReadAll(got / e.path().filename())) << e.path().filename();
    ++files;
  }
  EXPECT_EQ(files, static_cast<size_t>(std::distance(fs::directory_iterator(got), {})));
  fs::remove_all(got);
}

TEST_P(RoundTripTest, LucidDequantizationEqualsThePythonReferenceBitForBit) {
  const std::string scheme = GetParam();
  const std::string dir = kRoot + "/tests/fixtures/quant/roundtrip_" + scheme;
  auto ref = ReadJsonFile(kRoot + "/tests/fixtures/quant/roundtrip_" + scheme + ".dequant.json");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto cfg = LoadModelConfig(dir);
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(cfg.ok() && ck.ok());
  auto w = LoadDeepseekV3Weights(*cfg, *ck);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  size_t checked = 0, packed = 0;
  for (const Weight* x : AllWeights(*w)) {
    const auto& entry = (*ref)["tensors"][x->name];
    ASSERT_TRUE(entry.is_object()) << x->name << " missing from the Python reference";
    std::vector<float> row(x->cols);
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t r = 0; r < x->rows; ++r) {
      DequantizeRow(*x, r, row.data());
      h = Fnv1a(row.data(), row.size() * sizeof(float), h);
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    EXPECT_EQ(entry["fnv1a64_f32"].get<std::string>(), hex) << x->name;
    ++checked;
    packed += x->format == WeightFormat::kNvfp4 || x->format == WeightFormat::kFp8Block;
  }
  EXPECT_EQ(checked, (*ref)["tensors"].size());
  EXPECT_GT(packed, 60u);
  std::printf("  %s: %zu weights (%zu packed) equal the Python reference bit for bit\n",
              scheme.c_str(), checked, packed);
}

INSTANTIATE_TEST_SUITE_P(Schemes, RoundTripTest, ::testing::Values("nvfp4", "fp8"));

}  // namespace
}  // namespace lucid
