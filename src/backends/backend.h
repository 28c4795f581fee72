// Backend: one device's implementation of everything a model step needs, behind one interface.
//
// A Backend names its device, owns the device memory the model runs on and exposes the ops
// (ops/ops.h) that compute on it:
// - weights: UploadWeight makes the device copy of a checkpoint tensor once, at load (on the CPU
//   the mmap'd tensor itself: a view, no copy);
// - the paged KV pool: KvStorage (models/kv_cache.h) takes its bytes from allocator();
// - activations: workspace(), an arena the model resets at the start of every step, so a step
//   takes no memory from the device allocator once it has seen a step as large;
// - step outputs (logits, hidden states) come from allocator() and outlive the step;
// - errors: Synchronize() waits for the ops issued since the last call and reports an
//   asynchronous failure as a Status (ops().Synchronize()), which the model returns from Forward.
// The backend registry (backends/cpu/ops_registry.h) makes one from an entry: MakeBackend.
// Ownership: the Backend owns its Ops (or borrows them, see CpuBackend) and its workspace; it
// must outlive every model and KvStorage that uses it.
// Thread-safety: ops() is as ops/ops.h says; allocator() is thread-safe; workspace() belongs to
// the one thread that runs steps (the engine thread).
#pragma once

#include <span>
#include <string>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "ops/weight.h"

namespace lucid {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // "<device>:<set>", e.g. "cpu:fast" (the registry entry it was made from).
  virtual std::string name() const = 0;
  virtual const Ops& ops() const = 0;
  // Device memory that lives until its last holder drops it (weights' copies, the KV pool, step
  // outputs). Freeing it waits for the queued work that uses it (a tensor dropped mid-step).
  virtual Allocator& allocator() = 0;
  // The tensor as the ops of this backend read it: a copy in device memory of a host tensor
  // (`host` is a view of the checkpoint mapping, or host memory), made once at load. CPU: `host`
  // itself.
  virtual StatusOr<Tensor> UploadWeight(const Tensor& host) = 0;
  // The per-step arena (see Workspace in core/allocator.h).
  virtual Workspace& workspace() = 0;
  // Whether the host may read this backend's memory directly (ReadableOnHost returns the tensor
  // itself): the CPU's. A discrete device's (and GuardedDeviceBackend's) is not.
  virtual bool memory_is_host() const { return device() == Device::kCpu; }
  Status Synchronize() const { return ops().Synchronize(); }
  // `t` (memory of this backend) as memory the host may read: `t` itself where the backend's
  // memory is host memory (the CPU), else a host copy made after the ops issued so far (whose
  // errors are its Status). Step outputs (logits, hidden states) reach the engine through it.
  virtual StatusOr<Tensor> ReadableOnHost(const Tensor& t) = 0;

  // A copy of host integers in this step's workspace (device memory), 1-D [host.size()]: the
  // metadata a step's ops read by raw pointer (page tables, per-row counts).
  Tensor StepCopy(std::span<const int32_t> host) { return StepCopyOf(DType::kI32, host); }
  Tensor StepCopy(std::span<const int64_t> host) { return StepCopyOf(DType::kI64, host); }

  // UploadWeight of each tensor of `w` (data, scale, scale2), in place.
  Status UploadWeights(Weight* w) {
    for (Tensor* t : {&w->data, &w->scale, &w->scale2}) {
      if (t->raw() == nullptr) continue;
      StatusOr<Tensor> up = UploadWeight(*t);
      if (!up.ok()) return up.status().WithContext(w->name);
      *t = std::move(*up);
    }
    return OkStatus();
  }

 private:
  template <class T>
  Tensor StepCopyOf(DType dtype, std::span<const T> host) {
    Tensor t = Tensor::Empty(dtype, {static_cast<int64_t>(host.size())}, workspace());
    ops().CopyFromHost(host.data(), t.raw(), host.size_bytes());
    return t;
  }
};

}  // namespace lucid
