// Property test over model family x quantization x target x KV dtype x each backend flag
// (unset, or set to each of its values): every combination either resolves to a plan in which
// every chosen kernel declares support for exactly the resolved situation, or fails at
// resolution with a message; no explicit value is ever changed; every field has a provenance.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "config/kernel_selection.h"
#include "config/option_table.h"
#include "config/resolver.h"
#include "formats/model_config.h"

namespace lucid::config {
namespace {

using json = nlohmann::json;

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/" + name + "/config.json";
}

json Quantized(json c, const std::string& q) {
  c.erase("quantization_config");
  if (q == "fp8")
    c["quantization_config"] = {{"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}},
                                {"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"}};
  if (q == "fp8-ue8m0")
    c["quantization_config"] = {
        {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"scale_fmt", "ue8m0"}};
  if (q == "nvfp4")
    c["quantization_config"] = {{"quant_method", "modelopt"},
                                {"quant_algo", "NVFP4"},
                                {"ignore", {"lm_head", "model.layers.*.self_attn*"}}};
  return c;
}

struct Target {
  std::vector<std::pair<std::string, std::string>> flags;
};

TEST(ResolverPropertyTest, EveryCombinationResolvesHonestlyOrFails) {
  std::vector<ModelFacts> models;
  for (const char* m : {"GLM-5-NVFP4", "DeepSeek-V3.2-FP8", "DeepSeek-V3-FP8"}) {
    auto j = ReadJsonFile(Fixture(m));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    for (const char* q : {"bf16", "fp8", "fp8-ue8m0", "nvfp4"}) {
      auto f = BuildModelFacts(Quantized(*j, q), json(), nullptr, std::string(m) + "-" + q);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      models.push_back(std::move(f).value());
    }
  }
  const std::vector<Target> targets = {
      {{{"target", "cpu"}, {"cpu-memory", "2TiB"}}},
      {{{"target", "cuda:sm_90"}, {"gpu-memory", "141GB"}, {"gpu-count", "8"}, {"tp-size", "8"}}},
      {{{"target", "cuda:sm_100"}, {"gpu-memory", "180GiB"}, {"gpu-count", "8"}, {"tp-size", "8"}}},
      {{{"target", "cuda:sm_120"}, {"gpu-memory", "96GiB"}, {"gpu-count", "8"}, {"tp-size", "8"}}},
  };
  // Each backend flag unset (the first entry) or set to each of its values, one at a time.
  std::vector<std::pair<std::string, std::string>> backend_choices = {{"", ""}};
  for (const char* b :
       {"attention-backend", "nsa-prefill-backend", "nsa-decode-backend", "moe-runner-backend",
        "fp8-gemm-backend", "fp4-gemm-backend", "sampling-backend"})
    for (const std::string& v : FindOption(b)->allowed) backend_choices.push_back({b, v});

  int resolved = 0, refused = 0;
  for (const ModelFacts& model : models)
    for (const Target& target : targets)
      for (const char* kv : {"", "f32", "bf16", "fp8_e4m3"})
        for (const auto& [bflag, bvalue] : backend_choices) {
          ExplicitSettings s;
          for (const auto& [k, v] : target.flags) {
            ASSERT_TRUE(s.Set(k, v, Source::kCli, k).ok());
          }
          if (*kv) {
            ASSERT_TRUE(s.Set("kv-cache-dtype", kv, Source::kCli, "kv").ok());
          }
          if (!bflag.empty()) {
            ASSERT_TRUE(s.Set(bflag, bvalue, Source::kEnv, bflag).ok());
          }
          const std::string where =
              model.dir + " " + target.flags[0].second + " kv=" + kv + " " + bflag + "=" + bvalue;
          ResolveOptions o;
          o.model = &model;
          StatusOr<ResolvedConfig> r = Resolve(s, o);
          if (!r.ok()) {
            ++refused;
            EXPECT_FALSE(r.status().message().empty()) << where;
            continue;
          }
          ++resolved;
          // Every field: a provenance; explicit values unchanged and cited as the user's.
          ASSERT_EQ(r->data().fields.size(), static_cast<size_t>(std::count_if(
                                                 Options().begin(), Options().end(),
                                                 [](const OptionSpec& o) { return o.in_plan(); })));
          for (const ResolvedField& f : r->data().fields) {
            EXPECT_FALSE(f.Provenance().empty()) << where << " " << f.name;
            if (f.source == Source::kRule) {
              EXPECT_FALSE(f.reason.empty()) << where << " " << f.name;
            }
            const ExplicitValue* e = s.Get(f.name);
            if (e != nullptr && !e->value.is_null()) {
              EXPECT_EQ(f.value, e->value) << where << " " << f.name;
              EXPECT_EQ(f.source, e->source) << where << " " << f.name;
            }
          }
          // Every chosen kernel supports exactly the resolved situation.
          const std::string device = r->Value("device").get<std::string>();
          for (const KernelChoice& k : r->kernels()) {
            ASSERT_FALSE(k.situations.empty());
            EXPECT_FALSE(RefusalByName(k.kernel, k.situations).has_value())
                << where << " " << k.kernel;
            for (const Situation& sit : k.situations) {
              EXPECT_EQ(DeviceName(sit.device), device) << where;
              EXPECT_EQ(KvDtypeName(sit.kv_dtype), r->Value("kv-cache-dtype")) << where;
              EXPECT_EQ(sit.page_size, r->Value("page-size")) << where;
              const std::string dt = r->Value("dtype").get<std::string>();
              EXPECT_EQ(sit.compute_dtype, dt == "float32"   ? DType::kF32
                                           : dt == "float16" ? DType::kF16
                                                             : DType::kBF16)
                  << where;
              EXPECT_EQ(sit.graph_capture,
                        device == "cuda" && r->Value("disable-cuda-graph") == false);
            }
            if (!k.flag.empty() && s.Get(k.flag) != nullptr) {
              EXPECT_EQ(k.kernel, s.Get(k.flag)->value) << where;
            }
          }
        }
  // Both outcomes occur, so the property is not vacuous.
  EXPECT_GT(resolved, 100);
  EXPECT_GT(refused, 100);
  std::printf("resolved %d, refused %d\n", resolved, refused);
}

}  // namespace
}  // namespace lucid::config
