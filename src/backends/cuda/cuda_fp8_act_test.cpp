// QuantizeFp8ActKernel's arithmetic (cuda_fp8_act.cuh) on the CPU, warp by warp as the kernel
// runs it (each lane's amax, folded over the 32 lanes; the hardware conversion through cuda_fp8.h's
// host implementation), against ops/fp8_activations.h's definition: codes (a NaN's sign aside),
// scales and the values the GEMM multiplies equal, bit for bit, over rows of spread magnitudes, a
// short last group, an all-zero group, NaN, infinities, values past e4m3's range and subnormals.
// Runs without a GPU; the kernel itself is checked on a device by Fp8LtGemmDeviceTest.
#include "backends/cuda/cuda_fp8_act.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace lucid::cuda {
namespace {

// e4m3's NaN codes: 0x7F and 0xFF. Their sign is not specified by the definition: x86 divides
// inf by inf into a negative NaN, which the host's encoder keeps (0xFF); the device's conversion
// gives 0x7F for every NaN.
bool SameCode(uint8_t a, uint8_t b) { return a == b || ((a & 0x7F) == 0x7F && (b & 0x7F) == 0x7F); }

TEST(CudaFp8ActTest, TheWarpsArithmeticEqualsTheDefinition) {
  const int64_t T = 7, K = 300, groups = 3;  // the last group holds 44 columns
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 12);
  std::vector<float> x(static_cast<size_t>(T * K));
  for (float& v : x) v = normal(rng) * std::ldexp(1.0f, exponent(rng));
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < 128; ++c) x[1 * K + c] = 0.0f;                // row 1, group 0: zeros
  x[2 * K + 5] = std::numeric_limits<float>::quiet_NaN();               // row 2, group 0: a NaN
  x[3 * K + 130] = inf;                                                 // row 3, group 1: +inf
  x[3 * K + 290] = -inf;                                                // row 3, group 2: -inf
  x[4 * K + 7] = 3e38f;                                                 // row 4: past e4m3's range
  x[4 * K + 8] = -1e-40f;                                               // and a subnormal
  for (int64_t c = 256; c < K; ++c) x[5 * K + c] = 1e-12f * (c - 280);  // below the minimum amax

  std::vector<uint8_t> want_codes(x.size());
  std::vector<float> want_scales(static_cast<size_t>(T * groups));
  QuantizeFp8Act(x.data(), T, K, want_codes.data(), want_scales.data());
  int code_diff = 0, value_diff = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kFp8ActGroup, n = std::min(kFp8ActGroup, K - c0);
      const float* xr = x.data() + t * K + c0;
      float amax = 0.0f;
      for (int lane = 0; lane < kFp8ActLanes; ++lane)
        amax = fmaxf(amax, Fp8ActLaneAmax(xr, n, lane));
      const float s = Fp8ActScaleOfAmax(amax);
      ASSERT_EQ(std::memcmp(&s, &want_scales[t * groups + g], 4), 0)
          << "row " << t << " group " << g << ": " << s << " vs " << want_scales[t * groups + g];
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t q = Fp8ActCode(xr[i], s), want = want_codes[t * K + c0 + i];
        if (!SameCode(q, want) && ++code_diff < 5)
          ADD_FAILURE() << "row " << t << " column " << c0 + i << ": x " << xr[i] << " code 0x"
                        << std::hex << int{q} << " vs 0x" << int{want};
        const float v = Fp8ActValue(q, s), wv = F8E4M3ToF32(want) * s;
        if (std::memcmp(&v, &wv, 4) != 0 && !(std::isnan(v) && std::isnan(wv)) && ++value_diff < 5)
          ADD_FAILURE() << "row " << t << " column " << c0 + i << ": value " << v << " vs " << wv;
      }
    }
  EXPECT_EQ(code_diff, 0);
  // The infinities' groups hold NaN codes (inf / inf), the rest of them 0 (x / inf).
  EXPECT_EQ(Fp8ActCode(inf, Fp8ActScaleOfAmax(inf)) & 0x7F, 0x7F);
  EXPECT_EQ(Fp8ActCode(1.0f, Fp8ActScaleOfAmax(inf)), 0);
  EXPECT_EQ(value_diff, 0);
}

}  // namespace
}  // namespace lucid::cuda
