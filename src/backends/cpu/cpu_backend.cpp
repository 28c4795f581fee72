#include "backends/cpu/cpu_backend.h"

#include <utility>

namespace lucid {

CpuBackend::CpuBackend(std::unique_ptr<Ops> ops, std::string set)
    : owned_(std::move(ops)),
      ops_(owned_.get()),
      name_("cpu:" + std::move(set)),
      workspace_(HostAllocator()) {
  LUCID_CHECK(ops_ != nullptr, "CpuBackend without ops");
}

CpuBackend::CpuBackend(const Ops& ops)
    : ops_(&ops), name_(std::string("cpu:") + ops.name()), workspace_(HostAllocator()) {}

StatusOr<Tensor> CpuBackend::UploadWeight(const Tensor& host) {
  if (host.device() != Device::kCpu)
    return InvalidArgument(std::string("CpuBackend: a weight on ") + DeviceName(host.device()));
  return host;  // the mapping is the CPU's memory: the view itself
}

}  // namespace lucid
