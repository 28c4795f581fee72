#include "config/resolved_config.h"

#include <cstdio>
#include <sstream>

#include "config/option_table.h"

namespace lucid::config {
namespace {

std::string Pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}

std::string Bytes(uint64_t b) { return FormatBytes(static_cast<double>(b)); }

}  // namespace

std::string ResolvedField::Provenance() const {
  if (source == Source::kRule) return "rule:" + rule_id;
  return SourceName(source);
}

std::string ResolvedField::ValueText() const {
  const OptionSpec* spec = FindOption(name);
  if (spec != nullptr && spec->type == OptionType::kBytes && value.is_number_integer())
    return value.get<int64_t>() == 0 ? "0" : FormatBytes(value.get<double>());
  if (secret) return value.is_string() && !value.get<std::string>().empty() ? "<set>" : "<unset>";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "-";
  return value.dump();
}

const ResolvedField* ResolvedConfig::Field(const std::string& name) const {
  for (const ResolvedField& f : d_.fields)
    if (f.name == name) return &f;
  return nullptr;
}

const nlohmann::json& ResolvedConfig::Value(const std::string& name) const {
  const ResolvedField* f = Field(name);
  LUCID_CHECK(f != nullptr, "no resolved field " + name);
  return f->value;
}

std::string ResolvedConfig::String(const std::string& name) const {
  const nlohmann::json& v = Value(name);
  if (v.is_null()) return "";
  LUCID_CHECK(v.is_string(), "resolved " + name + " is not a string: " + v.dump());
  return v.get<std::string>();
}

int64_t ResolvedConfig::Int(const std::string& name) const {
  const nlohmann::json& v = Value(name);
  LUCID_CHECK(v.is_number_integer(), "resolved " + name + " is not an integer: " + v.dump());
  return v.get<int64_t>();
}

double ResolvedConfig::Number(const std::string& name) const {
  const nlohmann::json& v = Value(name);
  LUCID_CHECK(v.is_number(), "resolved " + name + " is not a number: " + v.dump());
  return v.get<double>();
}

bool ResolvedConfig::Bool(const std::string& name) const {
  const nlohmann::json& v = Value(name);
  LUCID_CHECK(v.is_boolean(), "resolved " + name + " is not a boolean: " + v.dump());
  return v.get<bool>();
}

KvDtype ResolvedConfig::kv_cache_dtype() const {
  StatusOr<KvDtype> d = KvDtypeFromName(String("kv-cache-dtype"));
  LUCID_CHECK(d.ok(), d.status().message());
  return *d;
}

CpuKernelSet ResolvedConfig::cpu_kernel_set() const {
  LUCID_CHECK(d_.cpu_kernels.has_value(), "cpu_kernel_set: the plan is not for a cpu device");
  StatusOr<CpuKernelSet> set = ParseCpuKernelSet(d_.cpu_kernels->set);
  LUCID_CHECK(set.ok(), set.status().message());
  return *set;
}

nlohmann::json ResolvedConfig::ToJson() const {
  nlohmann::json settings = nlohmann::json::object();
  for (const ResolvedField& f : d_.fields) {
    nlohmann::json e = {{"value", f.secret ? nlohmann::json(f.ValueText()) : f.value},
                        {"source", f.Provenance()}};
    if (!f.origin.empty()) e["origin"] = f.origin;
    if (!f.reason.empty()) e["reason"] = f.reason;
    settings[f.name] = e;
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelChoice& k : d_.kernels) {
    nlohmann::json cands = nlohmann::json::array();
    for (const CandidateReport& c : k.candidates)
      cands.push_back({{"name", c.name},
                       {"taken", c.taken},
                       {"supported", c.supported},
                       {"compiled_in", c.compiled_in},
                       {"reason", c.reason}});
    kernels.push_back({{"family", FamilyName(k.family)},
                       {"phases", k.phases},
                       {"situation", k.what},
                       {"kernel", k.kernel},
                       {"flag", k.flag},
                       {"source", k.source == Source::kRule ? "rule:" + k.rule_id
                                                            : std::string(SourceName(k.source))},
                       {"reason", k.reason},
                       {"compiled_in", k.compiled_in},
                       {"candidates", cands}});
  }
  nlohmann::json cpu_kernels = nullptr;
  if (d_.cpu_kernels) {
    const ResolvedField* f = Field("cpu-kernels");
    cpu_kernels = {{"set", d_.cpu_kernels->set},
                   {"ops", d_.cpu_kernels->ops},
                   {"source", f != nullptr ? f->Provenance() : "default"},
                   {"reason", d_.cpu_kernels->reason}};
  }
  return {{"valid", true},
          {"target", d_.target.Describe()},
          {"model", d_.model_summary},
          {"settings", settings},
          {"kernels", kernels},
          {"cpu_kernels", cpu_kernels},
          {"fp8_scales", d_.fp8_scales},
          {"memory", d_.memory.ToJson()},
          {"notes", d_.notes},
          {"runnable_here", d_.not_runnable_here.empty()},
          {"not_runnable_here", d_.not_runnable_here}};
}

std::string ResolvedConfig::ToText() const {
  std::ostringstream o;
  o << "Target: " << d_.target.Describe() << "\n";
  o << "Model:  " << d_.model_summary << "\n\nSettings\n";
  for (const ResolvedField& f : d_.fields) {
    o << "  " << Pad(f.name, 22) << Pad(f.ValueText(), 18) << Pad(f.Provenance(), 28);
    if (!f.reason.empty())
      o << f.reason;
    else if (!f.origin.empty() && IsUser(f.source))
      o << f.origin;
    o << "\n";
  }
  o << "\nKernels\n";
  for (const KernelChoice& k : d_.kernels) {
    o << "  " << Pad(std::string(FamilyName(k.family)) + " " + k.phases, 34) << Pad(k.kernel, 18)
      << (k.source == Source::kRule ? "rule:" + k.rule_id
                                    : std::string(SourceName(k.source)) + " " + k.flag)
      << (k.compiled_in ? "" : "  [not compiled in]") << "\n";
    o << "      " << k.what << "\n";
    for (const CandidateReport& c : k.candidates) {
      if (c.taken) continue;
      o << "      - " << Pad(c.name, 18) << (c.supported ? "" : "refused: ") << c.reason << "\n";
    }
  }
  if (d_.cpu_kernels) {
    const ResolvedField* f = Field("cpu-kernels");
    o << "  " << Pad("cpu kernel set", 34) << Pad(d_.cpu_kernels->ops, 18) << "--cpu-kernels "
      << d_.cpu_kernels->set << " (" << (f != nullptr ? f->Provenance() : "default") << ")\n"
      << "      " << d_.cpu_kernels->reason << "\n";
  }
  for (const std::string& l : d_.fp8_scales) o << "  fp8 block scales: " << l << "\n";
  const MemoryPlan& m = d_.memory;
  o << "\nMemory plan (per device)\n";
  o << "  device memory          " << Bytes(m.device_memory) << "\n";
  o << "  mem-fraction-static    " << m.mem_fraction_static << " -> static budget "
    << Bytes(m.static_budget) << " (largest that fits: " << m.max_fraction << ")\n";
  o << "  parallel layout        " << m.layout << " (rule:parallel-layout) " << m.layout_reason
    << "\n";
  o << "  weights                " << Bytes(m.weights) << " per rank: attention "
    << Bytes(m.weight_parts.attention) << ", routed experts " << Bytes(m.weight_parts.experts)
    << ", other " << Bytes(m.weight_parts.other) << "\n";
  o << "  KV per token           " << m.kv_bytes_per_token << " B (" << m.kv_bytes_per_token_layer
    << " B per layer)\n";
  o << "  KV capacity            " << m.kv_capacity_tokens << " tokens; pool sized for "
    << m.max_total_tokens << " tokens = " << Bytes(m.kv_pool_bytes) << " per rank\n";
  if (m.tp > 1)
    o << "  server KV tokens       " << m.server_kv_tokens
      << (m.dp > 1
              ? " (" + std::to_string(m.dp) + " ranks x " + std::to_string(m.max_total_tokens) +
                    ": each rank holds its own requests' KV)"
              : std::string(" (the KV is replicated on every rank: as many as one rank)"))
      << "\n";
  o << "  activations            " << Bytes(m.activations) << "\n";
  for (const MemoryItem& i : m.activation_items)
    o << "      " << Pad(i.name, 44) << Pad(Bytes(i.bytes), 12) << i.detail << "\n";
  if (!m.graph_buckets.empty()) {
    o << "  CUDA graph reserve     " << Bytes(m.graph_reserve) << " (estimate; "
      << m.graph_buckets.size() << " batch sizes up to " << m.graph_buckets.back() << ")\n";
    o << "      " << Pad("decode buffers at batch " + std::to_string(m.graph_buckets.back()), 44)
      << Bytes(m.graph_workspace) << " (one pool, shared by every graph)\n";
    o << "      " << Pad("captured graphs", 44) << Pad(Bytes(m.graph_exec), 12)
      << m.graph_buckets.size() << " graphs x 32 KiB per layer\n";
    o << "      batch sizes " << GraphBucketsText(m.graph_buckets)
      << "; a batch of n runs padded to the smallest size >= n, a larger one without a graph\n";
  } else if (d_.target.has_gpu) {
    const ResolvedField* f = Field("disable-cuda-graph");
    o << "  CUDA graph reserve     none (no graphs captured: disable-cuda-graph "
      << (f != nullptr ? f->ValueText() + ", " + f->Provenance() : std::string("?")) << ")\n";
  }
  o << "  runtime overhead       " << Bytes(m.runtime_overhead) << " (estimate)\n";
  for (const std::string& n : m.notes) o << "  note: " << n << "\n";
  if (!d_.notes.empty()) o << "\nNotes\n";
  for (const std::string& n : d_.notes) o << "  - " << n << "\n";
  if (!d_.not_runnable_here.empty()) {
    o << "\nThe plan is valid for the target, but this build cannot run it yet:\n";
    for (const std::string& n : d_.not_runnable_here) o << "  - " << n << "\n";
  }
  return o.str();
}

}  // namespace lucid::config
