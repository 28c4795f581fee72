#include "core/communicator.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace lucid
