// The resolver: explicit settings + model + target -> an immutable ResolvedConfig, or an error.
//
// Contract:
// - An explicit user value (command line, config file, environment) is never changed. "auto"
//   given explicitly means the same as leaving the setting unset.
// - Every setting of the option table appears in the result with a provenance: the user's
//   source, the table default, or rule:<id> with the rule's reason (config/rules.cpp).
// - Kernels are chosen per family and phase from the kernel catalog (config/kernel_catalog.h);
//   every chosen kernel declares support for exactly the resolved situation.
// - When the explicit values cannot work together or on the target, resolution fails with a
//   message naming the conflicting settings, the missing capability and values that would work,
//   found by asking the kernel catalog and the memory planner (not written per case).
// - Nothing reads tensor data: config.json, hf_quant_config.json and safetensors headers only.
// Thread-safety: Resolve is reentrant.
#pragma once

#include "config/model_facts.h"
#include "config/resolved_config.h"
#include "config/settings.h"

namespace lucid::config {

struct ResolveOptions {
  // Model facts to use instead of reading --model-path (tests; `lucid serve` after a reload).
  const ModelFacts* model = nullptr;
  // This machine's GPUs for --target local (the commands that run a model probe them: config
  // does not link CUDA). Null: not probed, the local target is the CPU only.
  const LocalGpus* local_gpus = nullptr;
};

StatusOr<ResolvedConfig> Resolve(const ExplicitSettings& settings,
                                 const ResolveOptions& options = {});

}  // namespace lucid::config
