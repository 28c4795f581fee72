// ResolvedConfig: the immutable outcome of resolution. Every setting of the option table with its
// value and provenance (user:cli / user:file / user:env, default, or rule:<id> with the rule's
// reason), the kernel chosen for each family and phase with every candidate and why it was taken or
// refused, and the memory plan. Printed as a table by `lucid explain` and at `lucid serve`
// start-up, and served as JSON.
// Thread-safety: immutable after construction; safe to share between threads.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/cpu_kernels.h"
#include "config/kernel_selection.h"
#include "config/memory_plan.h"
#include "config/settings.h"
#include "config/target.h"
#include "models/kv_cache.h"

namespace lucid::config {

struct ResolvedField {
  std::string name;      // option name ("kv-cache-dtype")
  nlohmann::json value;  // typed value; null only for a setting with no value (e.g. no api key)
  Source source = Source::kDefault;
  std::string origin;   // for user values: the flag, file + key, or environment variable
  std::string rule_id;  // for Source::kRule
  std::string reason;   // for Source::kRule: the rule's one-line reason
  bool secret = false;
  std::string Provenance() const;  // "user:cli", "default", "rule:kv-fp8-dsa-blackwell"
  std::string ValueText() const;   // printable value ("<set>" for secrets)
};

struct KernelChoice {
  KernelFamily family = KernelFamily::kMatmul;
  std::string phases;  // "prefill", "decode", "prefill+decode"
  std::string what;    // "fp8_block weights", "KV fp8_e4m3" ... (situation summary)
  std::string kernel;
  std::string flag;               // option that governs it ("" for auto-only families)
  Source source = Source::kRule;  // user:* when the flag picked it
  std::string rule_id, reason;
  bool compiled_in = false;
  std::vector<CandidateReport> candidates;
  std::vector<Situation> situations;  // exactly what the kernel was checked against
  std::vector<std::string> gaps;      // cuda: what the kernel lacks for them (Selection::gaps)
};

struct ResolvedData {
  std::vector<ResolvedField> fields;  // option-table order
  Target target;
  std::string model_summary;  // architecture, layers, quantization, where sizes came from
  std::vector<KernelChoice> kernels;
  // FP8 block models: what each FP8 kernel reads as scales and what the load converts, one line
  // each (config/fp8_scale_plan.h); empty otherwise.
  std::vector<std::string> fp8_scales;
  // Device cpu: the kernel set --cpu-kernels chose and the ops name it runs as; nullopt on cuda.
  std::optional<CpuKernelReport> cpu_kernels;
  MemoryPlan memory;
  std::vector<std::string> notes;              // things the user should know (never silent)
  std::vector<std::string> not_runnable_here;  // why this build cannot run the plan as is
};

class ResolvedConfig {
 public:
  explicit ResolvedConfig(ResolvedData d) : d_(std::move(d)) {}
  const ResolvedData& data() const { return d_; }
  const ResolvedField* Field(const std::string& name) const;
  // The value of a field (aborts if the name is not a plan option of the table).
  const nlohmann::json& Value(const std::string& name) const;
  // Typed values. Resolution leaves every field with a value of its option's type (rules fill
  // the `auto` ones), so these abort only on a programming error: a name of another type, or one
  // that resolved to no value (String of a secret that was not set gives "").
  std::string String(const std::string& name) const;
  int64_t Int(const std::string& name) const;
  double Number(const std::string& name) const;
  bool Bool(const std::string& name) const;
  // kv-cache-dtype as the KV pool's dtype.
  KvDtype kv_cache_dtype() const;
  // The CPU kernel set that runs (device cpu; --cpu-kernels after its rule): what MakeCpuOps
  // builds and `explain` reports. Aborts on a cuda plan.
  CpuKernelSet cpu_kernel_set() const;
  const std::vector<KernelChoice>& kernels() const { return d_.kernels; }
  const std::vector<std::string>& not_runnable_here() const { return d_.not_runnable_here; }
  const MemoryPlan& memory() const { return d_.memory; }

  nlohmann::json ToJson() const;
  std::string ToText() const;  // the human table

 private:
  ResolvedData d_;
};

}  // namespace lucid::config
