// The NCCL communicator on one GPU (a world of one through NCCL): the same collectives as the
// single-process and MPI communicators' tests, on device buffers. Each test that needs a device
// skips with the reason when the machine has none; the no-device refusal is tested where there
// is none. A world of two needs two GPUs (NCCL refuses two ranks on one device).
#include "dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/cuda_device.h"

namespace lucid {
namespace {

// Device copies of host vectors, freed at the end of the test.
class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    for (void* p : owned_) cudaFree(p);
  }
  template <typename T>
  T* Upload(const std::vector<T>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  static std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  std::vector<void*> owned_;
};

#define LUCID_REQUIRE_NCCL(var)                                                      \
  std::unique_ptr<Communicator> bootstrap_##var = MakeSingleProcessCommunicator();   \
  StatusOr<std::unique_ptr<Communicator>> var##_or =                                 \
      MakeNcclCommunicator(*bootstrap_##var, 0, std::chrono::milliseconds(20000));   \
  if (!var##_or.ok() && var##_or.status().code() == StatusCode::kFailedPrecondition) \
    GTEST_SKIP() << "needs a CUDA device: " << var##_or.status().message();          \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status().message();                         \
  Communicator& var = **var##_or

TEST(NcclCommunicator, WithoutADeviceIsRefusedWithTheReason) {
  if (cuda::ProbeCudaDevices().ok())
    GTEST_SKIP() << "this machine has a CUDA device; the no-device path is not reachable";
  auto single = MakeSingleProcessCommunicator();
  StatusOr<std::unique_ptr<Communicator>> c = MakeNcclCommunicator(*single, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("no CUDA device"), std::string::npos) << c.status().message();
}

TEST(NcclCommunicator, VersionIsTheLinkedLibrarys) {
  // ncclGetVersion needs no device.
  EXPECT_EQ(NcclVersion().rfind("NCCL 2.", 0), 0u) << NcclVersion();
}

TEST(NcclCommunicator, OneGpuCollectivesAreCopiesOfDeviceBuffers) {
  LUCID_REQUIRE_NCCL(c);
  EXPECT_EQ(c.kind(), "nccl");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_TRUE(c.device_buffers());
  DeviceBuffers d;
  const std::vector<float> v = {1.5f, -2.0f, 3.25f};
  float* x = d.Upload(v);
  ASSERT_TRUE(c.AllReduceSum(x, 3).ok());
  EXPECT_EQ(DeviceBuffers::Download(x, 3), v);
  float* g = d.Upload(std::vector<float>(3, 0.0f));
  ASSERT_TRUE(c.AllGather(x, g, 3 * sizeof(float)).ok());
  EXPECT_EQ(DeviceBuffers::Download(g, 3), v);
  float* rs = d.Upload(std::vector<float>(3, 0.0f));
  ASSERT_TRUE(c.ReduceScatterSum(x, rs, 3).ok());
  EXPECT_EQ(DeviceBuffers::Download(rs, 3), v);
  float* a = d.Upload(std::vector<float>(3, 0.0f));
  ASSERT_TRUE(c.AllToAll(x, a, 3 * sizeof(float)).ok());
  EXPECT_EQ(DeviceBuffers::Download(a, 3), v);
  ASSERT_TRUE(c.Broadcast(x, 3 * sizeof(float), 0).ok());
  EXPECT_EQ(DeviceBuffers::Download(x, 3), v);
  EXPECT_TRUE(c.Barrier().ok());
  // Refusals name the problem and leave the communicator usable.
  EXPECT_EQ(c.Broadcast(x, 4, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllReduceSum(x, -1).code(), StatusCode::kInvalidArgument);
  const std::vector<int64_t> two = {4, 4};
  EXPECT_EQ(c.AllToAllV(x, two, two, a, two, two).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.AllReduceSum(x, 3).ok());
}

TEST(NcclCommunicator, LargeAllReduceKeepsEveryElement) {
  LUCID_REQUIRE_NCCL(c);
  DeviceBuffers d;
  std::vector<float> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 977) - 400.0f;
  float* x = d.Upload(v);
  ASSERT_TRUE(c.AllReduceSum(x, static_cast<int64_t>(v.size())).ok());
  EXPECT_EQ(DeviceBuffers::Download(x, v.size()), v);
}

TEST(NcclCommunicator, ABadDeviceIndexIsRefused) {
  StatusOr<std::vector<cuda::CudaDeviceInfo>> devices = cuda::ProbeCudaDevices();
  if (!devices.ok()) GTEST_SKIP() << "needs a CUDA device: " << devices.status().message();
  auto single = MakeSingleProcessCommunicator();
  StatusOr<std::unique_ptr<Communicator>> c =
      MakeNcclCommunicator(*single, static_cast<int>(devices->size()));
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lucid
