// The quantizers against NVIDIA ModelOpt's own output: re-quantizing the tiny GLM fixture's
// weights with ModelOpt's weight_scale_2 reproduces ModelOpt's exported packed weights and e4m3
// scales byte for byte; plus the e2m1 rounding rule and the FP8 block rule on edge values.
#include "formats/quant_encode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "formats/safetensors.h"

namespace lucid {
namespace {

const std::string kRoot = LUCID_SOURCE_DIR;

TEST(QuantEncodeTest, Nvfp4MatchesModelOptExportByteForByte) {
  auto mo = Checkpoint::Open(kRoot + "/tests/fixtures/quant/tiny_glm_moe_dsa_nvfp4_modelopt");
  auto base = Checkpoint::Open(kRoot + "/tests/fixtures/models/tiny_glm_moe_dsa");
  ASSERT_TRUE(mo.ok() && base.ok()) << mo.status().ToString() << base.status().ToString();
  int checked = 0;
  for (const std::string& n : mo->Names()) {
    const std::string suffix = ".weight_scale_2";
    if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix))
      continue;
    const std::string m = n.substr(0, n.size() - suffix.size());
    Tensor w = base->Get(m + ".weight").value();
    std::vector<float> f(w.numel());
    ConvertToF32(w.dtype(), w.raw(), f.data(), f.size());
    const int64_t rows = w.size(0), cols = w.size(1), g = (cols + 15) / 16;
    std::vector<uint8_t> packed(rows * g * 8), scales(rows * g);
    QuantizeNvfp4(f.data(), rows, cols, *mo->Get(n).value().data<float>(), packed.data(),
                  scales.data());
    Tensor want_q = mo->Get(m + ".weight").value(), want_s = mo->Get(m + ".weight_scale").value();
    ASSERT_EQ(want_q.nbytes(), packed.size()) << m;
    ASSERT_EQ(0, std::memcmp(want_q.raw(), packed.data(), packed.size())) << m;
    ASSERT_EQ(0, std::memcmp(want_s.raw(), scales.data(), scales.size())) << m;
    ++checked;
  }
  EXPECT_EQ(checked, 81);  // every NVFP4 module ModelOpt exported
}

TEST(QuantEncodeTest, E2m1RoundingIsModelOpts) {
  // Ties go to the even code; -0.0 keeps code 0 (ModelOpt's sign is x < 0); > 5 saturates to 6.
  EXPECT_EQ(Nvfp4Code(0.25f), 0);
  EXPECT_EQ(Nvfp4Code(0.2501f), 1);
  EXPECT_EQ(Nvfp4Code(0.75f), 2);
  EXPECT_EQ(Nvfp4Code(1.25f), 2);
  EXPECT_EQ(Nvfp4Code(1.75f), 4);
  EXPECT_EQ(Nvfp4Code(2.5f), 4);
  EXPECT_EQ(Nvfp4Code(3.5f), 6);
  EXPECT_EQ(Nvfp4Code(5.0f), 6);
  EXPECT_EQ(Nvfp4Code(100.0f), 7);
  EXPECT_EQ(Nvfp4Code(-0.0f), 0);
  EXPECT_EQ(Nvfp4Code(-0.1f), 8);
  EXPECT_EQ(Nvfp4Code(-6.0f), 15);
  for (float v = -7.0f; v <= 7.0f; v += 0.0625f) {  // away from ties: same as ml_dtypes' RNE
    if (v == 0.0f) continue;
    EXPECT_EQ(Nvfp4Code(v), F32ToF4E2M1(v)) << v;
  }
}

TEST(QuantEncodeTest, Fp8BlockScalesAndPartialBlocks) {
  const int64_t rows = 130, cols = 129;
  std::vector<float> w(rows * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.1f * i) * (i % 7 == 0 ? 3.0f : 0.5f);
  std::fill(w.begin() + 128 * cols, w.end(), 0.0f);  // last row block all zero
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(4);
  for (bool ue8m0 : {false, true}) {
    QuantizeFp8Block(w.data(), rows, cols, 128, 128, ue8m0, q.data(), s.data());
    EXPECT_EQ(s[2], ue8m0 ? std::ldexp(1.0f, -22) : 1e-4f / 448.0f);  // amax clamped to 1e-4
    for (float v : s) {
      int e;
      if (ue8m0) {
        EXPECT_EQ(std::frexp(v, &e), 0.5f);
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float sc = s[(r / 128) * 2 + c / 128];
        const float deq = F8E4M3ToF32(q[r * cols + c]) * sc;
        ASSERT_LE(std::abs(deq - w[r * cols + c]), std::abs(w[r * cols + c]) / 16 + sc)
            << r << "," << c;
      }
  }
}

}  // namespace
}  // namespace lucid
