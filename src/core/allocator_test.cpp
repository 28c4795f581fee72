#include "core/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace lucid {
namespace {

// Host memory, counting the allocations a Workspace takes from it.
class CountingAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCpu; }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    ++count;
    last = bytes;
    return HostAllocator().Allocate(bytes);
  }
  void Zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  int count = 0;
  size_t last = 0;
};

TEST(HostAllocator, AlignedUsableToTheNext64AndZeroable) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}}) {
    StatusOr<std::shared_ptr<void>> m = HostAllocator().Allocate(n);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->get()) % 64, 0u) << n;
    const size_t usable = std::max<size_t>((n + 63) / 64 * 64, 64);
    std::memset(m->get(), 0x5A, usable);  // the whole rounded extent is ours (ASan would say)
    HostAllocator().Zero(m->get(), usable);
    for (size_t i = 0; i < usable; ++i) ASSERT_EQ(static_cast<uint8_t*>(m->get())[i], 0);
  }
  EXPECT_EQ(HostAllocator().device(), Device::kCpu);
}

TEST(HostAllocator, AnImpossibleSizeIsAStatusNotAnAbort) {
  StatusOr<std::shared_ptr<void>> m = HostAllocator().Allocate(~size_t{0} / 2);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
}

// A step's allocations, as a model makes them: sizes in bytes.
void Step(Workspace& ws, const std::vector<size_t>& sizes, std::vector<void*>* ptrs = nullptr) {
  ws.Reset();
  std::vector<std::shared_ptr<void>> held;
  for (size_t n : sizes) {
    StatusOr<std::shared_ptr<void>> m = ws.Allocate(n);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->get()) % 64, 0u);
    std::memset(m->get(), 0x11, n);
    if (ptrs) ptrs->push_back(m->get());
    held.push_back(*m);
  }
}

TEST(Workspace, AStepNoLargerThanOneSeenTakesNothingFromTheParent) {
  CountingAllocator parent;
  Workspace ws(parent);
  const std::vector<size_t> big = {4096, 100, 70000, 3, 9000};
  Step(ws, big);
  const int after_first = parent.count;
  EXPECT_GE(after_first, 1);
  Step(ws, big);  // the blocks of the first step are merged into one here
  const int after_second = parent.count;
  EXPECT_LE(after_second, after_first + 1);
  for (int i = 0; i < 5; ++i) Step(ws, big);
  Step(ws, {10, 20, 30});
  Step(ws, big);
  EXPECT_EQ(parent.count, after_second) << "steady steps must not allocate";
  EXPECT_EQ(ws.blocks_allocated(), parent.count);
}

TEST(Workspace, AllocationsOfOneStepAreDisjointAndResetReusesThem) {
  CountingAllocator parent;
  Workspace ws(parent, 1 << 20);
  std::vector<void*> a, b;
  Step(ws, {100, 200, 300}, &a);
  Step(ws, {100, 200, 300}, &b);
  EXPECT_EQ(a, b) << "after Reset the same requests get the same memory";
  const auto* p0 = static_cast<const char*>(a[0]);
  EXPECT_GE(static_cast<const char*>(a[1]) - p0, 100);
  EXPECT_GE(static_cast<const char*>(a[2]) - static_cast<const char*>(a[1]), 200);
  EXPECT_EQ(parent.count, 1);
}

TEST(Workspace, MemoryHeldAcrossResetIsNeverHandedOutAgain) {
  CountingAllocator parent;
  Workspace ws(parent, 4096);
  Tensor kept = Tensor::Empty(DType::kF32, {16}, ws);
  for (int i = 0; i < 16; ++i) kept.data<float>()[i] = static_cast<float>(i);
  ws.Reset();
  Tensor next = Tensor::Empty(DType::kF32, {16}, ws);
  for (int i = 0; i < 16; ++i) next.data<float>()[i] = -1.0f;
  EXPECT_NE(next.raw(), kept.raw());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(kept.data<float>()[i], static_cast<float>(i));
  EXPECT_EQ(kept.device(), Device::kCpu);
}

TEST(Workspace, AScopeGivesItsMemoryToWhatComesAfterIt) {
  CountingAllocator parent;
  Workspace ws(parent, 1 << 20);
  Tensor x = Tensor::Empty(DType::kF32, {16}, ws);  // 64 bytes, held through the scope
  void* first = nullptr;
  {
    Workspace::Scope layer(ws);
    Tensor a = Tensor::Empty(DType::kF32, {250}, ws);  // 1000 bytes: 1024 taken
    Tensor b = Tensor::Empty(DType::kF32, {500}, ws);  // 2000: 2048
    first = a.raw();
    EXPECT_EQ(ws.used(), 64u + 1024 + 2048);
  }
  EXPECT_EQ(ws.used(), 64u);
  EXPECT_EQ(ws.peak(), 64u + 1024 + 2048);
  Tensor c = Tensor::Empty(DType::kF32, {8}, ws);
  EXPECT_EQ(c.raw(), first);
  EXPECT_EQ(ws.escaped_scopes(), 0);
  EXPECT_EQ(parent.count, 1);
}

TEST(Workspace, ATensorThatOutlivesItsScopeKeepsItsMemory) {
  CountingAllocator parent;
  Workspace ws(parent, 1 << 20);
  Tensor kept;
  {
    Workspace::Scope outer(ws);
    {
      Workspace::Scope inner(ws);
      kept = Tensor::Empty(DType::kF32, {16}, ws);
      for (int i = 0; i < 16; ++i) kept.data<float>()[i] = static_cast<float>(i);
      Tensor dead = Tensor::Empty(DType::kF32, {16}, ws);
    }
    EXPECT_EQ(ws.escaped_scopes(), 1);
    Tensor after = Tensor::Empty(DType::kF32, {32}, ws);
    EXPECT_NE(after.raw(), kept.raw());
    std::memset(after.raw(), 0xFF, after.nbytes());
  }
  // The outer scope cannot give back what the inner one could not.
  EXPECT_EQ(ws.escaped_scopes(), 2);
  Tensor next = Tensor::Empty(DType::kF32, {64}, ws);
  std::memset(next.raw(), 0xFF, next.nbytes());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(kept.data<float>()[i], static_cast<float>(i));
}

// Host memory that counts the bytes it has handed out and not had back.
class LiveBytesAllocator final : public Allocator {
 public:
  Device device() const override { return Device::kCpu; }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    LUCID_ASSIGN_OR_RETURN(std::shared_ptr<void> m, HostAllocator().Allocate(bytes));
    *live_ += static_cast<int64_t>(bytes);
    return std::shared_ptr<void>(
        m.get(), [m, bytes, live = live_](void*) { *live -= static_cast<int64_t>(bytes); });
  }
  void Zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  std::optional<int64_t> held_bytes() const override { return *live_; }

 private:
  std::shared_ptr<int64_t> live_ = std::make_shared<int64_t>(0);
};

// A step as a model runs one: the residual stream for the whole step, then layers of activations
// in scopes, each a little larger than the one before.
void LayeredStep(Workspace& ws, int layers) {
  ws.Reset();
  Tensor x = Tensor::Empty(DType::kF32, {1024}, ws);  // 4 KiB
  for (int l = 0; l < layers; ++l) {
    Workspace::Scope layer(ws);
    Tensor a = Tensor::Empty(DType::kF32, {2048 + 16 * l}, ws);
    Tensor b = Tensor::Empty(DType::kF32, {4096}, ws);
    std::memset(a.raw(), l, a.nbytes());
    std::memset(b.raw(), l, b.nbytes());
  }
}

TEST(Workspace, LayersInScopesNeedTheLargestLayerNotTheSum) {
  LiveBytesAllocator parent;
  Workspace ws(parent);
  const int64_t layer_max = (2048 + 16 * 9) * 4 + 4096 * 4;  // the last layer's, 64-aligned
  const int64_t step_peak = 4096 + layer_max;
  LayeredStep(ws, 10);
  EXPECT_EQ(static_cast<int64_t>(ws.peak()), step_peak);
  // Growing takes new blocks while the residual stream's stays: at most the peak, again.
  EXPECT_LE(*parent.held_bytes(), 2 * step_peak);
  EXPECT_EQ(ws.escaped_scopes(), 0);
  LayeredStep(ws, 10);  // the blocks are merged into one of the first step's peak
  EXPECT_EQ(*parent.held_bytes(), step_peak);
  const int64_t blocks = ws.blocks_allocated();
  for (int i = 0; i < 3; ++i) LayeredStep(ws, 10);
  EXPECT_EQ(ws.blocks_allocated(), blocks);
  EXPECT_EQ(*parent.held_bytes(), step_peak);
}

}  // namespace
}  // namespace lucid
