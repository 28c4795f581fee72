// Communicator: the collectives that tie the processes (ranks) of one parallel run together.
//
// A run of `size()` ranks (tensor / expert parallelism, docs/PARALLEL.md) has one
// Communicator per process; every rank calls the same collectives in the same order with the same
// sizes (a collective is entered by all ranks or it does not complete). Buffers are host memory,
// except for a communicator whose device_buffers() is true (NCCL, dist/nccl/nccl_communicator.h):
// there they are device memory on the rank's GPU.
//
// Contract of every call:
// - it returns OK once this rank's part is complete (its output buffers hold the result);
// - it never hangs: a peer that died or stalled makes the call fail within the communicator's
//   timeout with kUnavailable naming the collective, this rank and the bound; an MPI error comes
//   back as kUnavailable with MPI's message; sizes the transport cannot carry give
//   kInvalidArgument;
// - after a failure the communicator is broken: every later call returns the first error at once
//   (a half-finished collective cannot be resumed; the process is expected to report and exit).
// Reductions are deterministic and identical on every rank, which is what keeps the router's and
// the indexer's choices equal on every rank: the single-process and MPI communicators add the
// ranks' contributions in rank order (0, 1, ...); NCCL reduces each element once in its own order
// and copies it, so its bits are equal on every rank but may differ from the MPI sum's.
// Ownership: buffers are the caller's; the communicator holds none after a call returns.
// Thread-safety: one thread at a time per communicator (calls are serialised by the caller; the
// engine thread makes them).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace lucid {

// The default bound of a collective before a peer is declared dead (overridden by
// LUCID_COLLECTIVE_TIMEOUT_MS for the MPI communicator).
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{30000};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single", "mpi" or "nccl" (the implementation), for logs and `explain`.
  virtual std::string kind() const = 0;
  // The host this rank runs on (MPI's processor name; the hostname for "single").
  virtual std::string host() const = 0;
  // Whether the buffers of every call are device memory (NCCL) rather than host memory.
  virtual bool device_buffers() const { return false; }

  // data[0, count) is replaced on every rank by the sum over ranks, added in rank order.
  virtual Status AllReduceSum(float* data, int64_t count) = 0;
  // recv[r * bytes, (r + 1) * bytes) receives rank r's send[0, bytes); recv holds size() * bytes.
  virtual Status AllGather(const void* send, void* recv, int64_t bytes) = 0;
  // send holds size() blocks of `count` floats; recv[0, count) receives the sum over ranks of
  // their block number rank(), added in rank order.
  virtual Status ReduceScatterSum(const float* send, float* recv, int64_t count) = 0;
  // Rank r's send[send_offsets[d], + send_bytes[d]) goes to rank d's
  // recv[recv_offsets[r], + recv_bytes[r]). Each span has size() entries; the byte counts must
  // agree pairwise (what r sends to d is what d expects from r).
  virtual Status AllToAllV(const void* send, std::span<const int64_t> send_bytes,
                           std::span<const int64_t> send_offsets, void* recv,
                           std::span<const int64_t> recv_bytes,
                           std::span<const int64_t> recv_offsets) = 0;
  // Equal blocks: block d of send (bytes_per_rank each) goes to rank d, block r of recv comes
  // from rank r.
  Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank);
  // data[0, bytes) of rank `root` is copied to every rank's data.
  virtual Status Broadcast(void* data, int64_t bytes, int root) = 0;
  // Returns once every rank has entered it.
  virtual Status Barrier() = 0;

  // The bound of each later call before a peer is declared dead (kDefaultCollectiveTimeout unless
  // set). `lucid serve` raises it while the ranks load (they reach their first meeting minutes
  // apart on a large checkpoint), then sets it back. The single-process communicator never waits.
  void SetTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::chrono::milliseconds timeout_ = kDefaultCollectiveTimeout;
};

// How a communicator waits for a transfer it started: calls `poll` until it says done (true) or
// fails, or until `timeout` has passed since the first call (then returns false). Between polls
// it yields for the first 2000, then sleeps 50 us, then 1 ms once the wait has lasted 100 ms, so
// that ranks sharing cores leave them to each other and an idle worker wakes rarely (at the cost
// of up to a millisecond on the step that ends a long wait).
// The error of a collective that PollUntilDone gave up on: kUnavailable "<who> did not complete
// within N ms: a peer rank died or stalled".
Status CollectiveTimedOut(const std::string& who, std::chrono::milliseconds timeout);

StatusOr<bool> PollUntilDone(std::chrono::milliseconds timeout,
                             const std::function<StatusOr<bool>()>& poll);

// The one-rank communicator: every collective is a local copy (or nothing). Never fails.
std::unique_ptr<Communicator> MakeSingleProcessCommunicator();

}  // namespace lucid
