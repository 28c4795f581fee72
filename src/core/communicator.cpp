#include "core/communicator.h"

#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

namespace lucid {

Status Communicator::AllToAll(const void* send, void* recv, int64_t bytes_per_rank) {
  const int n = size();
  std::vector<int64_t> bytes(n, bytes_per_rank), offsets(n);
  for (int r = 0; r < n; ++r) offsets[r] = r * bytes_per_rank;
  return AllToAllV(send, bytes, offsets, recv, bytes, offsets);
}

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "single"; }
  std::string host() const override {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
    return name;
  }
  Status AllReduceSum(float*, int64_t count) override { return Count(count); }
  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    LUCID_RETURN_IF_ERROR(Count(bytes));
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
    return OkStatus();
  }
  Status ReduceScatterSum(const float* send, float* recv, int64_t count) override {
    LUCID_RETURN_IF_ERROR(Count(count));
    if (count > 0 && send != recv) std::memmove(recv, send, count * sizeof(float));
    return OkStatus();
  }
  Status AllToAllV(const void* send, std::span<const int64_t> send_bytes,
                   std::span<const int64_t> send_offsets, void* recv,
                   std::span<const int64_t> recv_bytes,
                   std::span<const int64_t> recv_offsets) override {
    if (send_bytes.size() != 1 || send_offsets.size() != 1 || recv_bytes.size() != 1 ||
        recv_offsets.size() != 1)
      return InvalidArgument("all-to-all: each count and offset list needs one entry per rank (1)");
    if (send_bytes[0] != recv_bytes[0])
      return InvalidArgument("all-to-all: rank 0 sends " + std::to_string(send_bytes[0]) +
                             " bytes to itself but expects " + std::to_string(recv_bytes[0]));
    LUCID_RETURN_IF_ERROR(Count(send_bytes[0]));
    if (send_bytes[0] > 0)
      std::memmove(static_cast<char*>(recv) + recv_offsets[0],
                   static_cast<const char*>(send) + send_offsets[0], send_bytes[0]);
    return OkStatus();
  }
  Status Broadcast(void*, int64_t bytes, int root) override {
    if (root != 0) return InvalidArgument("broadcast: root " + std::to_string(root) + " of 1 rank");
    return Count(bytes);
  }
  Status Barrier() override { return OkStatus(); }

 private:
  static Status Count(int64_t n) {
    if (n < 0) return InvalidArgument("collective: negative size " + std::to_string(n));
    return OkStatus();
  }
};

}  // namespace

Status CollectiveTimedOut(const std::string& who, std::chrono::milliseconds timeout) {
  return Status(StatusCode::kUnavailable, who + " did not complete within " +
                                              std::to_string(timeout.count()) +
                                              " ms: a peer rank died or stalled");
}

StatusOr<bool> PollUntilDone(std::chrono::milliseconds timeout,
                             const std::function<StatusOr<bool>()>& poll) {
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    LUCID_ASSIGN_OR_RETURN(bool done, poll());
    if (done) return true;
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > timeout) return false;
    if (polls < 2000) {
      std::this_thread::yield();
    } else if (waited < std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

std::unique_ptr<Communicator> MakeSingleProcessCommunicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace lucid
