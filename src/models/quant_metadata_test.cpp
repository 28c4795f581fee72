// Loading a quantized checkpoint whose metadata and tensors disagree fails with an error that
// names the tensor (or pattern / method) and what was expected: missing scale, wrong scale shape
// or dtype, unknown quant_algo / quant_method, an exclude list naming no tensor, a tensor that is
// quantized although the metadata excludes it, non-power-of-two scales under scale_fmt ue8m0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_ops.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "models/registry.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const CpuOps kOps;

// A writable copy of a committed round-trip checkpoint, as one shard without an index, with
// `edit` applied to its tensors.
class Scratch {
 public:
  explicit Scratch(const std::string& scheme)
      : dir_(fs::temp_directory_path() / ("lucid_qm_" + scheme + std::to_string(getpid()))) {
    const fs::path src =
        fs::path(LUCID_SOURCE_DIR) / "tests/fixtures/quant" / ("roundtrip_" + scheme);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "hf_quant_config.json"})
      if (fs::exists(src / f)) fs::copy_file(src / f, dir_ / f);
    auto ck = Checkpoint::Open(src.string());
    LUCID_CHECK(ck.ok(), ck.status().ToString());
    for (const std::string& n : ck->Names()) tensors_.push_back({n, ck->Get(n).value()});
  }
  ~Scratch() { fs::remove_all(dir_); }

  void Drop(const std::string& name) {
    std::erase_if(tensors_, [&](const auto& t) { return t.first == name; });
  }
  void Replace(const std::string& name, Tensor t) {
    for (auto& x : tensors_)
      if (x.first == name) x.second = std::move(t);
  }
  void EditJson(const std::string& file, const std::function<void(json&)>& f) {
    json j = ReadJsonFile((dir_ / file).string()).value();
    f(j);
    std::ofstream(dir_ / file) << j.dump(2);
  }
  // Writes the shard and loads the model; returns the load status.
  Status Load() {
    Status s = WriteSafetensors((dir_ / "model.safetensors").string(), tensors_);
    if (!s.ok()) return s;
    auto m = LoadModel(dir_.string(), kOps);
    return m.ok() ? OkStatus() : m.status();
  }

 private:
  fs::path dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

void ExpectError(const Status& s, StatusCode code, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const char* p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << p << " in " << s.ToString();
}

const std::string kExpert = "model.layers.1.mlp.experts.2.up_proj";

TEST(QuantMetadataTest, IntactCopiesLoad) {
  EXPECT_TRUE(Scratch("nvfp4").Load().ok());
  EXPECT_TRUE(Scratch("fp8").Load().ok());
}

TEST(QuantMetadataTest, MissingScale) {
  Scratch s("nvfp4");
  s.Drop(kExpert + ".weight_scale");
  ExpectError(
      s.Load(), StatusCode::kInvalidArgument,
      {"model.layers.1.mlp.experts.2.up_proj.weight_scale", "f8_e4m3 [32, 4]", "no such tensor"});
  Scratch f("fp8");
  f.Drop(kExpert + ".weight_scale_inv");
  ExpectError(f.Load(), StatusCode::kInvalidArgument,
              {"experts.2.up_proj.weight_scale_inv", "[1, 1]"});
}

TEST(QuantMetadataTest, WrongScaleShapeOrDtype) {
  Scratch s("nvfp4");
  s.Replace(kExpert + ".weight_scale", Tensor::Zeros(DType::kF8E4M3, {32, 3}));
  ExpectError(
      s.Load(), StatusCode::kInvalidArgument,
      {"experts.2.up_proj.weight_scale", "expects f8_e4m3 [32, 4]", "found f8_e4m3 [32, 3]"});
  Scratch t("nvfp4");
  t.Replace(kExpert + ".weight_scale_2", Tensor::Zeros(DType::kF32, {2}));
  ExpectError(t.Load(), StatusCode::kInvalidArgument, {"weight_scale_2", "f32 scalar"});
  Scratch f("fp8");
  f.Replace(kExpert + ".weight_scale_inv", Tensor::Zeros(DType::kBF16, {1, 1}));
  ExpectError(f.Load(), StatusCode::kInvalidArgument, {"weight_scale_inv", "found bf16"});
}

TEST(QuantMetadataTest, UnknownQuantAlgoAndMethod) {
  Scratch s("nvfp4");
  s.EditJson("hf_quant_config.json", [](json& j) { j["quantization"]["quant_algo"] = "W4A8_AWQ"; });
  ExpectError(s.Load(), StatusCode::kUnimplemented, {"W4A8_AWQ", "hf_quant_config.json"});
  Scratch f("fp8");
  f.EditJson("config.json",
             [](json& j) { j["quantization_config"]["quant_method"] = "bitsandbytes"; });
  ExpectError(f.Load(), StatusCode::kUnimplemented, {"bitsandbytes"});
}

TEST(QuantMetadataTest, ExcludeListNamingNoTensor) {
  Scratch s("nvfp4");
  s.EditJson("hf_quant_config.json", [](json& j) {
    j["quantization"]["exclude_modules"].push_back("model.layers.9.mlp.gate");
  });
  ExpectError(s.Load(), StatusCode::kInvalidArgument,
              {"model.layers.9.mlp.gate", "names no tensor"});
}

TEST(QuantMetadataTest, QuantizedTensorThatTheMetadataExcludes) {
  Scratch s("nvfp4");
  s.EditJson("hf_quant_config.json", [](json& j) {
    j["quantization"]["exclude_modules"].push_back("model.layers.1.mlp.experts.2.*");
  });
  ExpectError(s.Load(), StatusCode::kInvalidArgument,
              {"model.layers.1.mlp.experts.2", "excluded by \"model.layers.1.mlp.experts.2.*\""});
}

TEST(QuantMetadataTest, HighPrecisionTensorWhereTheMetadataExpectsNvfp4) {
  Scratch s("nvfp4");
  s.Drop(kExpert + ".weight_scale");
  s.Drop(kExpert + ".weight_scale_2");
  s.Replace(kExpert + ".weight", Tensor::Zeros(DType::kBF16, {32, 64}));
  ExpectError(s.Load(), StatusCode::kInvalidArgument,
              {kExpert.c_str(), "u8 [32, 32]", "found bf16 [32, 64]"});
}

TEST(QuantMetadataTest, Ue8m0ScalesMustBePowersOfTwo) {
  Scratch f("fp8");  // written with --fp8-scale-fmt float
  f.EditJson("config.json", [](json& j) { j["quantization_config"]["scale_fmt"] = "ue8m0"; });
  ExpectError(f.Load(), StatusCode::kInvalidArgument, {"weight_scale_inv", "powers of two"});
}

}  // namespace
}  // namespace lucid
