// TpLeaderModel's heartbeat and failure record, and the rank reports of the meeting after loading,
// in one process: a communicator that counts the collectives and fails the ones it is told to
// (the real two-rank runs are the mpi/ ctests).
#include "runtime/tp_step.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <sstream>

#include "runtime/engine_test_util.h"

namespace lucid {
namespace {

Status Unavailable(const std::string& m) { return Status(StatusCode::kUnavailable, m); }

// One rank; every collective is the single-process one's, but broadcasts and barriers are
// counted and fail with kUnavailable from the call numbered fail_*_from on (0: never).
class CountingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "counting"; }
  std::string host() const override { return "here"; }
  Status AllReduceSum(float* d, int64_t n) override { return one_->AllReduceSum(d, n); }
  Status AllGather(const void* s, void* r, int64_t b) override { return one_->AllGather(s, r, b); }
  Status ReduceScatterSum(const float* s, float* r, int64_t n) override {
    return one_->ReduceScatterSum(s, r, n);
  }
  Status AllToAllV(const void* s, std::span<const int64_t> sb, std::span<const int64_t> so, void* r,
                   std::span<const int64_t> rb, std::span<const int64_t> ro) override {
    return one_->AllToAllV(s, sb, so, r, rb, ro);
  }
  Status Broadcast(void* data, int64_t bytes, int root) override {
    ++broadcasts;
    if (fail_broadcast_from > 0 && broadcasts >= fail_broadcast_from)
      return Unavailable("broadcast " + std::to_string(broadcasts) + " failed");
    return one_->Broadcast(data, bytes, root);
  }
  Status Barrier() override {
    ++barriers;
    if (fail_barrier_from > 0 && barriers >= fail_barrier_from)
      return Unavailable("barrier " + std::to_string(barriers) + " failed");
    return OkStatus();
  }

  int broadcasts = 0, barriers = 0;
  int fail_broadcast_from = 0, fail_barrier_from = 0;

 private:
  std::unique_ptr<Communicator> one_ = MakeSingleProcessCommunicator();
};

class TpLeaderModelTest : public ::testing::Test {
 protected:
  std::unique_ptr<Model> local_ = testing_util::LoadTiny("tiny_deepseek_v3");
  KvStorage kv_{local_->kv_spec(), 2, 16, KvDtype::kF32, HostAllocator()};
  CountingCommunicator comm_;
  TpLeaderModel leader_{*local_, comm_};

  Status Step(int32_t token) {
    const std::vector<int32_t> table = {0};
    const std::vector<int32_t> tokens = {token};
    StepInput in;
    AddSequence(in, table, 0, tokens, ChunkRows::kLast);
    StepOutput out;
    return leader_.Forward(in, kv_, &out);
  }
};

TEST_F(TpLeaderModelTest, AHeartbeatIsABroadcastThenABarrier) {
  ASSERT_TRUE(leader_.Heartbeat().ok());
  EXPECT_EQ(comm_.broadcasts, 1);
  // The barrier is what needs every rank: a broadcast from the root may complete before a dead
  // peer is noticed.
  EXPECT_EQ(comm_.barriers, 1);
  ASSERT_TRUE(Step(5).ok());
  EXPECT_EQ(comm_.broadcasts, 3);  // a step: the header, then the message
  EXPECT_EQ(comm_.barriers, 1);
  EXPECT_TRUE(leader_.failure().ok());
}

TEST_F(TpLeaderModelTest, KeepsTheFirstPeerFailure) {
  comm_.fail_barrier_from = 1;
  const Status s = leader_.Heartbeat();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(leader_.failure().message(), "barrier 1 failed");
  comm_.fail_broadcast_from = 1;
  EXPECT_EQ(Step(5).code(), StatusCode::kUnavailable);
  EXPECT_EQ(Step(5).code(), StatusCode::kUnavailable);
  EXPECT_EQ(leader_.failure().message(), "barrier 1 failed");  // still the first one
}

TEST_F(TpLeaderModelTest, AStepsOwnErrorIsNotAPeerFailure) {
  const Status s = Step(local_->config().vocab_size + 3);  // a token id out of range
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(leader_.failure().ok());
  comm_.fail_broadcast_from = comm_.broadcasts + 2;  // the step's message, after its header
  EXPECT_EQ(Step(5).code(), StatusCode::kUnavailable);
  EXPECT_NE(leader_.failure().message().find("failed"), std::string::npos);
  EXPECT_EQ(leader_.Stop().code(), StatusCode::kUnavailable);  // the group is gone
}

TEST(RankReports, RoundTripOnOneRankWithTheHostCut) {
  auto comm = MakeSingleProcessCommunicator();
  RankReport mine;
  mine.rank = 7;  // taken from the communicator instead
  mine.host = std::string(70, 'h');
  mine.tp = 2;
  mine.ep = 2;
  mine.weight_bytes = (uint64_t{5} << 40) + 3;
  mine.exit_code = 2;
  mine.dp_attention = true;
  mine.threads = 3;
  mine.cpus = std::string(70, '1');
  auto all = ExchangeRankReports(*comm, mine);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 1u);
  const RankReport& r = (*all)[0];
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.host, std::string(63, 'h'));
  EXPECT_EQ(r.tp, 2);
  EXPECT_EQ(r.ep, 2);
  EXPECT_EQ(r.weight_bytes, mine.weight_bytes);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.dp_attention);
  EXPECT_EQ(r.threads, 3);
  EXPECT_EQ(r.cpus, std::string(63, '1'));
}

TEST(RankReports, DescribeSaysWhoHoldsWhat) {
  RankReport r;
  r.rank = 1;
  r.host = "node-b";
  r.tp = 2;
  r.ep = 2;
  r.weight_bytes = 3 * (1 << 20) / 2;  // 1.5 MiB
  EXPECT_EQ(DescribeRank(r, 2),
            "rank 1 of 2 on node-b: tp 2, ep 2, 1.50 MiB of weights (its shard)");
  r.dp_attention = true;
  r.threads = 4;
  r.cpus = "0-3";
  EXPECT_EQ(DescribeRank(r, 2),
            "rank 1 of 2 on node-b: tp 2, ep 2, dp-attention, 1.50 MiB of weights (its shard), 4 "
            "kernel threads on cpus 0-3");
}

// The affinity list names exactly the CPUs sched_getaffinity reports, as ranges.
TEST(RankReports, AffinityCpuListMatchesTheMask) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  std::vector<int> want, got;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) want.push_back(c);
  const std::string list = AffinityCpuList();
  std::stringstream ss(list);
  for (std::string part; std::getline(ss, part, ',');) {
    const size_t dash = part.find('-');
    const int lo = std::stoi(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    ASSERT_LE(lo, hi) << list;
    for (int c = lo; c <= hi; ++c) got.push_back(c);
  }
  EXPECT_EQ(got, want) << list;
}

}  // namespace
}  // namespace lucid
