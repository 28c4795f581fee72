#include "config/cpu_kernels.h"

#include <cstdlib>

#include "backends/cpu/cpu_fast_ops.h"
#include "config/option_table.h"

namespace lucid::config {

const char* CpuKernelSetName(CpuKernelSet set) {
  return set == CpuKernelSet::kReference ? "reference" : "fast";
}

StatusOr<CpuKernelSet> ParseCpuKernelSet(const std::string& text) {
  const OptionSpec* spec = FindOption("cpu-kernels");
  LUCID_CHECK(spec != nullptr, "the option table has no cpu-kernels");
  LUCID_ASSIGN_OR_RETURN(nlohmann::json v, ParseOptionValue(*spec, text));
  return v == "reference" ? CpuKernelSet::kReference : CpuKernelSet::kFast;
}

std::unique_ptr<CpuOps> MakeCpuOps(CpuKernelSet set) {
  if (set == CpuKernelSet::kReference) return std::make_unique<CpuOps>();
  return std::make_unique<CpuFastOps>();
}

CpuKernelReport DescribeCpuKernels(CpuKernelSet set, bool this_machine) {
  CpuKernelReport r;
  r.set = CpuKernelSetName(set);
  if (set == CpuKernelSet::kReference) {
    r.ops = CpuOps().name();
    r.reason =
        "CpuOps, the plain reference kernels: a request's output does not depend on the "
        "batch (slow; for debugging)";
    return r;
  }
  if (!this_machine) {
    r.ops = "cpu-fast-<isa>";
    r.reason =
        "CpuFastOps; the instruction set (avx512bf16, avx512, avx2 or scalar) is chosen at "
        "start-up on the serving machine";
    return r;
  }
  const CpuFastOps fast;
  r.ops = fast.name();
  r.reason = std::string("CpuFastOps at ") + CpuIsaName(fast.isa()) +
             ": the best instruction set this machine supports";
  if (const char* cap = std::getenv("LUCID_CPU_ISA"); cap != nullptr && *cap != '\0')
    r.reason += std::string(" at or below LUCID_CPU_ISA=") + cap;
  return r;
}

}  // namespace lucid::config
