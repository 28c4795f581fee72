// The MPI communicator's collectives against naive expected values, run by ctest under
// `mpirun -np 2` (every rank runs every test, in the same order). The expected values are
// formulas of (rank, index) computed here, never the communicator's output.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "dist/mpi_communicator.h"

namespace lucid {
namespace {

Communicator* g_comm = nullptr;

// A value only rank r puts at index i (exact in f32 and when summed over a few ranks).
float Contribution(int r, int64_t i) { return static_cast<float>((r + 1) * 1000 + i % 997); }

TEST(MpiCommunicator, WorldMatchesLauncher) {
  EXPECT_EQ(g_comm->size(), LaunchedWorldSize());
  EXPECT_GE(g_comm->size(), 2) << "run under mpirun -np 2 or more";
  EXPECT_EQ(g_comm->kind(), "mpi");
  EXPECT_FALSE(g_comm->host().empty());
}

TEST(MpiCommunicator, AllReduceSumIsTheNaiveSum) {
  const int n = g_comm->size(), me = g_comm->rank();
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{4099}}) {
    std::vector<float> v(count);
    for (int64_t i = 0; i < count; ++i) v[i] = Contribution(me, i);
    ASSERT_TRUE(g_comm->AllReduceSum(v.data(), count).ok());
    for (int64_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += Contribution(r, i);
      ASSERT_EQ(v[i], want) << "index " << i << " of " << count;
    }
  }
}

TEST(MpiCommunicator, AllReduceGivesTheSameBitsOnEveryRank) {
  // Values whose sum depends on the order of addition: every rank must still agree bit for bit.
  const int n = g_comm->size(), me = g_comm->rank();
  std::vector<float> v(513);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (me % 2 ? 1e-7f : 1.0f) * (1.0f + 0.1f * i) / 3.0f;
  ASSERT_TRUE(g_comm->AllReduceSum(v.data(), v.size()).ok());
  std::vector<float> all(v.size() * n);
  ASSERT_TRUE(g_comm->AllGather(v.data(), all.data(), v.size() * sizeof(float)).ok());
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(std::memcmp(all.data() + r * v.size(), v.data(), v.size() * sizeof(float)), 0)
        << "rank " << r << " got other bits";
}

TEST(MpiCommunicator, AllGatherPlacesEachRanksBlock) {
  const int n = g_comm->size(), me = g_comm->rank();
  std::vector<int32_t> mine(5), all(5 * n, -1);
  for (int i = 0; i < 5; ++i) mine[i] = me * 100 + i;
  ASSERT_TRUE(g_comm->AllGather(mine.data(), all.data(), sizeof(int32_t) * 5).ok());
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(all[r * 5 + i], r * 100 + i);
}

TEST(MpiCommunicator, ReduceScatterSumGivesEachRankItsBlockSum) {
  const int n = g_comm->size(), me = g_comm->rank();
  const int64_t count = 33;
  std::vector<float> send(count * n), recv(count, -1);
  for (int64_t i = 0; i < count * n; ++i) send[i] = Contribution(me, i);
  ASSERT_TRUE(g_comm->ReduceScatterSum(send.data(), recv.data(), count).ok());
  for (int64_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += Contribution(r, me * count + i);
    EXPECT_EQ(recv[i], want) << i;
  }
}

TEST(MpiCommunicator, AllToAllVDeliversUnequalBlocks) {
  // Rank r sends (r + d + 1) bytes of value 16 * r + d to rank d.
  const int n = g_comm->size(), me = g_comm->rank();
  std::vector<int64_t> sb(n), so(n), rb(n), ro(n);
  int64_t st = 0, rt = 0;
  for (int d = 0; d < n; ++d) {
    sb[d] = me + d + 1;
    so[d] = st;
    st += sb[d];
    rb[d] = d + me + 1;
    ro[d] = rt;
    rt += rb[d];
  }
  std::vector<uint8_t> send(st), recv(rt, 0xff);
  for (int d = 0; d < n; ++d) std::memset(send.data() + so[d], 16 * me + d, sb[d]);
  ASSERT_TRUE(g_comm->AllToAllV(send.data(), sb, so, recv.data(), rb, ro).ok());
  for (int r = 0; r < n; ++r)
    for (int64_t k = 0; k < rb[r]; ++k) EXPECT_EQ(recv[ro[r] + k], 16 * r + me) << r << " " << k;
}

TEST(MpiCommunicator, AllToAllEqualBlocks) {
  const int n = g_comm->size(), me = g_comm->rank();
  std::vector<int32_t> send(3 * n), recv(3 * n, -1);
  for (int d = 0; d < n; ++d)
    for (int k = 0; k < 3; ++k) send[d * 3 + k] = me * 1000 + d * 10 + k;
  ASSERT_TRUE(g_comm->AllToAll(send.data(), recv.data(), 3 * sizeof(int32_t)).ok());
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(recv[r * 3 + k], r * 1000 + me * 10 + k);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  const int n = g_comm->size(), me = g_comm->rank();
  for (int root = 0; root < n; ++root) {
    std::vector<int64_t> v(9, me == root ? 0 : -1);
    if (me == root) std::iota(v.begin(), v.end(), int64_t{root} * 50);
    ASSERT_TRUE(g_comm->Broadcast(v.data(), v.size() * sizeof(int64_t), root).ok());
    for (int i = 0; i < 9; ++i) EXPECT_EQ(v[i], root * 50 + i);
  }
  int64_t x = 0;
  EXPECT_EQ(g_comm->Broadcast(&x, sizeof(x), n).code(), StatusCode::kInvalidArgument);
}

TEST(MpiCommunicator, BarrierAndZeroSizedCollectives) {
  EXPECT_TRUE(g_comm->Barrier().ok());
  EXPECT_TRUE(g_comm->AllReduceSum(nullptr, 0).ok());
  EXPECT_EQ(g_comm->AllReduceSum(nullptr, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(g_comm->Barrier().ok());
}

}  // namespace
}  // namespace lucid

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = lucid::MakeMpiCommunicator(std::chrono::milliseconds(20000));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  lucid::g_comm = comm->get();
  // Only rank 0 prints the results (the others' failures still fail the exit code).
  if (lucid::g_comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  int all = rc;
  (void)lucid::g_comm->AllReduceSum(nullptr, 0);
  float f = static_cast<float>(rc != 0);
  if (!lucid::g_comm->AllReduceSum(&f, 1).ok()) return 1;
  all = f > 0 ? 1 : 0;
  return all;
}
