#include "core/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lucid {
namespace {

TEST(ShapeHelpers, NumElementsStridesAndString) {
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({5, 0, 7}), 0);
  EXPECT_EQ(NumElements({}), 1);  // a scalar
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(ContiguousStrides({7}), (Shape{1}));
  EXPECT_EQ(ContiguousStrides({}), Shape{});
  EXPECT_EQ(ShapeToString({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(ShapeToString({}), "[]");
}

TEST(Tensor, DefaultIsInvalid) {
  Tensor t;
  EXPECT_FALSE(t.valid());
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(t.raw(), nullptr);
}

TEST(Tensor, ZerosIsZeroedAlignedAndContiguous) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kF4E2M1, DType::kI64}) {
    Tensor t = Tensor::Zeros(dt, {3, 50});
    EXPECT_EQ(t.device(), Device::kCpu);
    ASSERT_TRUE(t.valid());
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), (Shape{3, 50}));
    EXPECT_EQ(t.strides(), (Shape{50, 1}));
    EXPECT_EQ(t.rank(), 2);
    EXPECT_EQ(t.size(0), 3);
    EXPECT_EQ(t.size(-1), 50);
    EXPECT_EQ(t.numel(), 150);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << DTypeName(dt);
    const auto* bytes = t.data<const uint8_t>();
    for (size_t i = 0; i < t.nbytes(); ++i)
      ASSERT_EQ(bytes[i], 0) << DTypeName(dt) << " byte " << i;
  }
}

TEST(Tensor, EmptyWithNoElementsIsValid) {
  Tensor t = Tensor::Empty(DType::kF32, {0, 8});
  EXPECT_TRUE(t.valid());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
}

TEST(Tensor, Nbytes) {
  EXPECT_EQ(Tensor::Empty(DType::kF32, {3, 4}).nbytes(), 48u);
  EXPECT_EQ(Tensor().nbytes(), 0u);                        // default: no storage, not one scalar
  EXPECT_EQ(Tensor::Empty(DType::kF32, {}).nbytes(), 4u);  // a real scalar
  EXPECT_EQ(Tensor::Empty(DType::kBF16, {3, 4}).nbytes(), 24u);
  EXPECT_EQ(Tensor::Empty(DType::kF8E5M2, {3, 4}).nbytes(), 12u);
  EXPECT_EQ(Tensor::Empty(DType::kUE8M0, {7}).nbytes(), 7u);
  EXPECT_EQ(Tensor::Empty(DType::kBool, {5}).nbytes(), 5u);
  EXPECT_EQ(Tensor::Empty(DType::kF64, {2}).nbytes(), 16u);
  // fp4 is packed two per byte.
  EXPECT_EQ(Tensor::Empty(DType::kF4E2M1, {3, 4}).nbytes(), 6u);
  EXPECT_EQ(Tensor::Empty(DType::kF4E2M1, {1, 2}).nbytes(), 1u);
  EXPECT_EQ(Tensor::Empty(DType::kF4E2M1, {4096, 7168}).nbytes(), size_t{4096} * 7168 / 2);
  EXPECT_EQ(Tensor::Empty(DType::kF4E2M1, {5}).nbytes(), 3u);  // odd count rounds up
}

TEST(Tensor, DebugString) {
  EXPECT_EQ(Tensor::Empty(DType::kF32, {3, 4}).DebugString(), "f32[3, 4]");
  EXPECT_EQ(Tensor::Empty(DType::kF4E2M1, {2}).DebugString(), "f4_e2m1[2]");
}

TEST(Tensor, BorrowViewsCallerMemory) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::Borrow(DType::kF32, {2, 3}, buf.data());
  EXPECT_TRUE(t.valid());
  EXPECT_EQ(t.raw(), buf.data());
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  t.data<float>()[4] = 50;
  EXPECT_EQ(buf[4], 50);
}

TEST(Tensor, BorrowKeepsKeepaliveAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  std::weak_ptr<std::vector<float>> watch = owner;
  Tensor t = Tensor::Borrow(DType::kF32, {4}, owner->data(), owner);
  owner.reset();
  ASSERT_FALSE(watch.expired()) << "the view must hold the keepalive";
  EXPECT_EQ(t.data<float>()[3], 4);

  // Copies and derived views share it too.
  Tensor copy = t;
  Tensor row = t.Reshape({2, 2}).Rows(1, 2);
  t = Tensor();
  EXPECT_FALSE(watch.expired());
  copy = Tensor();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(row.data<float>()[0], 3);
  row = Tensor();
  EXPECT_TRUE(watch.expired()) << "the last view released the keepalive";
}

TEST(Tensor, CopySharesStorage) {
  Tensor a = Tensor::Empty(DType::kI32, {4});
  Tensor b = a;
  EXPECT_EQ(a.raw(), b.raw());
  b.data<int32_t>()[2] = 7;
  EXPECT_EQ(a.data<int32_t>()[2], 7);
}

TEST(Tensor, ReshapeIsAViewWithNewStrides) {
  Tensor t = Tensor::Empty(DType::kF32, {2, 3, 4});
  for (int i = 0; i < 24; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor r = t.Reshape({6, 4});
  EXPECT_EQ(r.raw(), t.raw());
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.strides(), (Shape{4, 1}));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.data<float>()[23], 23);
  r.data<float>()[0] = -1;
  EXPECT_EQ(t.data<float>()[0], -1);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));  // the original is unchanged
  EXPECT_EQ(t.Reshape({24}).strides(), (Shape{1}));
}

TEST(TensorDeathTest, ReshapeRequiresSameElementCount) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor t = Tensor::Empty(DType::kF32, {2, 3});
  EXPECT_DEATH((void)t.Reshape({4, 2}), "Reshape");
}

TEST(Tensor, RowsIsAViewIntoDimZero) {
  Tensor t = Tensor::Empty(DType::kBF16, {5, 3});
  auto* d = t.data<uint16_t>();
  for (int i = 0; i < 15; ++i) d[i] = static_cast<uint16_t>(i);
  Tensor r = t.Rows(1, 4);
  EXPECT_EQ(r.shape(), (Shape{3, 3}));
  EXPECT_EQ(r.strides(), (Shape{3, 1}));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.raw(), static_cast<char*>(t.raw()) + 1 * 3 * 2);
  EXPECT_EQ(r.data<uint16_t>()[0], 3);
  EXPECT_EQ(r.nbytes(), 18u);
  r.data<uint16_t>()[0] = 99;  // writes through
  EXPECT_EQ(d[3], 99);

  Tensor none = t.Rows(2, 2);
  EXPECT_EQ(none.shape(), (Shape{0, 3}));
  EXPECT_TRUE(none.valid());
  EXPECT_EQ(t.Rows(0, 5).raw(), t.raw());
}

TEST(Tensor, RowsOfPackedFp4) {
  Tensor t = Tensor::Empty(DType::kF4E2M1, {4, 6});  // 3 bytes per row
  for (size_t i = 0; i < t.nbytes(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  Tensor r = t.Rows(2, 4);
  EXPECT_EQ(r.raw(), static_cast<char*>(t.raw()) + 6);
  EXPECT_EQ(r.nbytes(), 6u);
  EXPECT_EQ(r.data<uint8_t>()[0], 6);
}

TEST(TensorDeathTest, RowsChecksRangeAndPacking) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor t = Tensor::Empty(DType::kF32, {4, 2});
  EXPECT_DEATH((void)t.Rows(3, 5), "Rows out of range");
  EXPECT_DEATH((void)t.Rows(-1, 2), "Rows out of range");
  EXPECT_DEATH((void)t.Rows(3, 2), "Rows out of range");
  // An odd fp4 row length would put row 1 in the middle of a byte.
  Tensor odd = Tensor::Empty(DType::kF4E2M1, {4, 3});
  EXPECT_DEATH((void)odd.Rows(1, 2), "splits a packed byte");
}

TEST(Tensor, CloneIsADeepCopy) {
  Tensor t = Tensor::Empty(DType::kF32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i + 1);
  Tensor c = t.Clone();
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_EQ(c.shape(), t.shape());
  EXPECT_EQ(c.strides(), t.strides());
  EXPECT_EQ(c.dtype(), t.dtype());
  EXPECT_EQ(std::memcmp(c.raw(), t.raw(), t.nbytes()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.raw()) % 64, 0u);
  c.data<float>()[0] = 100;
  EXPECT_EQ(t.data<float>()[0], 1);
}

TEST(Tensor, CloneOwnsItsMemory) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = owner;
  Tensor c = Tensor::Borrow(DType::kF32, {3, 2}, owner->data(), owner).Rows(1, 3).Clone();
  owner.reset();
  EXPECT_TRUE(watch.expired()) << "a clone must not hold the source's keepalive";
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.data<float>()[0], 3);  // only the selected rows were copied
  EXPECT_EQ(c.data<float>()[3], 6);
}

// Host memory that every allocation fills with 0xAB first, and that counts its allocations: shows
// which constructors write the bytes and where a tensor's memory comes from.
class PoisonAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCuda; }  // a stand-in device tag
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    ++count;
    StatusOr<std::shared_ptr<void>> m = HostAllocator().Allocate(bytes);
    if (m.ok()) std::memset(m->get(), 0xAB, std::max<size_t>((bytes + 63) / 64 * 64, 64));
    return m;
  }
  void Zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  int count = 0;
};

TEST(Tensor, EmptyLeavesTheAllocatorsBytesAndTakesItsDevice) {
  PoisonAllocator a;
  Tensor t = Tensor::Empty(DType::kF32, {3, 5}, a);
  EXPECT_EQ(a.count, 1);
  EXPECT_EQ(t.device(), Device::kCuda);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  const auto* bytes = t.data<const uint8_t>();
  for (size_t i = 0; i < t.nbytes(); ++i) ASSERT_EQ(bytes[i], 0xAB) << "Empty wrote byte " << i;
  Tensor z = Tensor::Zeros(DType::kBF16, {7}, a);
  EXPECT_EQ(a.count, 2);
  for (size_t i = 0; i < z.nbytes(); ++i) ASSERT_EQ(z.data<const uint8_t>()[i], 0) << i;
}

// Host memory with a budget on the bytes live at once: an allocation past it fails, as a full
// device does.
class BudgetAllocator final : public Allocator {
 public:
  explicit BudgetAllocator(int64_t budget) : budget_(budget) {}
  Device device() const override { return Device::kCuda; }  // a stand-in device tag
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    const int64_t n = static_cast<int64_t>(bytes);
    if (*live_ + n > budget_) return ResourceExhausted("budget: " + std::to_string(n) + " bytes");
    LUCID_ASSIGN_OR_RETURN(std::shared_ptr<void> m, HostAllocator().Allocate(bytes));
    *live_ += n;
    return std::shared_ptr<void>(m.get(), [m, n, live = live_](void*) { *live -= n; });
  }
  void Zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  std::optional<int64_t> held_bytes() const override { return *live_; }

 private:
  int64_t budget_;
  std::shared_ptr<int64_t> live_ = std::make_shared<int64_t>(0);
};

TEST(Tensor, MemoryThatRunsOutIsTheAllocatorsStatusNotAnAbort) {
  BudgetAllocator a(1000);
  StatusOr<Tensor> fits = Tensor::Allocate(DType::kF32, {10, 10}, a);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->nbytes(), 400u);
  StatusOr<Tensor> too_big = Tensor::Allocate(DType::kF32, {20, 10}, a);
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(too_big.status().message(), "budget: 800 bytes");
  try {
    (void)Tensor::Zeros(DType::kF32, {20, 10}, a);
    ADD_FAILURE() << "Zeros past the budget returned";
  } catch (const AllocationError& e) {
    EXPECT_EQ(e.status().message(), "budget: 800 bytes");
    EXPECT_NE(std::string(e.what()).find("budget: 800 bytes"), std::string::npos);
  }
  // A step's body: the tensors it made are released as the error unwinds it.
  int reached = 0;
  const Status s = StatusOfAllocations([&] {
    Tensor x = Tensor::Empty(DType::kF32, {50}, a);  // 200 bytes
    ++reached;
    Tensor y = Tensor::Empty(DType::kF32, {200}, a);  // 800: past the 400 left
    ++reached;
    return OkStatus();
  });
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "budget: 800 bytes");
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(a.held_bytes(), 400);  // `fits` only: x was released
  EXPECT_TRUE(StatusOfAllocations([] { return OkStatus(); }).ok());
  EXPECT_EQ(StatusOfAllocations([] { return InvalidArgument("x"); }).code(),
            StatusCode::kInvalidArgument);
}

TEST(Tensor, BorrowCarriesTheDeviceItIsGiven) {
  float v[4] = {1, 2, 3, 4};
  EXPECT_EQ(Tensor::Borrow(DType::kF32, {4}, v).device(), Device::kCpu);
  Tensor d = Tensor::Borrow(DType::kF32, {2, 2}, v, nullptr, Device::kCuda);
  EXPECT_EQ(d.device(), Device::kCuda);
  EXPECT_EQ(d.Rows(1, 2).device(), Device::kCuda);  // views keep it
  EXPECT_EQ(d.Reshape({4}).device(), Device::kCuda);
  EXPECT_STREQ(DeviceName(Device::kCuda), "cuda");
  EXPECT_STREQ(DeviceName(Device::kCpu), "cpu");
}

TEST(Tensor, ClonePackedFp4) {
  Tensor t = Tensor::Empty(DType::kF4E2M1, {2, 4});
  const uint8_t bytes[] = {0x21, 0x43, 0x65, 0x87};
  std::memcpy(t.raw(), bytes, 4);
  Tensor c = t.Clone();
  EXPECT_EQ(c.nbytes(), 4u);
  EXPECT_EQ(std::memcmp(c.raw(), bytes, 4), 0);
}

}  // namespace
}  // namespace lucid
