// The backend registry: every implementation of the op interface (ops/ops.h) this build contains,
// registered as (device, kernel families, kernel name) -> a factory, under the name a flag selects
// it by. Today the CPU kernel sets (`--cpu-kernels`, config/cpu_kernels.h) are its entries:
//   reference     CpuOps, the plain oracle.
//   fast          CpuFastOps, matmul activations kept to ~16 bits (the hi/lo bf16 split).
//   fast-bf16act  CpuFastOps with matmul activations rounded to bf16.
// Each serves the kernel catalog's `cpu` kernel in every family (config/kernel_catalog.h): the CPU
// sets implement the whole op interface, and the host sampler (runtime/sampler.h) samples for all
// of them. The catalog's `compiled_in` is `Registered(...)`, so what `explain` and `backends` say
// is compiled in is exactly what a flag can make run; serve, generate and bench build their
// Backend (backends/backend.h: device memory, workspace, the entry's ops) with MakeBackend. A
// backend of another device adds its entries in its own registration function, called from
// OpsRegistry().
// Thread-safety: the registry is built once (first use) and immutable; factories are reentrant.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/ops_conformance.h"

namespace lucid {

struct OpsSetEntry {
  std::string device;                 // "cpu"
  std::string name;                   // the set's name as its flag spells it ("fast")
  std::string kernel;                 // the catalog's kernel name in each family ("cpu")
  std::vector<std::string> families;  // catalog family names it serves ("matmul", ...)
  ConformancePrecision precision = ConformancePrecision::kF32;  // what the conformance suite
                                                                // holds it to
  std::string summary;                                          // one line
  // A new instance; CPU sets run at min(max_isa, DetectCpuIsa()) (the reference ignores it).
  std::function<std::unique_ptr<Ops>(CpuIsa max_isa)> make;
};

// Every registered set, in registration order.
const std::vector<OpsSetEntry>& OpsRegistry();

// The set `name` of `device`; nullptr when none is registered.
const OpsSetEntry* FindOpsSet(std::string_view device, std::string_view name);

// Whether some registered set serves kernel `kernel` of family `family` on `device` (the names
// config/kernel_catalog.h prints: "cpu", "matmul", "cpu").
bool Registered(std::string_view device, std::string_view family, std::string_view kernel);

}  // namespace lucid

namespace lucid {

// The Backend of `e`'s device owning `e.make(max_isa)` (CPU: a CpuBackend).
std::unique_ptr<Backend> MakeBackend(const OpsSetEntry& e, CpuIsa max_isa);

}  // namespace lucid
