#include "core/timed_communicator.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace lucid {
namespace {

TEST(TimedCommunicator, ForwardsEveryCollectiveAndCountsCallsAndBytes) {
  auto single = MakeSingleProcessCommunicator();
  TimedCommunicator c(*single);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.kind(), "single");
  std::vector<float> v = {1.5f, -2.0f, 3.0f};
  ASSERT_TRUE(c.AllReduceSum(v.data(), 3).ok());
  ASSERT_TRUE(c.AllReduceSum(v.data(), 2).ok());
  std::vector<float> g(3, 0.0f);
  ASSERT_TRUE(c.AllGather(v.data(), g.data(), 3 * sizeof(float)).ok());
  EXPECT_EQ(g, v);  // the wrapped communicator's result reaches the caller
  std::vector<float> rs(3, 0.0f);
  ASSERT_TRUE(c.ReduceScatterSum(v.data(), rs.data(), 3).ok());
  EXPECT_EQ(rs, v);
  std::vector<float> a(3, 0.0f);
  ASSERT_TRUE(c.AllToAll(v.data(), a.data(), 3 * sizeof(float)).ok());
  EXPECT_EQ(a, v);
  // A refused call is the wrapped one's refusal, and is still counted.
  EXPECT_EQ(c.Broadcast(v.data(), 8, 1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.Barrier().ok());

  EXPECT_EQ(c.Tally(Collective::kAllReduce).calls, 2);
  EXPECT_EQ(c.Tally(Collective::kAllReduce).bytes, 5 * 4);
  EXPECT_EQ(c.Tally(Collective::kAllGather).bytes, 12);
  EXPECT_EQ(c.Tally(Collective::kReduceScatter).bytes, 12);
  EXPECT_EQ(c.Tally(Collective::kAllToAll).bytes, 12);
  EXPECT_EQ(c.Tally(Collective::kBroadcast).calls, 1);
  EXPECT_EQ(c.Tally(Collective::kBroadcast).bytes, 8);
  EXPECT_EQ(c.Tally(Collective::kBarrier).calls, 1);
  EXPECT_EQ(c.Total().calls, 7);
  EXPECT_EQ(c.Total().bytes, 20 + 12 + 12 + 12 + 8);
  c.Reset();
  EXPECT_EQ(c.Total().calls, 0);
  EXPECT_EQ(c.Total().seconds, 0.0);
  EXPECT_STREQ(CollectiveName(Collective::kAllToAll), "all-to-all");
}

// A communicator whose barrier takes 30 ms (a slow peer): the wrapper's time covers the wait.
class SlowBarrier final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "slow"; }
  std::string host() const override { return "here"; }
  Status AllReduceSum(float*, int64_t) override { return OkStatus(); }
  Status AllGather(const void*, void*, int64_t) override { return OkStatus(); }
  Status ReduceScatterSum(const float*, float*, int64_t) override { return OkStatus(); }
  Status AllToAllV(const void*, std::span<const int64_t>, std::span<const int64_t>, void*,
                   std::span<const int64_t>, std::span<const int64_t>) override {
    return OkStatus();
  }
  Status Broadcast(void*, int64_t, int) override { return OkStatus(); }
  Status Barrier() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return Status(StatusCode::kUnavailable, "peer gone");
  }
};

TEST(TimedCommunicator, TimeCoversTheWaitInsideTheWrappedCall) {
  SlowBarrier slow;
  TimedCommunicator c(slow);
  EXPECT_EQ(c.Barrier().code(), StatusCode::kUnavailable);
  EXPECT_GE(c.Tally(Collective::kBarrier).seconds, 0.029);
  EXPECT_EQ(c.Tally(Collective::kAllReduce).seconds, 0.0);
}

}  // namespace
}  // namespace lucid
