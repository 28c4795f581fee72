// Internal to the resolver (resolver.cpp: settings flow; resolver_kernels.cpp: kernel search and
// "what would work" alternatives; resolver_memory.cpp: the memory plan and its refusals).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/kernel_selection.h"
#include "config/model_facts.h"
#include "config/resolved_config.h"
#include "config/rules.h"
#include "config/settings.h"
#include "config/target.h"

namespace lucid::config::internal {

// One kernel decision the model needs: a family, the phases one kernel must serve, the weight
// format (matmul/moe), and the option that governs it (with a fallback option for DSA attention).
struct Need {
  KernelFamily family;
  std::vector<Phase> phases;
  std::optional<WeightFormat> format;
  std::string flag;           // "" for auto-only families
  std::string fallback_flag;  // used when `flag` is unset ("attention-backend" for nsa-*)
};

// The settings kernels depend on, as one value.
struct KernelEnv {
  Device device = Device::kCpu;
  int sm = 0;
  KvDtype kv = KvDtype::kF32;
  int64_t page = 16;
  DType compute = DType::kF32;
  bool graphs = false;
  std::map<std::string, std::string> backends;  // explicit backend option -> name (non-auto)
};

struct KernelAttempt {
  bool ok = false;
  std::vector<KernelChoice> choices;
  std::vector<std::vector<Situation>> situations;  // parallel to choices
  // On failure: the need that failed, the backend option that named the refused kernel ("" if
  // auto) and the refusal text.
  std::string failed_flag;
  std::string failure;
};

std::vector<Need> NeedsFor(const ModelFacts& model);
KernelAttempt TryKernels(const ModelFacts& model, const std::vector<Need>& needs,
                         const KernelEnv& env);

DType ComputeDTypeFromName(const std::string& s);
// One line per FP8 block kernel of `kernels`: the scale format it reads on `sm` and the load's
// conversion (config/fp8_scale_plan.h).
std::vector<std::string> Fp8ScaleLines(const std::vector<KernelChoice>& kernels, int sm,
                                       const ModelFacts& model);

class Resolver {
 public:
  // `model` must outlive the Resolver.
  Resolver(const ExplicitSettings& s, const ModelFacts& model, const LocalGpus* local_gpus)
      : s_(s), model_(model), local_gpus_(local_gpus) {}
  StatusOr<ResolvedConfig> Run();

  // Fields (resolver.cpp).
  const ExplicitValue* User(const std::string& name) const;  // explicit and not "auto"
  void SetUser(const std::string& name);
  void SetDefault(const std::string& name);
  void SetRule(const std::string& name, const Rule& rule, nlohmann::json value,
               const std::string& reason_suffix = "");
  Status FillFromRule(const std::string& name);     // user, else non-auto default, else first rule
  std::string Cite(const std::string& name) const;  // "--kv-cache-dtype fp8_e4m3 (user:cli)"
  const nlohmann::json& V(const std::string& name) const { return values_.at(name); }

  // Stages.
  Status ResolveTargetFields();
  Status ResolveModelFields();
  Status ResolveKernels();  // resolver_kernels.cpp
  Status ResolveMemory();   // resolver_memory.cpp
  Status ResolveCpuKernels();
  Status ResolveWaitPolicy();  // config/wait_policy.h: the option and the OMP variables

  // resolver_kernels.cpp helpers.
  KernelEnv BaseEnv() const;
  bool AnyCombinationWorks(const KernelEnv& env, const std::vector<KvDtype>& kvs,
                           const std::vector<int64_t>& pages) const;
  std::string Alternatives(const KernelEnv& env, const std::vector<KvDtype>& kvs,
                           const std::vector<int64_t>& pages,
                           std::vector<std::string>* implicated) const;

  const ExplicitSettings& s_;
  const ModelFacts& model_;
  const LocalGpus* local_gpus_;  // may be null
  Target target_;
  std::map<std::string, nlohmann::json> values_;
  std::map<std::string, ResolvedField> fields_;
  std::vector<std::string> notes_;
  std::vector<KernelChoice> kernels_;
  std::optional<CpuKernelReport> cpu_kernels_;
  MemoryPlan memory_;
  std::vector<Need> needs_;
};

}  // namespace lucid::config::internal
