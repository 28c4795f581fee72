// The planner's quantization metadata is the engine's: model_facts reads it with
// formats/quant_config.h, so it accepts what the engine loads (MIXED_PRECISION), refuses what the
// engine refuses with the same message, and gives each module the format the engine's
// QuantConfig::SchemeFor gives it.
#include "config/model_facts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/quant_config.h"
#include "formats/safetensors.h"

namespace lucid::config {
namespace {

using json = nlohmann::json;

json ReadJson(const std::string& rel) {
  std::ifstream in(std::string(LUCID_SOURCE_DIR) + "/" + rel);
  return json::parse(in);
}
const char* kGlm = "tests/fixtures/configs/GLM-5-NVFP4/";

WeightFormat Expected(const QuantConfig& q, const TensorEntry& t) {
  switch (q.SchemeFor(t.name)) {
    case QuantScheme::kNvfp4:
      return WeightFormat::kNvfp4;
    case QuantScheme::kFp8Block:
      return WeightFormat::kFp8Block;
    case QuantScheme::kNone:
      break;
  }
  return WeightFormat::kBF16;
}

// Every quantizable linear of the inventory: the engine's scheme for it. (lm_head and the
// indexer's weights_proj are never quantized by the engine's loader either: the model keeps them
// in high precision; the router is not a linear.)
void ExpectFormatsAsTheEngine(const ModelFacts& f, const QuantConfig& q, int* nvfp4, int* plain) {
  for (const TensorEntry& t : f.tensors) {
    if (!t.linear || t.name == "lm_head" || t.name.find("weights_proj") != std::string::npos)
      continue;
    EXPECT_EQ(t.format, Expected(q, t)) << t.name;
    (t.format == WeightFormat::kNvfp4 ? *nvfp4 : *plain) += 1;
  }
}

TEST(ModelFactsQuantTest, MixedPrecisionIsPlannedAsTheEngineLoadsIt) {
  const json config = ReadJson(std::string(kGlm) + "config.json");
  json hf = ReadJson(std::string(kGlm) + "hf_quant_config.json");
  hf["quantization"]["quant_algo"] = "MIXED_PRECISION";
  hf["quantization"]["quantized_layers"] = {
      {"model.layers.3.mlp.experts.0.gate_proj", {{"quant_algo", "NVFP4"}}},
      {"model.layers.3.mlp.experts.0.up_proj", {{"quant_algo", "NVFP4"}}},
      {"model.layers.0.self_attn.o_proj", {{"quant_algo", "NVFP4"}}}};
  auto q = ParseQuantConfig(&hf, config);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto f = BuildModelFacts(config, hf, nullptr, "");
  ASSERT_TRUE(f.ok()) << f.status().ToString();  // the planner used to refuse MIXED_PRECISION
  EXPECT_EQ(f->quant_method, "modelopt");
  EXPECT_EQ(f->quant_algo, "MIXED_PRECISION");
  int nvfp4 = 0, plain = 0;
  ExpectFormatsAsTheEngine(*f, *q, &nvfp4, &plain);
  // Exactly the listed layers the exclude list leaves quantized (the fixture excludes attention).
  int listed = 0;
  for (const auto& [module, spec] : hf["quantization"]["quantized_layers"].items())
    listed += q->SchemeFor(module) == QuantScheme::kNvfp4;
  EXPECT_EQ(listed, 2);
  EXPECT_EQ(nvfp4, listed);
  EXPECT_GT(plain, 100);
}

TEST(ModelFactsQuantTest, Nvfp4AndFp8FormatsAreTheEngines) {
  const json config = ReadJson(std::string(kGlm) + "config.json");
  const json hf = ReadJson(std::string(kGlm) + "hf_quant_config.json");
  auto q = ParseQuantConfig(&hf, config);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto f = BuildModelFacts(config, hf, nullptr, "");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  int nvfp4 = 0, plain = 0;
  ExpectFormatsAsTheEngine(*f, *q, &nvfp4, &plain);
  EXPECT_GT(nvfp4, 1000);  // the routed experts at least
  // FP8 block with non-default blocks (the engine takes any) and an exclusion list.
  json fp8 = config;
  fp8["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"weight_block_size", {64, 128}},
                                {"modules_to_not_convert", {"model.layers.0.self_attn.o_proj"}}};
  auto q8 = ParseQuantConfig(nullptr, fp8);
  ASSERT_TRUE(q8.ok()) << q8.status().ToString();
  auto f8 = BuildModelFacts(fp8, json(), nullptr, "");
  ASSERT_TRUE(f8.ok()) << f8.status().ToString();
  for (const TensorEntry& t : f8->tensors) {
    if (!t.linear || t.name == "lm_head" || t.name.find("weights_proj") != std::string::npos)
      continue;
    const WeightFormat want = q8->SchemeFor(t.name) == QuantScheme::kFp8Block
                                  ? WeightFormat::kFp8Block
                                  : WeightFormat::kBF16;
    EXPECT_EQ(t.format, want) << t.name;
    if (t.name == "model.layers.0.self_attn.o_proj") {
      EXPECT_EQ(t.format, WeightFormat::kBF16);
      EXPECT_EQ(t.bytes, uint64_t{2} * f8->config.hidden_size * f8->config.num_attention_heads *
                             f8->config.v_head_dim);
    }
  }
}

TEST(ModelFactsQuantTest, RefusesWhatTheEngineRefusesWithTheSameMessage) {
  const json config = ReadJson(std::string(kGlm) + "config.json");
  json hf = ReadJson(std::string(kGlm) + "hf_quant_config.json");
  hf["quantization"]["quant_algo"] = "W4A8_AWQ";
  auto q = ParseQuantConfig(&hf, config);
  ASSERT_FALSE(q.ok());
  auto f = BuildModelFacts(config, hf, nullptr, "");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), q.status().code());
  EXPECT_EQ(f.status().message(), q.status().message());
}

}  // namespace
}  // namespace lucid::config

namespace lucid::config {
namespace {

// A DeepSeek-family GGUF (tools/reference/gguf/quantize_tiny_deepseek.py: routed experts Q4_0 /
// Q4_1, attn_v_b Q8_0, attn_k_b F16, the rest F32): the stacked expert tensors are the experts'
// format, every other linear its own, and the algorithm lists the file's linear types.
TEST(ModelFactsGgufTest, StackedExpertsAreExpertLinears) {
  auto f = LoadModelFacts(std::string(LUCID_SOURCE_DIR) +
                          "/tests/fixtures/gguf/tiny_deepseek_v3.quant.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->config.model_type, "deepseek_v3");
  EXPECT_EQ(f->quant_method, "gguf");
  ASSERT_TRUE(f->expert_format.has_value());
  EXPECT_EQ(*f->expert_format, WeightFormat::kGgml);
  int64_t experts = 0;
  for (const TensorEntry& t : f->tensors) experts += t.expert;
  EXPECT_EQ(experts, 2 * 3);  // layers 1 and 2: gate, up, down
  for (const char* type : {"Q4_0", "Q4_1", "Q8_0", "F16", "F32"})
    EXPECT_NE(f->quant_algo.find(type), std::string::npos) << f->quant_algo;
}

// The FP8 scale storage comes from the safetensors header of the scale tensors (F32 or F8_E8M0),
// independently of scale_fmt.
TEST(ModelFactsQuantTest, Fp8ScaleStorageIsReadFromTheHeaders) {
  const json config = ReadJson("tests/fixtures/configs/DeepSeek-V3-FP8/config.json");
  for (DType scale_dtype : {DType::kUE8M0, DType::kF32}) {
    const std::filesystem::path dir =
        std::filesystem::path(testing::TempDir()) /
        ("lucid_fp8_scales_" + std::to_string(getpid()) + "_" + DTypeName(scale_dtype));
    std::filesystem::create_directories(dir);
    const std::string m = "model.layers.0.self_attn.q_a_proj";
    ASSERT_TRUE(WriteSafetensors((dir / "model.safetensors").string(),
                                 {{m + ".weight", Tensor::Zeros(DType::kF8E4M3, {256, 256})},
                                  {m + ".weight_scale_inv", Tensor::Zeros(scale_dtype, {2, 2})}})
                    .ok());
    auto ck = Checkpoint::Open(dir.string());
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    auto f = BuildModelFacts(config, json(), &*ck, dir.string());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->fp8_scales_stored_ue8m0, scale_dtype == DType::kUE8M0) << DTypeName(scale_dtype);
    EXPECT_FALSE(f->ue8m0_scales);  // no scale_fmt in DeepSeek-V3's config
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace lucid::config
