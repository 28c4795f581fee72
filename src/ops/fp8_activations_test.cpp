// The FP8 activation quantization against tests/fixtures/quant/fp8_act_groups.bin, written by
// tools/reference/gen_fp8_act_golden.py (SGLang's per-token-group arithmetic in numpy, the e4m3
// cast by ml_dtypes): codes and scales bit for bit; and the non-finite rule of the definition.
#include "ops/fp8_activations.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lucid {
namespace {

static_assert(std::endian::native == std::endian::little, "the fixture is little-endian");

struct Golden {
  int32_t T = 0, K = 0;
  std::vector<float> x, scales;
  std::vector<uint8_t> codes;
};

Golden ReadGolden() {
  const std::string path =
      std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/quant/fp8_act_groups.bin";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  const std::vector<char> buf((std::istreambuf_iterator<char>(f)), {});
  Golden g;
  if (buf.size() < 8) return g;
  std::memcpy(&g.T, buf.data(), 4);
  std::memcpy(&g.K, buf.data() + 4, 4);
  const size_t n = static_cast<size_t>(g.T) * g.K, groups = (g.K + 127) / 128;
  const size_t want = 8 + n * 4 + n + g.T * groups * 4;
  EXPECT_EQ(buf.size(), want) << path;
  if (buf.size() != want) return g;
  g.x.resize(n);
  g.codes.resize(n);
  g.scales.resize(g.T * groups);
  std::memcpy(g.x.data(), buf.data() + 8, n * 4);
  std::memcpy(g.codes.data(), buf.data() + 8 + n * 4, n);
  std::memcpy(g.scales.data(), buf.data() + 8 + n * 5, g.scales.size() * 4);
  return g;
}

TEST(Fp8Activations, CodesAndScalesEqualTheReferenceArithmetic) {
  const Golden g = ReadGolden();
  ASSERT_EQ(g.T, 6);
  ASSERT_EQ(g.K, 300);
  std::vector<uint8_t> codes(g.codes.size());
  std::vector<float> scales(g.scales.size());
  QuantizeFp8Act(g.x.data(), g.T, g.K, codes.data(), scales.data());
  for (size_t i = 0; i < scales.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(scales[i]), std::bit_cast<uint32_t>(g.scales[i]))
        << "scale " << i << ": " << scales[i] << " vs " << g.scales[i];
  int64_t wrong = 0;
  for (size_t i = 0; i < codes.size(); ++i)
    if (codes[i] != g.codes[i] && ++wrong <= 5)
      ADD_FAILURE() << "code " << i << " of x = " << g.x[i] << ": " << int{codes[i]} << " vs "
                    << int{g.codes[i]};
  EXPECT_EQ(wrong, 0);
  // The fixture reaches both ends of e4m3: some code saturates at +-448 and some group's
  // scale is the 1e-10 floor.
  bool max_code = false, floor = false;
  for (uint8_t c : codes) max_code |= (c & 0x7F) == 0x7E;
  for (float s : scales) floor |= s == kFp8ActMinAmax / 448.0f;
  EXPECT_TRUE(max_code);
  EXPECT_TRUE(floor);
}

TEST(Fp8Activations, DequantizedIsCodeTimesScaleWithinAHalfUlpOfE4m3) {
  const Golden g = ReadGolden();
  ASSERT_GT(g.T, 0);
  Tensor x = Tensor::Empty(DType::kF32, {g.T, g.K});
  std::memcpy(x.data<float>(), g.x.data(), g.x.size() * 4);
  const Tensor d = Fp8ActDequantized(x);
  const int64_t groups = (g.K + 127) / 128;
  for (int64_t t = 0; t < g.T; ++t)
    for (int64_t c = 0; c < g.K; ++c) {
      const size_t i = t * g.K + c;
      const float s = g.scales[t * groups + c / 128];
      EXPECT_EQ(d.data<float>()[i], F8E4M3ToF32(g.codes[i]) * s) << i;
      // e4m3 keeps 3 fraction bits: within 2^-4 relative, or 2^-10 * s near zero.
      EXPECT_LE(std::fabs(d.data<float>()[i] - g.x[i]),
                std::max(std::fabs(g.x[i]) / 16.0f, s / 512.0f) * 1.0001f)
          << i;
    }
}

TEST(Fp8Activations, NonFiniteEntriesMakeTheirGroupNonFinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  // Row 0: a NaN in group 0; row 1: +Inf in group 1; group 2 of both and group 1 of row 0 are
  // finite and must stay exactly as the finite rule gives them.
  Tensor x = Tensor::Empty(DType::kF32, {2, 300});
  for (int64_t i = 0; i < 600; ++i) x.data<float>()[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  Tensor finite = x.Clone();
  x.data<float>()[5] = nan;
  x.data<float>()[300 + 200] = inf;
  const Tensor d = Fp8ActDequantized(x), f = Fp8ActDequantized(finite);
  EXPECT_TRUE(std::isnan(d.data<float>()[5]));
  for (int64_t c = 128; c < 256; ++c) EXPECT_TRUE(std::isnan(d.data<float>()[300 + c])) << c;
  for (int64_t c : {0, 6, 127})
    EXPECT_EQ(d.data<float>()[c], f.data<float>()[c]) << c;  // NaN skipped
  for (int64_t c = 256; c < 300; ++c) {
    EXPECT_EQ(d.data<float>()[c], f.data<float>()[c]) << c;
    EXPECT_EQ(d.data<float>()[300 + c], f.data<float>()[300 + c]) << c;
  }
}

}  // namespace
}  // namespace lucid
