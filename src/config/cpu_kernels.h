// The CPU kernel set (`--cpu-kernels auto|fast|fast-bf16act|reference`, docs/CONFIG.md): which
// implementation of the op interface (ops/ops.h) a CPU run uses.
//   auto       The default: fast-bf16act for a checkpoint whose config says torch_dtype (or dtype)
//              bfloat16, fast for float32, float16 or none (CpuKernelSetForCheckpoint). A bf16
//              checkpoint's own precision: transformers with dtype "auto" and the GPU engines run
//              its matmuls on bf16 inputs (lucid keeps the residual stream, norms and attention in
//              f32 either way).
//   fast       CpuFastOps (backends/cpu/cpu_fast_ops.h): vectorized and threaded, instruction set
//              chosen at run time (the best this machine has; LUCID_CPU_ISA caps it). The matmuls
//              keep ~16 bits of each activation (the hi/lo bf16 split).
//              Tested against the reference; a request's logits may differ in the last bits with
//              the number of tokens sharing its step (different matmul paths by token count).
//   fast-bf16act  CpuFastOps with FastActivations::kBf16: the matmuls round their activations to
//              bf16 (one vdpbf16ps per weight pair at avx512bf16 instead of the hi/lo pair).
//              Tested against the reference run on bf16-rounded activations.
//   reference  CpuOps (backends/cpu/cpu_ops.h): the plain oracle. A request's output does not
//              depend on what else is in the batch. For debugging and comparisons.
// Every command that runs a model on the CPU (serve, generate, bench) builds its ops here, and the
// resolver reports the same name (`DescribeCpuKernels`), so what is printed is what runs.
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/cpu/cpu_ops.h"
#include "core/status.h"

namespace lucid::config {

enum class CpuKernelSet { kFast, kFastBf16Activations, kReference };
// "fast", "fast-bf16act", "reference" (the option's values)
const char* CpuKernelSetName(CpuKernelSet set);

// Parses a set's name (a value of --cpu-kernels other than "auto", which the resolver's rules and
// ChooseCpuKernelSet resolve first). InvalidArgument with the option table's one-line message
// (`--cpu-kernels: unknown value "x" (valid: auto, fast, fast-bf16act, reference)`) otherwise.
StatusOr<CpuKernelSet> ParseCpuKernelSet(const std::string& text);

// `--cpu-kernels auto` for a checkpoint whose config.json gives `torch_dtype` (the ModelConfig
// field, also read from `dtype`): kFastBf16Activations for "bfloat16", kFast otherwise. The
// reason is one line for the resolver, `bench` and `explain`.
CpuKernelSet CpuKernelSetForCheckpoint(const std::string& torch_dtype);
std::string CpuKernelSetForCheckpointReason(const std::string& torch_dtype);

// A value of --cpu-kernels as a command gives it (generate, bench): "auto" chooses by the
// checkpoint's torch_dtype, any other value as ParseCpuKernelSet.
StatusOr<CpuKernelSet> ChooseCpuKernelSet(const std::string& text, const std::string& torch_dtype);

// The set's ops on this machine, built by its entry in the backend registry
// (backends/cpu/ops_registry.h), whose names are the sets' names.
std::unique_ptr<Ops> MakeCpuOps(CpuKernelSet set);
// The set's Backend (backends/backend.h; a CpuBackend owning MakeCpuOps(set)): what serve,
// generate and bench load the model on.
std::unique_ptr<Backend> MakeCpuBackend(CpuKernelSet set);

// What the resolver reports for the set.
struct CpuKernelReport {
  std::string set;     // "fast" | "fast-bf16act" | "reference"
  std::string ops;     // the name the ops report: "cpu-fast-avx512bf16", "cpu-reference"
  std::string reason;  // one line: what it is and why this instruction set
};
// `this_machine`: the plan is for the machine resolving it (--target local), so the fast set's
// instruction set is the one MakeCpuOps would use here; otherwise it is chosen at start-up on the
// serving machine and `ops` says "cpu-fast-<isa>".
CpuKernelReport DescribeCpuKernels(CpuKernelSet set, bool this_machine);

}  // namespace lucid::config
