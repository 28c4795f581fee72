#include "dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_device.h"

namespace lucid {
namespace {

Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int device, int rank, int size,
                   float* scratch, std::chrono::milliseconds timeout)
      : comm_(comm), stream_(stream), device_(device), rank_(rank), size_(size), scratch_(scratch) {
    SetTimeout(timeout);
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (broken_.ok()) {
      ncclCommDestroy(comm_);
    } else if (!aborted_) {
      ncclCommAbort(comm_);  // a destroy would wait for the peer that failed
    }
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "nccl"; }
  std::string host() const override { return HostName() + " cuda:" + std::to_string(device_); }
  bool device_buffers() const override { return true; }

  Status AllReduceSum(float* data, int64_t count) override {
    LUCID_RETURN_IF_ERROR(Usable("all-reduce", count));
    if (count == 0) return OkStatus();
    return Run("all-reduce", ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat,
                                           ncclSum, comm_, stream_));
  }

  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    LUCID_RETURN_IF_ERROR(Usable("all-gather", bytes));
    if (bytes == 0) return OkStatus();
    return Run("all-gather",
               ncclAllGather(send, recv, static_cast<size_t>(bytes), ncclUint8, comm_, stream_));
  }

  Status ReduceScatterSum(const float* send, float* recv, int64_t count) override {
    LUCID_RETURN_IF_ERROR(Usable("reduce-scatter", count));
    if (count == 0) return OkStatus();
    return Run("reduce-scatter", ncclReduceScatter(send, recv, static_cast<size_t>(count),
                                                   ncclFloat, ncclSum, comm_, stream_));
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
    for (size_t r = 0; r < n; ++r)
      for (int64_t v : {send_bytes[r], send_offsets[r], recv_bytes[r], recv_offsets[r]})
        if (v < 0)
          return InvalidArgument("all-to-all: negative size or offset " + std::to_string(v));
    // One group of point-to-point calls: NCCL pairs each send with the peer's receive.
    ncclResult_t rc = ncclGroupStart();
    for (size_t r = 0; r < n && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
      const int peer = static_cast<int>(r);
      if (send_bytes[r] > 0)
        rc = ncclSend(static_cast<const char*>(send) + send_offsets[r],
                      static_cast<size_t>(send_bytes[r]), ncclUint8, peer, comm_, stream_);
      if ((rc == ncclSuccess || rc == ncclInProgress) && recv_bytes[r] > 0)
        rc = ncclRecv(static_cast<char*>(recv) + recv_offsets[r],
                      static_cast<size_t>(recv_bytes[r]), ncclUint8, peer, comm_, stream_);
    }
    const ncclResult_t end = ncclGroupEnd();
    return Run("all-to-all", rc == ncclSuccess || rc == ncclInProgress ? end : rc);
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    LUCID_RETURN_IF_ERROR(Usable("broadcast", bytes));
    if (root < 0 || root >= size_)
      return InvalidArgument("broadcast: root " + std::to_string(root) + " outside [0, " +
                             std::to_string(size_) + ")");
    if (bytes == 0) return OkStatus();
    return Run("broadcast", ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root,
                                          comm_, stream_));
  }

  // An all-reduce of one float in the communicator's own device scratch.
  Status Barrier() override {
    LUCID_RETURN_IF_ERROR(Usable("barrier", 0));
    return Run("barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_));
  }

 private:
  Status Usable(const char* what, int64_t n) const {
    if (!broken_.ok()) return broken_;
    if (n < 0) return InvalidArgument(std::string(what) + ": negative size " + std::to_string(n));
    return OkStatus();
  }

  std::string Who(const char* what) const {
    return std::string(what) + " on rank " + std::to_string(rank_) + " of " +
           std::to_string(size_) + " (nccl, cuda:" + std::to_string(device_) + ")";
  }

  // Waits for an enqueued call (PollUntilDone): NCCL's state and the stream until both are done,
  // an error shows, or the timeout passes (then aborts the communicator).
  Status Run(const char* what, ncclResult_t enqueued) {
    if (enqueued != ncclSuccess && enqueued != ncclInProgress)
      return Break(Unavailable(Who(what) + ": " + ncclGetErrorString(enqueued) + ": " +
                               ncclGetLastError(comm_)));
    StatusOr<bool> done = PollUntilDone(timeout(), [&]() -> StatusOr<bool> {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess) state = q;
      if (state != ncclSuccess && state != ncclInProgress)
        return Unavailable(Who(what) + ": " + ncclGetErrorString(state) + ": " +
                           ncclGetLastError(comm_));
      if (state == ncclInProgress) return false;
      const cudaError_t s = cudaStreamQuery(stream_);
      if (s == cudaErrorNotReady) return false;
      if (s != cudaSuccess)
        return Unavailable(Who(what) + ": " + cudaGetErrorName(s) + ": " + cudaGetErrorString(s));
      return true;
    });
    if (!done.ok()) return Break(done.status());
    if (!*done) {
      ncclCommAbort(comm_);
      aborted_ = true;
      return Break(CollectiveTimedOut(Who(what), timeout()));
    }
    return OkStatus();
  }

  Status Break(Status s) {
    broken_ = s;
    return s;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_, rank_, size_;
  float* scratch_;
  bool aborted_ = false;
  Status broken_;
};

// Waits for a non-blocking communicator's initialisation (ncclInProgress until it is up).
Status WaitForInit(ncclComm_t comm, ncclResult_t rc, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  while (rc == ncclInProgress) {
    if (std::chrono::steady_clock::now() - start > timeout) {
      ncclCommAbort(comm);
      return Unavailable("NCCL initialisation did not complete within " +
                         std::to_string(timeout.count()) + " ms: a peer rank died or stalled");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) break;
  }
  if (rc != ncclSuccess) {
    const std::string why = std::string(ncclGetErrorString(rc)) + ": " + ncclGetLastError(comm);
    ncclCommAbort(comm);
    return Unavailable("NCCL initialisation failed: " + why);
  }
  return OkStatus();
}

}  // namespace

std::string NcclVersion() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap, int device,
                                                             std::chrono::milliseconds timeout) {
  LUCID_ASSIGN_OR_RETURN(std::vector<cuda::CudaDeviceInfo> devices, cuda::ProbeCudaDevices());
  if (device < 0 || device >= static_cast<int>(devices.size()))
    return InvalidArgument("NCCL: no CUDA device " + std::to_string(device) +
                           " (this machine has " + std::to_string(devices.size()) + ")");
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return Unavailable(std::string("NCCL: cudaSetDevice: ") + cudaGetErrorString(e));
  // Rank 0 makes the id; the bootstrap carries it to the others.
  ncclUniqueId id{};
  if (bootstrap.rank() == 0)
    if (const ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
      return Unavailable(std::string("NCCL: ncclGetUniqueId: ") + ncclGetErrorString(rc));
  LUCID_RETURN_IF_ERROR(bootstrap.Broadcast(&id, sizeof(id), 0));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return at once; this side polls against the timeout
  ncclComm_t comm = nullptr;
  const ncclResult_t rc =
      ncclCommInitRankConfig(&comm, bootstrap.size(), id, bootstrap.rank(), &config);
  if (rc != ncclSuccess && rc != ncclInProgress)
    return Unavailable(std::string("NCCL: ncclCommInitRankConfig: ") + ncclGetErrorString(rc));
  LUCID_RETURN_IF_ERROR(WaitForInit(comm, rc, timeout));
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&scratch, sizeof(float)) != cudaSuccess) {
    ncclCommAbort(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
    return Unavailable("NCCL: cannot create the communicator's stream and scratch on cuda:" +
                       std::to_string(device));
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, stream, device, bootstrap.rank(),
                                                            bootstrap.size(), scratch, timeout));
}

}  // namespace lucid
