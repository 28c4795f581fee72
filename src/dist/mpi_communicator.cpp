#include "dist/mpi_communicator.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef LUCID_MPI
#include <mpi.h>
#endif

namespace lucid {

int LaunchedWorldSize() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      const int n = std::atoi(v);
      if (n >= 1) return n;
    }
  }
  return 1;
}

#ifndef LUCID_MPI

bool MpiCompiledIn() { return false; }

StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(std::chrono::milliseconds) {
  return Unimplemented(
      "this build of lucid has no MPI (libopenmpi-dev was not found at configure time; "
      "scripts/setup.sh installs it): multi-process runs need it");
}

#else

bool MpiCompiledIn() { return true; }

namespace {

Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, len);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::chrono::milliseconds timeout) : comm_(comm) {
    SetTimeout(timeout);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    host_.assign(name, len);
  }
  ~MpiCommunicator() override {
    if (!broken_.ok()) return;  // a finalize would wait for the peer that failed
    MPI_Comm_free(&comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }
  std::string host() const override { return host_; }

  Status AllReduceSum(float* data, int64_t count) override {
    LUCID_RETURN_IF_ERROR(Usable("all-reduce", count * int64_t{sizeof(float)}));
    if (count == 0) return OkStatus();
    std::vector<float> all(static_cast<size_t>(count) * size_);
    LUCID_RETURN_IF_ERROR(GatherBytes(data, all.data(), count * sizeof(float), "all-reduce"));
    SumInRankOrder(all.data(), count, data);
    return OkStatus();
  }

  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    LUCID_RETURN_IF_ERROR(Usable("all-gather", bytes));
    return GatherBytes(send, recv, bytes, "all-gather");
  }

  Status ReduceScatterSum(const float* send, float* recv, int64_t count) override {
    const int64_t bytes = count * int64_t{sizeof(float)};
    LUCID_RETURN_IF_ERROR(Usable("reduce-scatter", bytes));
    std::vector<float> mine(static_cast<size_t>(count) * size_);  // block r: rank r's of my block
    MPI_Request req;
    const int rc = MPI_Ialltoall(send, static_cast<int>(bytes), MPI_BYTE, mine.data(),
                                 static_cast<int>(bytes), MPI_BYTE, comm_, &req);
    LUCID_RETURN_IF_ERROR(Wait(rc, &req, "reduce-scatter"));
    SumInRankOrder(mine.data(), count, recv);
    return OkStatus();
  }

  Status AllToAllV(const void* send, std::span<const int64_t> send_bytes,
                   std::span<const int64_t> send_offsets, void* recv,
                   std::span<const int64_t> recv_bytes,
                   std::span<const int64_t> recv_offsets) override {
    LUCID_RETURN_IF_ERROR(Usable("all-to-all", 0));
    const size_t n = static_cast<size_t>(size_);
    if (send_bytes.size() != n || send_offsets.size() != n || recv_bytes.size() != n ||
        recv_offsets.size() != n)
      return InvalidArgument("all-to-all: each count and offset list needs one entry per rank (" +
                             std::to_string(size_) + ")");
    std::vector<int> sc(n), sd(n), rcn(n), rd(n);
    for (size_t r = 0; r < n; ++r) {
      for (int64_t v : {send_bytes[r], send_offsets[r], recv_bytes[r], recv_offsets[r]})
        if (v < 0 || v > INT_MAX)
          return InvalidArgument("all-to-all: size or offset " + std::to_string(v) +
                                 " outside [0, 2^31) (MPI counts are int)");
      sc[r] = static_cast<int>(send_bytes[r]);
      sd[r] = static_cast<int>(send_offsets[r]);
      rcn[r] = static_cast<int>(recv_bytes[r]);
      rd[r] = static_cast<int>(recv_offsets[r]);
    }
    MPI_Request req;
    const int rc = MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rcn.data(), rd.data(),
                                  MPI_BYTE, comm_, &req);
    return Wait(rc, &req, "all-to-all");
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    LUCID_RETURN_IF_ERROR(Usable("broadcast", bytes));
    if (root < 0 || root >= size_)
      return InvalidArgument("broadcast: root " + std::to_string(root) + " outside [0, " +
                             std::to_string(size_) + ")");
    MPI_Request req;
    const int rc = MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &req);
    return Wait(rc, &req, "broadcast");
  }

  Status Barrier() override {
    LUCID_RETURN_IF_ERROR(Usable("barrier", 0));
    MPI_Request req;
    const int rc = MPI_Ibarrier(comm_, &req);
    return Wait(rc, &req, "barrier");
  }

 private:
  // The sticky error, or a size the transport cannot carry (MPI counts are int).
  Status Usable(const char* what, int64_t bytes) const {
    if (!broken_.ok()) return broken_;
    if (bytes < 0 || bytes > INT_MAX / size_)
      return InvalidArgument(std::string(what) + ": " + std::to_string(bytes) +
                             " bytes per rank is outside what one MPI call carries here");
    return OkStatus();
  }

  Status GatherBytes(const void* send, void* recv, int64_t bytes, const char* what) {
    MPI_Request req;
    const int rc = MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                                  static_cast<int>(bytes), MPI_BYTE, comm_, &req);
    return Wait(rc, &req, what);
  }

  void SumInRankOrder(const float* blocks, int64_t count, float* out) const {
    for (int64_t i = 0; i < count; ++i) {
      float s = blocks[i];
      for (int r = 1; r < size_; ++r) s += blocks[static_cast<int64_t>(r) * count + i];
      out[i] = s;
    }
  }

  // Waits for `req` (PollUntilDone) until it completes, fails or the timeout passes.
  Status Wait(int start_rc, MPI_Request* req, const char* what) {
    const std::string who =
        std::string(what) + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
    if (start_rc != MPI_SUCCESS) return Break(Unavailable(who + ": " + MpiError(start_rc)));
    StatusOr<bool> done = PollUntilDone(timeout(), [&]() -> StatusOr<bool> {
      int flag = 0;
      const int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Unavailable(who + ": " + MpiError(rc));
      return flag != 0;
    });
    if (!done.ok()) return Break(done.status());
    if (!*done) return Break(CollectiveTimedOut(who, timeout()));
    return OkStatus();
  }

  Status Break(Status s) {
    broken_ = s;
    return s;
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::string host_;
  Status broken_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(std::chrono::milliseconds timeout) {
  if (const char* v = std::getenv("LUCID_COLLECTIVE_TIMEOUT_MS"); v != nullptr && *v != '\0') {
    const long ms = std::strtol(v, nullptr, 10);
    if (ms <= 0)
      return InvalidArgument(std::string("LUCID_COLLECTIVE_TIMEOUT_MS=") + v +
                             " is not a positive number of milliseconds");
    timeout = std::chrono::milliseconds(ms);
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return Unavailable("MPI_Init_thread failed: " + MpiError(rc));
    if (provided < MPI_THREAD_SERIALIZED)
      return Unavailable(
          "this MPI library does not allow calls from a thread other than main "
          "(MPI_THREAD_SERIALIZED), which the engine thread needs");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm comm;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return Unavailable("MPI_Comm_dup failed: " + MpiError(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(new MpiCommunicator(comm, timeout));
}

#endif  // LUCID_MPI

}  // namespace lucid
