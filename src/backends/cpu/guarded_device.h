// GuardedDeviceBackend: a stand-in for a discrete device, on the CPU, so that the way a model and
// the engine use their backend's memory is tested where no GPU is: the host may not touch device
// memory, and an op reads every raw pointer of its arguments as device memory (ops/ops.h).
//
// - Memory: allocator(), workspace() and the weights' copies (UploadWeight copies, as a device
//   does) come from one reserved address range that is inaccessible (PROT_NONE) while no op runs.
//   A host read or write of device memory outside an op is a SIGSEGV, as a host dereference of a
//   device pointer is on a GPU machine.
// - Ops: each call checks its arguments, then runs the wrapped CPU ops with the range readable
//   and writable. Every tensor, weight part and raw pointer must lie in the range; every std::span
//   that ops/ops.h calls host memory (ids, positions, rows, lengths, pool rows) must lie outside
//   it. A breach is recorded (violations(), naming the op and the argument), not fatal, so a test
//   reports them all.
// - ReadableOnHost copies into host memory (CopyTensorToHost), as CudaBackend does.
// Results equal the wrapped ops' bit for bit: the guard changes where bytes live, not arithmetic.
// Freed memory is returned to the kernel (madvise) but its addresses are never handed out again,
// so a stale pointer faults instead of reading another tensor's bytes; the range (4 GiB of
// address space, no memory until used) bounds what one backend hands out in its lifetime.
// Ownership: borrows the wrapped Ops, which must outlive the backend.
// Thread-safety: as Backend (ops from one thread at a time; allocation from any thread).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace lucid {

// The guarded address range; an Allocator of Device::kCpu tensors (the wrapped CPU ops read
// them) whose bytes only an Access scope may touch.
class GuardedMemory final : public Allocator {
 public:
  GuardedMemory();
  ~GuardedMemory() override;
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;

  Device device() const override { return Device::kCpu; }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override;
  void Zero(void* p, size_t bytes) override;
  // Bytes requested (not rounded to pages) and not yet freed.
  std::optional<int64_t> held_bytes() const override { return held_->load(); }

  // From now on an allocation that would take held_bytes() past `bytes` fails with
  // ResourceExhausted, as a device that is full does; nullopt: only the range bounds them.
  void SetLimit(std::optional<int64_t> bytes);

  // Whether [p, p + bytes) lies inside memory handed out so far.
  bool Contains(const void* p, size_t bytes = 1) const;

  // While one exists, the range is readable and writable (scopes nest).
  class Access {
   public:
    explicit Access(GuardedMemory& m);
    ~Access();
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    GuardedMemory& m_;
  };

 private:
  void Protect(bool open);  // mu_ held
  char* base_ = nullptr;
  size_t reserved_ = 0;
  size_t used_ = 0;  // bytes from base_ handed out (page multiples)
  int open_ = 0;     // Access scopes alive
  std::optional<int64_t> limit_;
  mutable std::mutex mu_;
  // Shared with the deleters of allocations, which may outlive this object.
  std::shared_ptr<std::atomic<int64_t>> held_ = std::make_shared<std::atomic<int64_t>>(0);
};

class GuardedDeviceBackend final : public Backend {
 public:
  // Borrows `inner` (CPU ops), which must outlive the backend.
  explicit GuardedDeviceBackend(const Ops& inner);
  ~GuardedDeviceBackend() override;

  Device device() const override { return Device::kCpu; }
  std::string name() const override;
  const Ops& ops() const override;
  Allocator& allocator() override { return *memory_; }
  StatusOr<Tensor> UploadWeight(const Tensor& host) override;
  Workspace& workspace() override { return *workspace_; }
  StatusOr<Tensor> ReadableOnHost(const Tensor& t) override;
  bool memory_is_host() const override { return false; }

  // The distinct breaches recorded so far, one line each, in the order first seen
  // ("MlaAttention: selected_count is host memory").
  std::vector<std::string> violations() const;
  GuardedMemory& memory() { return *memory_; }

 private:
  class GuardedOps;
  std::unique_ptr<GuardedMemory> memory_;
  std::unique_ptr<Workspace> workspace_;
  std::unique_ptr<GuardedOps> ops_;
};

}  // namespace lucid
