// CpuBackend: the Backend (backends/backend.h) of the host. Weights are the checkpoint's own
// mapped tensors (UploadWeight returns its argument: no copy), the KV pool and step outputs are
// 64-byte aligned host memory (HostAllocator), activations come from a host Workspace, and
// Synchronize is the ops' (always OK for the CPU sets). It owns the Ops the registry entry made,
// or borrows Ops that the caller keeps alive (tests and tools that build their own Ops).
// Thread-safety: as Backend.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"

namespace lucid {

class CpuBackend final : public Backend {
 public:
  // Owns `ops`; `set` is the registry name it was made under ("fast").
  CpuBackend(std::unique_ptr<Ops> ops, std::string set);
  // Borrows `ops`, which must outlive the backend; the name is "cpu:" + ops.name().
  explicit CpuBackend(const Ops& ops);

  Device device() const override { return Device::kCpu; }
  std::string name() const override { return name_; }
  const Ops& ops() const override { return *ops_; }
  Allocator& allocator() override { return HostAllocator(); }
  StatusOr<Tensor> UploadWeight(const Tensor& host) override;
  Workspace& workspace() override { return workspace_; }
  StatusOr<Tensor> ReadableOnHost(const Tensor& t) override { return t; }  // host memory

 private:
  std::unique_ptr<Ops> owned_;
  const Ops* ops_;
  std::string name_;
  Workspace workspace_;
};

}  // namespace lucid
