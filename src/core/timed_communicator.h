// TimedCommunicator: a Communicator that forwards every collective to another and keeps, per kind
// of collective, how many calls were made, how many bytes this rank contributed and how long it
// spent in them (wall time from entry to return: the transfer and any wait for a slower peer).
// `lucid bench --tp-size N` reads it to say how much of a step is communication.
//
// Contract: every call returns what the wrapped communicator returns, with the same buffers; the
// tallies count a call whether it succeeded or not. rank(), size(), host(), kind() and
// device_buffers() are the wrapped one's. SetTimeout on the wrapper does not reach the wrapped
// communicator (its own timeout bounds the calls).
// Ownership: borrows `inner`, which must outlive the wrapper.
// Thread-safety: as the wrapped communicator (one thread at a time); Tally()/Reset() from that
// same thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/communicator.h"

namespace lucid {

enum class Collective {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kBarrier,
  kCount
};
const char* CollectiveName(Collective c);  // "all-reduce", "all-gather", ...

struct CollectiveTally {
  int64_t calls = 0;
  int64_t bytes = 0;  // this rank's contribution (send side; a broadcast's payload)
  double seconds = 0;
};

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string kind() const override { return inner_.kind(); }
  std::string host() const override { return inner_.host(); }
  bool device_buffers() const override { return inner_.device_buffers(); }

  Status AllReduceSum(float* data, int64_t count) override;
  Status AllGather(const void* send, void* recv, int64_t bytes) override;
  Status ReduceScatterSum(const float* send, float* recv, int64_t count) override;
  Status AllToAllV(const void* send, std::span<const int64_t> send_bytes,
                   std::span<const int64_t> send_offsets, void* recv,
                   std::span<const int64_t> recv_bytes,
                   std::span<const int64_t> recv_offsets) override;
  Status Broadcast(void* data, int64_t bytes, int root) override;
  Status Barrier() override;

  const CollectiveTally& Tally(Collective c) const { return tallies_[static_cast<int>(c)]; }
  CollectiveTally Total() const;  // over every kind
  void Reset() { tallies_ = {}; }

 private:
  template <typename F>
  Status Timed(Collective c, int64_t bytes, F&& call);

  Communicator& inner_;
  std::array<CollectiveTally, static_cast<int>(Collective::kCount)> tallies_{};
};

}  // namespace lucid
