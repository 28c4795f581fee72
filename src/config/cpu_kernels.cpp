#include "config/cpu_kernels.h"

#include <cstdlib>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/ops_registry.h"
#include "config/option_table.h"

namespace lucid::config {

const char* CpuKernelSetName(CpuKernelSet set) {
  switch (set) {
    case CpuKernelSet::kReference:
      return "reference";
    case CpuKernelSet::kFastBf16Activations:
      return "fast-bf16act";
    case CpuKernelSet::kFast:
      break;
  }
  return "fast";
}

StatusOr<CpuKernelSet> ParseCpuKernelSet(const std::string& text) {
  const OptionSpec* spec = FindOption("cpu-kernels");
  LUCID_CHECK(spec != nullptr, "the option table has no cpu-kernels");
  LUCID_ASSIGN_OR_RETURN(nlohmann::json v, ParseOptionValue(*spec, text));
  for (CpuKernelSet s :
       {CpuKernelSet::kFast, CpuKernelSet::kFastBf16Activations, CpuKernelSet::kReference})
    if (v == CpuKernelSetName(s)) return s;
  if (v.is_null())  // "auto"
    return InvalidArgument(
        "--cpu-kernels auto: the set depends on the checkpoint (internal: "
        "resolve it with ChooseCpuKernelSet or the resolver's rule)");
  return Internal("--cpu-kernels: the option table allows \"" + text +
                  "\" but no kernel set has that name");
}

CpuKernelSet CpuKernelSetForCheckpoint(const std::string& torch_dtype) {
  return torch_dtype == "bfloat16" ? CpuKernelSet::kFastBf16Activations : CpuKernelSet::kFast;
}

std::string CpuKernelSetForCheckpointReason(const std::string& torch_dtype) {
  const std::string dtype = torch_dtype.empty() ? "unset" : torch_dtype;
  if (CpuKernelSetForCheckpoint(torch_dtype) == CpuKernelSet::kFastBf16Activations)
    return "the checkpoint's torch_dtype is bfloat16: its matmuls take bf16 inputs, as in "
           "transformers (dtype auto) and the GPU engines; residual, norms and attention stay "
           "f32 (--cpu-kernels fast keeps ~16 bits of each matmul input)";
  return "the checkpoint's torch_dtype is " + dtype +
         ": the matmuls keep ~16 bits of each input (the hi/lo bf16 split)";
}

StatusOr<CpuKernelSet> ChooseCpuKernelSet(const std::string& text, const std::string& torch_dtype) {
  const OptionSpec* spec = FindOption("cpu-kernels");
  LUCID_ASSIGN_OR_RETURN(nlohmann::json v, ParseOptionValue(*spec, text));
  if (v.is_null()) return CpuKernelSetForCheckpoint(torch_dtype);  // "auto"
  return ParseCpuKernelSet(text);
}

namespace {

FastActivations ActivationsOf(CpuKernelSet set) {
  return set == CpuKernelSet::kFastBf16Activations ? FastActivations::kBf16 : FastActivations::kF32;
}

}  // namespace

std::unique_ptr<Ops> MakeCpuOps(CpuKernelSet set) {
  const OpsSetEntry* e = FindOpsSet("cpu", CpuKernelSetName(set));
  LUCID_CHECK(e != nullptr,
              std::string("the backend registry has no cpu set ") + CpuKernelSetName(set));
  return e->make(CpuIsa::kAvx512Bf16);
}

std::unique_ptr<Backend> MakeCpuBackend(CpuKernelSet set) {
  const OpsSetEntry* e = FindOpsSet("cpu", CpuKernelSetName(set));
  LUCID_CHECK(e != nullptr,
              std::string("the backend registry has no cpu set ") + CpuKernelSetName(set));
  return MakeBackend(*e, CpuIsa::kAvx512Bf16);
}

CpuKernelReport DescribeCpuKernels(CpuKernelSet set, bool this_machine) {
  CpuKernelReport r;
  r.set = CpuKernelSetName(set);
  if (set == CpuKernelSet::kReference) {
    r.ops = MakeCpuOps(set)->name();
    r.reason =
        "CpuOps, the plain reference kernels: a request's output does not depend on the "
        "batch (slow; for debugging)";
    return r;
  }
  const bool bf16 = set == CpuKernelSet::kFastBf16Activations;
  const std::string act =
      bf16 ? "; matmul activations rounded to bf16 (~1e-3 relative from the f32 results)" : "";
  if (!this_machine) {
    r.ops = bf16 ? "cpu-fast-<isa>-bf16act" : "cpu-fast-<isa>";
    r.reason =
        "CpuFastOps; the instruction set (avx512bf16, avx512, avx2 or scalar) is chosen at "
        "start-up on the serving machine" +
        act;
    return r;
  }
  const CpuFastOps fast(CpuIsa::kAvx512Bf16, ActivationsOf(set));
  r.ops = MakeCpuOps(set)->name();  // what serve and generate build: the registry's entry
  r.reason = std::string("CpuFastOps at ") + CpuIsaName(fast.isa()) +
             ": the best instruction set this machine supports";
  if (const char* cap = std::getenv("LUCID_CPU_ISA"); cap != nullptr && *cap != '\0')
    r.reason += std::string(" at or below LUCID_CPU_ISA=") + cap;
  r.reason += act;
  if (bf16 && fast.isa() != CpuIsa::kAvx512Bf16)
    r.reason += " (rounded only: without AVX512_BF16 this gains no speed)";
  return r;
}

}  // namespace lucid::config
