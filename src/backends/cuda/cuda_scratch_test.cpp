// ScratchPool's growth and failure rules and DequantChunkRows, on the host: the device calls are
// replaced by host memory with a budget, which records the order of waits, frees and allocations.
#include "backends/cuda/cuda_scratch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace lucid::cuda {
namespace {

// Host memory standing in for the device: at most `budget` bytes held at once; every call logged.
struct FakeDevice {
  explicit FakeDevice(size_t b) : budget(b) {}
  size_t budget;
  size_t held = 0;
  bool fail_copies = false;
  std::vector<std::string> log;
  std::vector<std::pair<void*, size_t>> live;

  ScratchMemory Memory() {
    ScratchMemory m;
    m.alloc = [this](size_t bytes, std::string* why) -> void* {
      if (held + bytes > budget) {
        log.push_back("fail " + std::to_string(bytes));
        *why = "out of memory";
        return nullptr;
      }
      void* p = std::malloc(bytes);
      held += bytes;
      live.push_back({p, bytes});
      log.push_back("alloc " + std::to_string(bytes));
      return p;
    };
    m.free = [this](void* p) {
      for (auto it = live.begin(); it != live.end(); ++it)
        if (it->first == p) {
          held -= it->second;
          log.push_back("free " + std::to_string(it->second));
          live.erase(it);
          std::free(p);
          return;
        }
      ADD_FAILURE() << "freed a pointer the fake device never gave";
    };
    m.wait = [this] { log.push_back("wait"); };
    m.copy = [this](void* dst, const void* host, size_t bytes, std::string* why) {
      if (fail_copies) {
        *why = "copy refused";
        return false;
      }
      std::memcpy(dst, host, bytes);
      log.push_back("copy " + std::to_string(bytes));
      return true;
    };
    return m;
  }
};

using B = ScratchPool::Buffer;

TEST(ScratchPoolTest, GrowsOnlyPastTheLargestRequestAndWaitsBeforeFreeing) {
  FakeDevice dev(1 << 20);
  {
    ScratchPool pool(dev.Memory());
    void* a = pool.Get(B::kWeight, 100);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(pool.Get(B::kWeight, 60), a);   // smaller: the same buffer, no call
    EXPECT_EQ(pool.Get(B::kWeight, 100), a);  // equal: the same
    ASSERT_NE(pool.Get(B::kWeight, 300), nullptr);
    EXPECT_EQ(dev.log, (std::vector<std::string>{"alloc 100", "wait", "free 100", "alloc 300"}));
    ASSERT_NE(pool.Get(B::kTopK, 0), nullptr);  // zero bytes: still a valid pointer
    EXPECT_EQ(pool.held_bytes(), 301);
    EXPECT_TRUE(pool.TakeError().ok());
  }
  // Destruction waits once, then frees everything.
  EXPECT_EQ(dev.held, 0u);
  const std::vector<std::string> tail(dev.log.end() - 3, dev.log.end());
  EXPECT_EQ(tail[0], "wait");
  EXPECT_EQ(dev.log.back().rfind("free", 0), 0u);
}

TEST(ScratchPoolTest, AFailedGrowthReturnsNullAndIsReportedOnceNamingTheBufferAndSize) {
  FakeDevice dev(1000);
  ScratchPool pool(dev.Memory());
  ASSERT_NE(pool.Get(B::kAttention, 400), nullptr);
  ASSERT_NE(pool.Get(B::kMetadata, 100), nullptr);
  // 400 + 100 held; asking 2000 for attention frees its 400 first, then fails.
  EXPECT_EQ(pool.Get(B::kAttention, 2000), nullptr);
  EXPECT_EQ(pool.Get(B::kWeight, 5000), nullptr);  // a second failure: the first is kept
  EXPECT_EQ(pool.held_bytes(), 100);
  const Status e = pool.TakeError();
  EXPECT_EQ(e.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(e.message().find("attention partials"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("2000 bytes"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("out of memory"), std::string::npos) << e.message();
  EXPECT_TRUE(pool.TakeError().ok());  // taken: cleared
  // The failed buffer is empty, not stale: a later request that fits is served afresh.
  void* p = pool.Get(B::kAttention, 300);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(pool.held_bytes(), 400);
  EXPECT_EQ(dev.log.back(), "alloc 300");
}

TEST(ScratchPoolTest, BuffersAreIndependent) {
  FakeDevice dev(1 << 20);
  ScratchPool pool(dev.Memory());
  void* w = pool.Get(B::kWeight, 64);
  void* a = pool.Get(B::kActivations, 64);
  ASSERT_NE(w, nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(w, a);  // a matmul holds both at once
  EXPECT_EQ(pool.Get(B::kWeight, 64), w);
  EXPECT_EQ(pool.Get(B::kActivations, 32), a);
}

TEST(ScratchPoolTest, AnUploadOfTheBytesTheBufferHoldsCopiesNothing) {
  FakeDevice dev(1 << 20);
  ScratchPool pool(dev.Memory());
  const std::vector<int64_t> rows = {7, 3, 9}, other = {7, 3, 8}, longer = {1, 2, 3, 4, 5};
  void* a = pool.Upload(B::kKvRows, rows.data(), 24);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.Upload(B::kKvRows, rows.data(), 24), a);  // a step's next layer: no copy
  EXPECT_EQ(std::count(dev.log.begin(), dev.log.end(), "copy 24"), 1);
  ASSERT_EQ(pool.Upload(B::kKvRows, other.data(), 24), a);  // new bytes: copied in place
  EXPECT_EQ(std::count(dev.log.begin(), dev.log.end(), "copy 24"), 2);
  EXPECT_EQ(std::memcmp(a, other.data(), 24), 0);
  void* b = pool.Upload(B::kKvRows, longer.data(), 40);  // grown: copied into the new memory
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::memcmp(b, longer.data(), 40), 0);
  EXPECT_EQ(dev.log.back(), "copy 40");
  // Another use of the buffer forgets what it held.
  ASSERT_NE(pool.Get(B::kKvRows, 8), nullptr);
  pool.Upload(B::kKvRows, longer.data(), 40);
  EXPECT_EQ(dev.log.back(), "copy 40");
  EXPECT_EQ(std::count(dev.log.begin(), dev.log.end(), "copy 40"), 2);
  // Buffers hold their own bytes: the same bytes elsewhere are copied there.
  pool.Upload(B::kLengths, longer.data(), 40);
  EXPECT_EQ(std::count(dev.log.begin(), dev.log.end(), "copy 40"), 3);
}

TEST(ScratchPoolTest, ContentMadeFromAKeyIsFoundByThatKeyOnly) {
  FakeDevice dev(1 << 20);
  ScratchPool pool(dev.Memory());
  const std::vector<uint8_t> key = {1, 2, 3}, other = {1, 2, 4};
  const std::vector<float> cs = {0.5f, -0.25f};
  EXPECT_EQ(pool.Holding(B::kRope, key), nullptr);
  void* d = pool.Upload(B::kRope, cs.data(), 8, key);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(pool.Holding(B::kRope, key), d);
  EXPECT_EQ(pool.Holding(B::kRope, other), nullptr);
  EXPECT_EQ(pool.Holding(B::kRope, {}), nullptr);
  EXPECT_EQ(pool.Holding(B::kKvRows, key), nullptr);
}

TEST(ScratchPoolTest, AFailedCopyIsReportedAndForgetsTheBuffersContent) {
  FakeDevice dev(1 << 20);
  ScratchPool pool(dev.Memory());
  const std::vector<int32_t> ids = {5, 6};
  ASSERT_NE(pool.Upload(B::kMetadata, ids.data(), 8), nullptr);
  dev.fail_copies = true;
  const std::vector<int32_t> next = {8, 9};
  EXPECT_EQ(pool.Upload(B::kMetadata, next.data(), 8), nullptr);
  const Status e = pool.TakeError();
  EXPECT_EQ(e.code(), StatusCode::kInternal);
  EXPECT_NE(e.message().find("copy refused"), std::string::npos) << e.message();
  dev.fail_copies = false;
  // The first bytes again: the buffer's memory may hold anything now, so they are copied.
  const size_t copies = static_cast<size_t>(std::count(dev.log.begin(), dev.log.end(), "copy 8"));
  ASSERT_NE(pool.Upload(B::kMetadata, ids.data(), 8), nullptr);
  EXPECT_EQ(static_cast<size_t>(std::count(dev.log.begin(), dev.log.end(), "copy 8")), copies + 1);
}

TEST(DequantChunkRowsTest, ChunksStayUnderTheCapOn128RowBoundaries) {
  // GLM-5's vocabulary projection as f32: 154880 x 6144 x 4 bytes is 3.8 GB whole.
  const int64_t rows = DequantChunkRows(154880, 6144, 4);
  EXPECT_LE(static_cast<size_t>(rows) * 6144 * 4, kDequantChunkBytes);
  EXPECT_EQ(rows % 128, 0);
  EXPECT_GT(static_cast<size_t>(rows + 128) * 6144 * 4, kDequantChunkBytes);  // as many as fit
  // A weight under the cap is one chunk.
  EXPECT_EQ(DequantChunkRows(2048, 7168, 2), 2048);
  // A row wider than the cap is still one row per chunk.
  EXPECT_EQ(DequantChunkRows(10, int64_t{1} << 26, 4), 1);
  // Fewer than 128 rows fit: no rounding to 0.
  const int64_t wide = int64_t{1} << 20;  // 4 MiB per f32 row: 16 rows fit
  EXPECT_EQ(DequantChunkRows(1000, wide, 4), 16);
}

}  // namespace
}  // namespace lucid::cuda
