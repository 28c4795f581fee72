// The CUDA backend's host-side behaviour (runs everywhere) and its device behaviour (skips, saying
// why, on a machine without a usable CUDA device).
#include "backends/cuda/cuda_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_host_bridge.h"
#include "backends/cuda/cuda_ops.h"

namespace lucid::cuda {
namespace {

using ::testing::HasSubstr;

// The device tests' guard: the backend on device 0, or a skip with the probe's reason.
#define LUCID_REQUIRE_CUDA_BACKEND(var)                                                       \
  StatusOr<std::unique_ptr<CudaBackend>> var##_or =                                           \
      CudaBackend::Create(0, MakeCudaReferenceOps, "reference");                              \
  if (!var##_or.ok()) GTEST_SKIP() << "needs a CUDA device: " << var##_or.status().message(); \
  CudaBackend& var = **var##_or

TEST(CudaDeviceTest, ProbeNamesTheDevicesOrSaysWhyThereAreNone) {
  StatusOr<std::vector<CudaDeviceInfo>> d = ProbeCudaDevices();
  if (!d.ok()) {
    EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(d.status().message(), HasSubstr("no CUDA device: "));
    return;
  }
  ASSERT_FALSE(d->empty());
  for (const CudaDeviceInfo& i : *d) {
    EXPECT_GE(i.sm, 50) << i.name;
    EXPECT_GT(i.total_memory, 0);
    EXPECT_LE(i.free_memory, i.total_memory);
    EXPECT_THAT(DescribeDevice(i), HasSubstr("cuda:" + std::to_string(i.index)));
  }
}

TEST(CudaDeviceTest, ArchitectureSpecificCodeRunsOnlyOnItsOwnCapability) {
  const std::vector<int> archs = CompiledCudaArchitectures();
  ASSERT_FALSE(archs.empty());
  for (int a : archs) {
    EXPECT_TRUE(RunsOn(a));
    EXPECT_THAT(CompiledCudaArchitecturesText(), HasSubstr("sm_" + std::to_string(a)));
  }
  // sm_89 (Ada) and sm_103 have no "a" code in the default build: refused, not run.
  EXPECT_FALSE(RunsOn(89));
  EXPECT_FALSE(RunsOn(103));
}

TEST(CudaBackendTest, CreateWithoutADeviceFailsWithTheReason) {
  StatusOr<std::vector<CudaDeviceInfo>> d = ProbeCudaDevices();
  if (d.ok()) GTEST_SKIP() << "this machine has a CUDA device; the no-device path is not reachable";
  StatusOr<std::unique_ptr<CudaBackend>> b =
      CudaBackend::Create(0, MakeCudaReferenceOps, "reference");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), d.status().message());
}

TEST(CudaOpsTest, EveryOpOfTheInterfaceHasAKernel) {
  EXPECT_EQ(OpNames().size(), 25u);  // ops/ops.h's Ops has 25 ops
  for (const std::string& op : OpNames()) EXPECT_TRUE(CudaImplements(op)) << op;
  EXPECT_FALSE(CudaImplements("linear"));
  EXPECT_FALSE(CudaImplements("FusedMoe"));
}

// The CUDA op sets as the catalog (config/kernel_catalog.h) and the self-test name them, each
// with the conformance precision its kernels are held to.
TEST(CudaOpsTest, TheOpSetsAreTheCatalogsCudaKernels) {
  ASSERT_EQ(CudaOpsSets().size(), 3u);
  const CudaOpsSet* ref = FindCudaOpsSet("cuda-reference");
  const CudaOpsSet* act = FindCudaOpsSet("cuda-bf16act");
  const CudaOpsSet* fp8 = FindCudaOpsSet("cuda-fp8act");
  ASSERT_NE(ref, nullptr);
  ASSERT_NE(act, nullptr);
  ASSERT_NE(fp8, nullptr);
  EXPECT_EQ(ref->precision, ConformancePrecision::kF32);
  EXPECT_EQ(act->precision, ConformancePrecision::kBf16Act);
  EXPECT_EQ(fp8->precision, ConformancePrecision::kFp8Act);
  EXPECT_STREQ(ref->backend, "reference");
  EXPECT_STREQ(act->backend, "bf16act");
  EXPECT_STREQ(fp8->backend, "fp8act");
  EXPECT_EQ(FindCudaOpsSet("cpu"), nullptr);
  EXPECT_EQ(FindCudaOpsSet("cuda"), nullptr);
}

TEST(CudaBackendDeviceTest, UploadKeepsPackedBytesAndCountsDeviceMemory) {
  LUCID_REQUIRE_CUDA_BACKEND(b);
  EXPECT_EQ(b.device(), Device::kCuda);
  EXPECT_EQ(b.name(), "cuda:reference");
  const int64_t before = b.device_allocator().live_bytes();
  Tensor host = Tensor::Empty(DType::kU8, {3, 40});  // NVFP4 payload: bytes, kept as bytes
  for (int64_t i = 0; i < host.numel(); ++i) host.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37);
  StatusOr<Tensor> dev = b.UploadWeight(host);
  ASSERT_TRUE(dev.ok()) << dev.status().message();
  EXPECT_EQ(dev->device(), Device::kCuda);
  EXPECT_EQ(dev->shape(), host.shape());
  EXPECT_GE(b.device_allocator().live_bytes() - before, 120);
  StatusOr<Tensor> back = CopyToHost(*dev, b.stream());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(std::memcmp(back->raw(), host.raw(), host.nbytes()), 0);
}

TEST(CudaBackendDeviceTest, GlueOpsEqualTheirFormulas) {
  LUCID_REQUIRE_CUDA_BACKEND(b);
  HostBridgeOps ops(b);
  Tensor x = Tensor::Empty(DType::kF32, {4, 6}), y = Tensor::Empty(DType::kF32, {4, 6});
  for (int i = 0; i < 24; ++i) {
    x.data<float>()[i] = 0.5f * i - 3.0f;
    y.data<float>()[i] = 1.0f - 0.25f * i;
  }
  Tensor acc = Tensor::Empty(DType::kF32, {4, 6});
  std::memcpy(acc.raw(), x.raw(), x.nbytes());
  ops.Accumulate(acc, y);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(acc.data<float>()[i], x.data<float>()[i] + y.data<float>()[i]);
  ops.Scale(acc, 2.0f);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(acc.data<float>()[i], 2.0f * (x.data<float>()[i] + y.data<float>()[i]));
  Tensor cols = Tensor::Empty(DType::kF32, {4, 4});  // groups 2 of stride 3, offset 1, width 2
  ops.CopyColumns(x, 2, 3, 1, 2, cols);
  for (int t = 0; t < 4; ++t)
    for (int g = 0; g < 2; ++g)
      for (int j = 0; j < 2; ++j)
        EXPECT_EQ(cols.data<float>()[t * 4 + g * 2 + j], x.data<float>()[t * 6 + g * 3 + 1 + j]);
  const std::vector<int64_t> rows = {3, 0, 3};
  Tensor g = Tensor::Empty(DType::kF32, {3, 6});
  ops.GatherRows(x, rows, g);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 6; ++c)
      EXPECT_EQ(g.data<float>()[i * 6 + c], x.data<float>()[rows[i] * 6 + c]);
}

TEST(CudaBackendDeviceTest, EveryOpPassesTheConformanceSuite) {
  LUCID_REQUIRE_CUDA_BACKEND(b);
  HostBridgeOps ops(b);
  const std::vector<ConformanceCase> cases =
      RunOpsConformance(ops, ConformancePrecision::kF32, CudaOpNames());
  ASSERT_FALSE(cases.empty());
  EXPECT_TRUE(AllPassed(cases)) << ConformanceTable("cuda-reference", cases);
}

// cuda-bf16act against the reference given the bf16-rounded matmul inputs (kBf16Act), its
// tensor-core GEMMs included (bf16, FP8 with UE8M0 scales, NVFP4 weights); cuda-fp8act against
// the reference given the e4m3-quantized activations of its FP8 block matmuls (kFp8Act:
// cuBLASLt's block-scaled GEMM on sm_90, its f32 fallback elsewhere).
TEST(CudaBackendDeviceTest, TheOtherSetsPassTheConformanceSuiteAtTheirPrecision) {
  for (const CudaOpsSet& set : CudaOpsSets()) {
    if (set.precision == ConformancePrecision::kF32) continue;  // cuda-reference: above
    StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::Create(0, set.make, set.backend);
    if (!b.ok()) GTEST_SKIP() << "needs a CUDA device: " << b.status().message();
    EXPECT_EQ((*b)->name(), std::string("cuda:") + set.backend);
    HostBridgeOps ops(**b);
    const std::vector<ConformanceCase> cases = RunOpsConformance(ops, set.precision, CudaOpNames());
    ASSERT_FALSE(cases.empty());
    EXPECT_TRUE(AllPassed(cases)) << ConformanceTable(set.kernel, cases);
  }
}

// Device memory held until destruction: every cudaMalloc the device grants, in shrinking pieces,
// so that less than 1 MiB stays free.
class DeviceMemoryHog {
 public:
  DeviceMemoryHog() {
    for (size_t piece = size_t{256} << 20; piece >= (size_t{1} << 20); piece /= 4) {
      void* p = nullptr;
      while (cudaMalloc(&p, piece) == cudaSuccess) held_.push_back(p);
      (void)cudaGetLastError();  // the failure that ended the loop is not sticky
    }
  }
  ~DeviceMemoryHog() {
    for (void* p : held_) cudaFree(p);
  }
  DeviceMemoryHog(const DeviceMemoryHog&) = delete;
  DeviceMemoryHog& operator=(const DeviceMemoryHog&) = delete;

 private:
  std::vector<void*> held_;
};

// cuda-reference multiplies a bf16 weight's f32 copy, made in scratch (cuda_scratch.h): with the
// device full, the op launches nothing and Synchronize says ResourceExhausted once; with memory
// back, the same op on the same CudaOps gives the exact product.
TEST(CudaBackendDeviceTest, ScratchTheDeviceCannotGiveFailsTheStepNotTheProcess) {
  LUCID_REQUIRE_CUDA_BACKEND(b);
  const int64_t N = 4096, K = 4096;  // the f32 copy: 64 MiB
  Tensor hw = Tensor::Empty(DType::kBF16, {N, K});
  const uint16_t bits[3] = {0xBF80, 0x0000, 0x3F80};  // -1, 0, 1 in bf16
  for (int64_t i = 0; i < N * K; ++i) hw.data<uint16_t>()[i] = bits[(i / K + i % K) % 3];
  Tensor hx = Tensor::Empty(DType::kF32, {1, K}), hy = Tensor::Empty(DType::kF32, {1, N});
  for (int64_t k = 0; k < K; ++k) hx.data<float>()[k] = static_cast<float>(k % 5 - 2);
  std::memset(hy.raw(), 0, hy.nbytes());
  StatusOr<Tensor> dw = b.UploadWeight(hw), dx = b.UploadWeight(hx), dy = b.UploadWeight(hy);
  ASSERT_TRUE(dw.ok() && dx.ok() && dy.ok());
  Weight w;
  w.format = WeightFormat::kBF16;
  w.name = "test.hog";
  w.rows = N;
  w.cols = K;
  w.data = *dw;
  {
    DeviceMemoryHog hog;
    b.ops().Linear(*dx, w, *dy);
    const Status s = b.Synchronize();
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.message();
    EXPECT_THAT(s.message(), HasSubstr("a dequantized weight"));
    EXPECT_TRUE(b.Synchronize().ok());  // reported once
  }
  b.ops().Linear(*dx, w, *dy);
  ASSERT_TRUE(b.Synchronize().ok());
  StatusOr<Tensor> y = CopyToHost(*dy, b.stream());
  ASSERT_TRUE(y.ok()) << y.status().message();
  for (int64_t n = 0; n < N; n += 97) {
    float want = 0.0f;  // small integers: exact in f32 in any order
    for (int64_t k = 0; k < K; ++k)
      want += static_cast<float>((n + k) % 3 - 1) * static_cast<float>(k % 5 - 2);
    EXPECT_EQ(y->data<float>()[n], want) << "row " << n;
  }
}

}  // namespace
}  // namespace lucid::cuda
