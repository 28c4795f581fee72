// The guard itself: device memory faults outside an op, opens inside one, host memory handed to
// an op where ops/ops.h wants device memory is recorded, and copies keep every byte.
#include "backends/cpu/guarded_device.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <vector>

#include "backends/cpu/cpu_ops.h"

namespace lucid {
namespace {

Tensor DeviceRow(GuardedDeviceBackend& b, const std::vector<float>& v) {
  Tensor t = Tensor::Empty(DType::kF32, {1, static_cast<int64_t>(v.size())}, b.allocator());
  b.ops().CopyFromHost(v.data(), t.raw(), v.size() * sizeof(float));
  return t;
}

TEST(GuardedDevice, HostReadOfDeviceMemoryOutsideAnOpFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const CpuOps cpu;
  GuardedDeviceBackend b(cpu);
  Tensor t = DeviceRow(b, {1, 2, 3});
  EXPECT_EXIT(
      {
        volatile float v = t.data<float>()[0];
        (void)v;
        std::exit(0);
      },
      [](int status) {  // SIGSEGV, or a sanitizer's report of it (an exit code)
        return (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) ||
               (WIFEXITED(status) && WEXITSTATUS(status) != 0);
      },
      "");
  // The same read inside an access scope (what an op runs in) sees the value.
  GuardedMemory::Access open(b.memory());
  EXPECT_EQ(t.data<float>()[1], 2.0f);
}

TEST(GuardedDevice, OpsComputeAsTheWrappedOpsAndCopiesKeepEveryByte) {
  const CpuOps cpu;
  GuardedDeviceBackend b(cpu);
  Tensor x = DeviceRow(b, {1.5f, -2.0f, 4.0f}), y = DeviceRow(b, {0.25f, 8.0f, -1.0f});
  b.ops().Accumulate(x, y);
  StatusOr<Tensor> host = b.ReadableOnHost(x);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->data<float>()[0], 1.75f);
  EXPECT_EQ(host->data<float>()[1], 6.0f);
  EXPECT_EQ(host->data<float>()[2], 3.0f);
  EXPECT_TRUE(b.memory().Contains(x.raw()));
  EXPECT_FALSE(b.memory().Contains(host->raw()));
  EXPECT_TRUE(b.violations().empty());
}

TEST(GuardedDevice, HostMemoryWhereAnOpWantsDeviceMemoryIsRecordedByName) {
  const CpuOps cpu;
  GuardedDeviceBackend b(cpu);
  Tensor dev = DeviceRow(b, {1, 2});
  Tensor host = Tensor::Empty(DType::kF32, {1, 2});
  host.data<float>()[0] = 3;
  host.data<float>()[1] = 4;
  b.ops().Accumulate(dev, host);  // y on the host
  std::vector<int64_t> rows = {0};
  Tensor out = Tensor::Empty(DType::kF32, {1, 2}, b.allocator());
  b.ops().GatherRows(dev, rows, out);  // rows on the host, as ops.h says: no breach
  const std::vector<std::string> v = b.violations();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "Accumulate: y is host memory");
}

TEST(GuardedDevice, DeviceMemoryWhereAnOpWantsHostMemoryIsRecorded) {
  const CpuOps cpu;
  GuardedDeviceBackend b(cpu);
  Tensor dev = DeviceRow(b, {1, 2});
  Tensor ids = Tensor::Empty(DType::kI64, {1}, b.allocator());
  b.ops().CopyFromHost(std::vector<int64_t>{0}.data(), ids.raw(), sizeof(int64_t));
  Tensor out = Tensor::Empty(DType::kF32, {1, 2}, b.allocator());
  b.ops().GatherRows(dev, std::span<const int64_t>(ids.data<const int64_t>(), 1), out);
  const std::vector<std::string> v = b.violations();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("GatherRows: rows is device memory"), std::string::npos) << v[0];
}

TEST(GuardedDevice, UploadedWeightsAreCopiesInDeviceMemory) {
  const CpuOps cpu;
  GuardedDeviceBackend b(cpu);
  Tensor w = Tensor::Empty(DType::kF32, {2, 2});
  for (int i = 0; i < 4; ++i) w.data<float>()[i] = static_cast<float>(i) - 1.5f;
  StatusOr<Tensor> up = b.UploadWeight(w);
  ASSERT_TRUE(up.ok());
  EXPECT_NE(up->raw(), w.raw());
  EXPECT_TRUE(b.memory().Contains(up->raw(), up->nbytes()));
  StatusOr<Tensor> back = b.ReadableOnHost(*up);
  ASSERT_TRUE(back.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back->data<float>()[i], w.data<float>()[i]);
}

}  // namespace
}  // namespace lucid
