#include "backends/cpu/ops_registry.h"

#include <algorithm>

#include "backends/cpu/cpu_backend.h"

namespace lucid {
namespace {

// The CPU sets (backends/cpu): each implements every op, so it serves every family.
void RegisterCpuSets(std::vector<OpsSetEntry>* r) {
  const std::vector<std::string> families = {
      "dense_attention", "sparse_attention", "indexer", "matmul", "moe", "sampling"};
  r->push_back(
      {"cpu", "fast", "cpu", families, ConformancePrecision::kF32,
       "CpuFastOps: vectorized, threaded; matmul activations keep ~16 bits",
       [](CpuIsa isa) { return std::make_unique<CpuFastOps>(isa, FastActivations::kF32); }});
  r->push_back({"cpu", "fast-bf16act", "cpu", families, ConformancePrecision::kBf16Act,
                "CpuFastOps with matmul activations rounded to bf16", [](CpuIsa isa) {
                  return std::make_unique<CpuFastOps>(isa, FastActivations::kBf16);
                }});
  r->push_back({"cpu", "reference", "cpu", families, ConformancePrecision::kF32,
                "CpuOps: the plain reference kernels, batch-invariant",
                [](CpuIsa) { return std::make_unique<CpuOps>(); }});
}

}  // namespace

const std::vector<OpsSetEntry>& OpsRegistry() {
  static const std::vector<OpsSetEntry> r = [] {
    std::vector<OpsSetEntry> v;
    RegisterCpuSets(&v);
    return v;
  }();
  return r;
}

const OpsSetEntry* FindOpsSet(std::string_view device, std::string_view name) {
  for (const OpsSetEntry& e : OpsRegistry())
    if (e.device == device && e.name == name) return &e;
  return nullptr;
}

bool Registered(std::string_view device, std::string_view family, std::string_view kernel) {
  for (const OpsSetEntry& e : OpsRegistry())
    if (e.device == device && e.kernel == kernel &&
        std::find(e.families.begin(), e.families.end(), family) != e.families.end())
      return true;
  return false;
}

}  // namespace lucid

namespace lucid {

std::unique_ptr<Backend> MakeBackend(const OpsSetEntry& e, CpuIsa max_isa) {
  LUCID_CHECK(e.device == "cpu", "MakeBackend: no backend for device " + e.device);
  return std::make_unique<CpuBackend>(e.make(max_isa), e.name);
}

}  // namespace lucid
