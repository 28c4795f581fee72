#include "core/timed_communicator.h"

#include <chrono>
#include <numeric>

namespace lucid {

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all-reduce";
    case Collective::kAllGather:
      return "all-gather";
    case Collective::kReduceScatter:
      return "reduce-scatter";
    case Collective::kAllToAll:
      return "all-to-all";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kCount:
      break;
  }
  return "?";
}

template <typename F>
Status TimedCommunicator::Timed(Collective c, int64_t bytes, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = call();
  CollectiveTally& t = tallies_[static_cast<int>(c)];
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.bytes += bytes;
  ++t.calls;
  return s;
}

Status TimedCommunicator::AllReduceSum(float* data, int64_t count) {
  return Timed(Collective::kAllReduce, count * int64_t{sizeof(float)},
               [&] { return inner_.AllReduceSum(data, count); });
}

Status TimedCommunicator::AllGather(const void* send, void* recv, int64_t bytes) {
  return Timed(Collective::kAllGather, bytes, [&] { return inner_.AllGather(send, recv, bytes); });
}

Status TimedCommunicator::ReduceScatterSum(const float* send, float* recv, int64_t count) {
  return Timed(Collective::kReduceScatter, count * int64_t{sizeof(float)} * size(),
               [&] { return inner_.ReduceScatterSum(send, recv, count); });
}

Status TimedCommunicator::AllToAllV(const void* send, std::span<const int64_t> send_bytes,
                                    std::span<const int64_t> send_offsets, void* recv,
                                    std::span<const int64_t> recv_bytes,
                                    std::span<const int64_t> recv_offsets) {
  const int64_t bytes = std::accumulate(send_bytes.begin(), send_bytes.end(), int64_t{0});
  return Timed(Collective::kAllToAll, bytes, [&] {
    return inner_.AllToAllV(send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
  });
}

Status TimedCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  return Timed(Collective::kBroadcast, bytes, [&] { return inner_.Broadcast(data, bytes, root); });
}

Status TimedCommunicator::Barrier() {
  return Timed(Collective::kBarrier, 0, [&] { return inner_.Barrier(); });
}

CollectiveTally TimedCommunicator::Total() const {
  CollectiveTally all;
  for (const CollectiveTally& t : tallies_) {
    all.calls += t.calls;
    all.bytes += t.bytes;
    all.seconds += t.seconds;
  }
  return all;
}

}  // namespace lucid
