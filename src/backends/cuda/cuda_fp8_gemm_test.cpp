// cuda-fp8act's GEMM: which shapes cuBLASLt is asked to run (host logic, runs everywhere), and on a
// device the activation quantization against ops/fp8_activations.h (exact, any GPU) and the
// block-scaled FP8 GEMM against the reference on the quantized values (sm_90).
#include "backends/cuda/cuda_fp8_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_fp8_scales.h"
#include "core/dtype.h"
#include "ops/fp8_activations.h"

namespace lucid::cuda {
namespace {

using ::testing::HasSubstr;

Fp8LtWeight View(int64_t N, int64_t K, int64_t row_begin) {
  Fp8LtWeight w;
  w.rows = N;
  w.cols = K;
  w.row_begin = row_begin;
  w.block_rows = w.block_cols = 128;
  w.data_ld = K;
  return w;
}

TEST(Fp8LtGemmTest, AsksCublasLtOnlyForShapesItsBlockScaledModeTakes) {
  Fp8LtGemm hopper(nullptr, 90), ampere(nullptr, 80), blackwell(nullptr, 100);
  EXPECT_THAT(ampere.Unsupported(View(256, 512, 0), 4), HasSubstr("sm_90 only"));
  EXPECT_THAT(blackwell.Unsupported(View(256, 512, 0), 4), HasSubstr("this device: sm_100"));
  if (cublasLtGetVersion() < 120900) {
    EXPECT_THAT(hopper.Unsupported(View(256, 512, 0), 4), HasSubstr("predates"));
    return;
  }
  EXPECT_EQ(hopper.Unsupported(View(256, 512, 0), 4), "");
  EXPECT_EQ(hopper.Unsupported(View(144, 384, 128), 129), "");
  EXPECT_THAT(hopper.Unsupported(View(144, 384, 3), 1), HasSubstr("128-row block"));
  EXPECT_THAT(hopper.Unsupported(View(45, 512, 0), 1), HasSubstr("multiple of 16"));
  EXPECT_THAT(hopper.Unsupported(View(256, 300, 0), 1), HasSubstr("multiple of 16"));
  Fp8LtWeight padded = View(256, 512, 0);
  padded.data_ld = 528;
  EXPECT_THAT(hopper.Unsupported(padded, 1), HasSubstr("padded"));
  Fp8LtWeight blocks = View(256, 512, 0);
  blocks.block_cols = 64;
  EXPECT_THAT(hopper.Unsupported(blocks, 1), HasSubstr("128x128"));
  // An operand off 16 bytes is refused before any cuBLASLt call (these pointers are never read).
  alignas(256) static uint8_t bytes[1024];
  const auto* f = reinterpret_cast<const float*>(bytes);
  Fp8LtWeight w = View(256, 512, 0);
  w.codes = bytes + 8;
  EXPECT_THAT(hopper.Run(w, f, bytes, f, 4, reinterpret_cast<float*>(bytes)),
              HasSubstr("16-byte boundary"));
  w.codes = bytes;
  EXPECT_THAT(hopper.Run(w, f, bytes, f + 1, 4, reinterpret_cast<float*>(bytes)),
              HasSubstr("16-byte boundary"));
  EXPECT_THAT(hopper.Run(w, f, bytes, f, 4, reinterpret_cast<float*>(bytes + 4)),
              HasSubstr("16-byte boundary"));
}

// Device buffers freed at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

#define LUCID_REQUIRE_DEVICE(info)                                                              \
  StatusOr<std::vector<CudaDeviceInfo>> info##_or = ProbeCudaDevices();                         \
  if (!info##_or.ok()) GTEST_SKIP() << "needs a CUDA device: " << info##_or.status().message(); \
  const CudaDeviceInfo& info = info##_or->front()

TEST(Fp8LtGemmDeviceTest, QuantizedActivationsEqualTheDefinition) {
  LUCID_REQUIRE_DEVICE(info);
  (void)info;
  const int64_t T = 5, K = 300, G = 3;  // a partial last group
  std::vector<float> x = RandomValues(T * K, 7);
  x[2 * K + 40] = 1e-12f;
  for (int64_t c = 128; c < 256; ++c) x[3 * K + c] = 0.0f;  // an all-zero group
  DeviceBuffer dx(T * K * 4), dcodes(T * K), dscales(T * G * 4), dvalues(T * K * 4);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), T * K * 4, cudaMemcpyHostToDevice), cudaSuccess);
  LaunchQuantizeFp8Act(dx.as<float>(), T, K, dcodes.as<uint8_t>(), dscales.as<float>(),
                       dvalues.as<float>(), nullptr);
  std::vector<uint8_t> codes(T * K), want_codes(T * K);
  std::vector<float> scales(T * G), want_scales(T * G), values(T * K);
  ASSERT_EQ(cudaMemcpy(codes.data(), dcodes.p, T * K, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(scales.data(), dscales.p, T * G * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(values.data(), dvalues.p, T * K * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  QuantizeFp8Act(x.data(), T, K, want_codes.data(), want_scales.data());
  EXPECT_EQ(codes, want_codes);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g)  // VEC128 order: group-major
      EXPECT_EQ(scales[g * T + t], want_scales[t * G + g]) << t << " " << g;
  Tensor xt = Tensor::Empty(DType::kF32, {T, K});
  std::memcpy(xt.raw(), x.data(), T * K * 4);
  const Tensor want_values = Fp8ActDequantized(xt);
  for (int64_t i = 0; i < T * K; ++i) EXPECT_EQ(values[i], want_values.data<float>()[i]) << i;
}

TEST(Fp8LtGemmDeviceTest, BlockScaledGemmEqualsTheReferenceOnTheQuantizedValues) {
  LUCID_REQUIRE_DEVICE(info);
  if (info.sm != 90) GTEST_SKIP() << "cuBLASLt's 128-block FP8 scaling runs on sm_90 only";
  const int64_t N = 256, K = 512, T = 33, nb = 2, kb = 4;
  std::mt19937 rng(3);
  std::vector<uint8_t> wq(N * K);
  for (uint8_t& b : wq) {
    b = static_cast<uint8_t>(rng() & 0xFF);
    if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN codes
  }
  std::vector<float> ws(nb * kb);
  for (float& s : ws) s = 1e-3f * static_cast<float>(1 + rng() % 9);
  const std::vector<float> x = RandomValues(T * K, 11);
  const std::vector<float> laid = LayoutBlk128x128Scales(ws.data(), N, K);
  DeviceBuffer dw(N * K), dws(laid.size() * 4), dnat(ws.size() * 4), dx(T * K * 4), dcodes(T * K),
      dscales(T * kb * 4), dy(T * N * 4), dlaid(laid.size() * 4);
  ASSERT_EQ(cudaMemcpy(dw.p, wq.data(), N * K, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dnat.p, ws.data(), ws.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), T * K * 4, cudaMemcpyHostToDevice), cudaSuccess);
  // The device layout kernel equals the host layout.
  LaunchLayoutBlk128Scales(dnat.p, false, kb, 0, N, K, dws.as<float>(), nullptr);
  std::vector<float> got_laid(laid.size());
  ASSERT_EQ(cudaMemcpy(got_laid.data(), dws.p, laid.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(got_laid, laid);
  LaunchQuantizeFp8Act(dx.as<float>(), T, K, dcodes.as<uint8_t>(), dscales.as<float>(), nullptr,
                       nullptr);
  Fp8LtGemm gemm(nullptr, info.sm);
  Fp8LtWeight w = View(N, K, 0);
  w.codes = dw.as<uint8_t>();
  const std::string why =
      gemm.Run(w, dws.as<float>(), dcodes.as<uint8_t>(), dscales.as<float>(), T, dy.as<float>());
  ASSERT_EQ(why, "");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y(T * N);
  ASSERT_EQ(cudaMemcpy(y.data(), dy.p, T * N * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  // Reference: the quantized activations times the dequantized weight, in double.
  Tensor xt = Tensor::Empty(DType::kF32, {T, K});
  std::memcpy(xt.raw(), x.data(), T * K * 4);
  const Tensor xq = Fp8ActDequantized(xt);
  double err = 0.0, mag = 0.0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(xq.data<float>()[t * K + k]) * F8E4M3ToF32(wq[n * K + k]) *
               ws[(n / 128) * kb + k / 128];
      err = std::max(err, std::fabs(acc - y[t * N + n]));
      mag = std::max(mag, std::fabs(acc));
    }
  EXPECT_LE(err / mag, 1e-3) << "max error " << err << " of max " << mag;
}

}  // namespace
}  // namespace lucid::cuda
