// Quantized checkpoints and the quantized KV cache against transformers goldens
// (tests/fixtures/quant/golden, written by tools/reference/quant/make_quant_fixtures.py from
// weights dequantized by the Python reference, never by lucid), plus the packed-weight contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_ops.h"
#include "formats/safetensors.h"
#include "models/deepseek_v3_weights.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

const CpuOps kOps;
const std::string kQuant = std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/quant/";

struct Golden {
  std::vector<int32_t> prompt, continuation;
  Tensor logits;
};

Golden LoadGolden(const std::string& name) {
  auto f = SafetensorsFile::Open(kQuant + "golden/" + name + ".safetensors");
  LUCID_CHECK(f.ok(), f.status().ToString());
  auto ids = [&](const char* t) {
    Tensor x = (*f)->Get(t).value();
    std::vector<int32_t> v;
    for (int64_t i = 0; i < x.numel(); ++i) v.push_back(static_cast<int32_t>(x.data<int64_t>()[i]));
    return v;
  };
  return Golden{ids("prompt_ids"), ids("continuation"), (*f)->Get("logits").value()};
}

double RelErr(const Tensor& a, const Tensor& b) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    e = std::max(e, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    m = std::max(m, double(std::abs(b.data<float>()[i])));
  }
  return e / m;
}

struct Case {
  const char* model_dir;  // relative to the repository
  const char* golden;
  KvDtype kv;
  double tol;  // max abs logit error / max |logit|
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) { return i.param.golden; }

class QuantGoldenTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantGoldenTest, PromptLogitsAndGreedyContinuationMatchTransformers) {
  const Case& c = GetParam();
  Golden g = LoadGolden(c.golden);
  auto m = LoadModel(std::string(LUCID_SOURCE_DIR) + "/" + c.model_dir, kOps);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Tensor logits;
  auto out =
      GreedyGenerate(**m, g.prompt, static_cast<int64_t>(g.continuation.size()), &logits, 16, c.kv);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(logits.numel(), g.logits.numel());
  const double err = RelErr(logits, g.logits);
  std::printf("  %s: prompt logits max abs err / max|logit| = %.3g (tolerance %.0e)\n", c.golden,
              err, c.tol);
  EXPECT_LE(err, c.tol);
  EXPECT_EQ(*out, g.continuation);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, QuantGoldenTest,
    ::testing::Values(
        Case{"tests/fixtures/quant/tiny_glm_moe_dsa_nvfp4_modelopt",
             "tiny_glm_moe_dsa_nvfp4_modelopt", KvDtype::kF32, 1e-3},
        Case{"tests/fixtures/quant/tiny_deepseek_v32_fp8", "tiny_deepseek_v32_fp8", KvDtype::kF32,
             1e-3},
        Case{"tests/fixtures/quant/roundtrip_nvfp4", "roundtrip_nvfp4", KvDtype::kF32, 1e-3},
        Case{"tests/fixtures/quant/roundtrip_fp8", "roundtrip_fp8", KvDtype::kF32, 1e-3},
        Case{"tests/fixtures/models/tiny_glm_moe_dsa", "tiny_glm_moe_dsa_kvfp8", KvDtype::kFp8E4M3,
             1e-4}),
    CaseName);

// The weights really are packed views of the mapping: formats as the metadata says, and the
// model's weight bytes are the packed bytes.
TEST(QuantWeightsTest, Nvfp4AndFp8WeightsStayPackedAndBorrowed) {
  for (const char* dir : {"tiny_glm_moe_dsa_nvfp4_modelopt", "tiny_deepseek_v32_fp8"}) {
    auto cfg = LoadModelConfig(kQuant + dir);
    ASSERT_TRUE(cfg.ok());
    auto ck = Checkpoint::Open(kQuant + dir);
    ASSERT_TRUE(ck.ok());
    auto w = LoadDeepseekV3Weights(*cfg, *ck);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const Weight& e = w->layers[1].moe.experts[3].down;
    const bool nv = std::string(dir).find("nvfp4") != std::string::npos;
    EXPECT_EQ(e.format, nv ? WeightFormat::kNvfp4 : WeightFormat::kFp8Block);
    EXPECT_EQ(e.data.raw(), ck->Get(e.name).value().raw()) << "borrowed, not copied";
    EXPECT_NE(w->lm_head.format, e.format);  // lm_head stays high precision
    EXPECT_NE(w->layers[1].moe.router.format, e.format);
    // Every tensor is bound as stored (ModelOpt's unused 4-byte input_scale scalars aside).
    EXPECT_LE(w->bytes, ck->TotalTensorBytes());
    EXPECT_GE(w->bytes + 4096, ck->TotalTensorBytes());
  }
}

TEST(KvCacheTest, Fp8LatentIsTheFlashMlaLayout) {
  KvCacheSpec s{1, 512, 64, 128};
  EXPECT_EQ(s.MlaBytesPerTokenPerLayer(KvDtype::kFp8E4M3), 656);
  EXPECT_EQ(s.BytesPerTokenPerLayer(KvDtype::kFp8E4M3), 656 + 128 + 4);
  EXPECT_EQ(s.MlaBytesPerTokenPerLayer(KvDtype::kBF16), 1152);
  EXPECT_EQ(s.BytesPerTokenPerLayer(KvDtype::kF32), 4 * (576 + 128));
  KvCacheSpec tiny{3, 32, 16, 32};
  EXPECT_EQ(tiny.MlaBytesPerTokenPerLayer(KvDtype::kFp8E4M3), 32 + 4 + 32);
}

TEST(KvCacheTest, StoredRowsDecodeToTheQuantizedValues) {
  KvCacheSpec s{1, 300, 64, 128};  // a partial last 128-block in the latent
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    KvStorage pool(s, 2, 4, d);
    const std::vector<int32_t> seq = {1, 0};
    std::vector<float> ckv(300), kpe(64), key(128);
    for (int i = 0; i < 300; ++i) ckv[i] = std::sin(0.37f * i) * (i < 128 ? 3.0f : 1e-3f);
    for (int i = 0; i < 64; ++i) kpe[i] = 0.1f * i - 2.0f;
    for (int i = 0; i < 128; ++i) key[i] = std::cos(0.11f * i);
    std::fill(ckv.begin() + 256, ckv.end(), 0.0f);  // an all-zero block
    pool.WriteMla(0, seq, 5, ckv.data(), kpe.data());
    pool.WriteIndexerKey(0, seq, 5, key.data());
    std::vector<float> row(364), k(128);
    pool.MlaRows(0, seq).ReadRow(5, row.data());
    pool.IndexerRows(0, seq).ReadRow(5, k.data());
    for (int b = 0; b < 3; ++b) {
      float amax = 0;
      for (int i = b * 128; i < std::min(300, (b + 1) * 128); ++i)
        amax = std::max(amax, std::abs(ckv[i]));
      for (int i = b * 128; i < std::min(300, (b + 1) * 128); ++i) {
        float want = ckv[i];
        if (d == KvDtype::kBF16) want = Bf16ToF32(F32ToBf16(ckv[i]));
        if (d == KvDtype::kFp8E4M3)
          want = amax == 0 ? 0.0f
                           : F8E4M3ToF32(F32ToF8E4M3Saturate(ckv[i] / (amax / 448))) * (amax / 448);
        ASSERT_EQ(row[i], want) << KvDtypeName(d) << " latent " << i;
      }
    }
    for (int i = 0; i < 64; ++i)
      ASSERT_EQ(row[300 + i], d == KvDtype::kF32 ? kpe[i] : Bf16ToF32(F32ToBf16(kpe[i])));
    float kmax = 0;
    for (float v : key) kmax = std::max(kmax, std::abs(v));
    for (int i = 0; i < 128; ++i) {
      float want = key[i];
      if (d == KvDtype::kBF16) want = Bf16ToF32(F32ToBf16(key[i]));
      if (d == KvDtype::kFp8E4M3)
        want = F8E4M3ToF32(F32ToF8E4M3Saturate(key[i] / (kmax / 448))) * (kmax / 448);
      ASSERT_EQ(k[i], want) << KvDtypeName(d) << " key " << i;
    }
    EXPECT_EQ(pool.bytes(), uint64_t(8) * s.BytesPerToken(d));
  }
}

TEST(KvCacheTest, Bf16KvStaysCloseToF32AndGreedyAgrees) {
  const std::string dir = std::string(LUCID_SOURCE_DIR) +
                          "/tests/fixtures/models/tiny_deepseek_v3";  // dense MLA: no top-k to flip
  auto m = LoadModel(dir, kOps);
  ASSERT_TRUE(m.ok());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 256);
  Tensor a, b;
  auto x = GreedyGenerate(**m, prompt, 4, &a, 16, KvDtype::kF32);
  auto y = GreedyGenerate(**m, prompt, 4, &b, 16, KvDtype::kBF16);
  ASSERT_TRUE(x.ok() && y.ok());
  const double err = RelErr(b, a);
  std::printf("  bf16 KV vs f32 KV: prompt logits max abs diff / max|logit| = %.3g\n", err);
  EXPECT_LE(err, 2e-2);
  EXPECT_GT(err, 0.0);  // the dtype is really used
}

TEST(KvCacheTest, KvDtypeFromNameIsTheInverseOfKvDtypeNameAndNothingElse) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3})
    EXPECT_EQ(KvDtypeFromName(KvDtypeName(d)).value(), d);
  for (const char* bad : {"auto", "fp8", "int4", "F32", ""}) {
    auto r = KvDtypeFromName(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("fp8_e4m3"), std::string::npos);
  }
}

}  // namespace
}  // namespace lucid
