#include "core/communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace lucid {
namespace {

TEST(SingleProcessCommunicator, CollectivesOfOneRankAreCopies) {
  auto c = MakeSingleProcessCommunicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> v = {1.5f, -2.0f};
  ASSERT_TRUE(c->AllReduceSum(v.data(), 2).ok());
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  std::vector<float> g(2, 0.0f);
  ASSERT_TRUE(c->AllGather(v.data(), g.data(), 2 * sizeof(float)).ok());
  EXPECT_EQ(g, v);
  std::vector<float> rs(2, 0.0f);
  ASSERT_TRUE(c->ReduceScatterSum(v.data(), rs.data(), 2).ok());
  EXPECT_EQ(rs, v);
  std::vector<float> a(2, 0.0f);
  ASSERT_TRUE(c->AllToAll(v.data(), a.data(), 2 * sizeof(float)).ok());
  EXPECT_EQ(a, v);
  EXPECT_TRUE(c->Broadcast(v.data(), 8, 0).ok());
  EXPECT_EQ(c->Broadcast(v.data(), 8, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->AllReduceSum(v.data(), -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->Barrier().ok());
}

TEST(PollUntilDone, ReturnsWhenDoneOnErrorOrAtTheTimeout) {
  int calls = 0;
  StatusOr<bool> done = PollUntilDone(std::chrono::milliseconds(5000),
                                      [&]() -> StatusOr<bool> { return ++calls == 3; });
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_EQ(calls, 3);
  StatusOr<bool> failed = PollUntilDone(std::chrono::milliseconds(5000), []() -> StatusOr<bool> {
    return Status(StatusCode::kUnavailable, "peer gone");
  });
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<bool> never =
      PollUntilDone(std::chrono::milliseconds(20), []() -> StatusOr<bool> { return false; });
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(*never);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
}

}  // namespace
}  // namespace lucid
