// Kernel search: KV dtype x page size candidates (explicit ones fixed), every family the model
// needs, explicit backends checked and never replaced; on failure, the alternatives that would
// work, found by re-running the same search with one explicit setting changed.
#include <algorithm>
#include <functional>

#include "config/option_table.h"
#include "config/resolver_internal.h"

namespace lucid::config::internal {
namespace {

using json = nlohmann::json;

const char* const kBackendOptions[] = {
    "attention-backend", "nsa-prefill-backend", "nsa-decode-backend", "moe-runner-backend",
    "fp8-gemm-backend",  "fp4-gemm-backend",    "sampling-backend"};

std::string PhasesText(const std::vector<Phase>& phases) {
  std::string s;
  for (Phase p : phases) s += (s.empty() ? "" : "+") + std::string(PhaseName(p));
  return s;
}

Situation MakeSituation(const ModelFacts& m, const Need& n, Phase p, const KernelEnv& e) {
  Situation s;
  s.device = e.device;
  s.sm = e.sm;
  s.family = n.family;
  s.phase = p;
  s.weight_format = n.format.value_or(WeightFormat::kBF16);
  s.ue8m0_scales = m.ue8m0_scales;
  s.kv_dtype = e.kv;
  s.compute_dtype = e.compute;
  s.page_size = e.page;
  s.mla_head_dim = m.config.kv_lora_rank + m.config.qk_rope_head_dim;
  s.indexer_head_dim = m.config.index_head_dim;
  s.graph_capture = e.graphs;
  return s;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

DType ComputeDTypeFromName(const std::string& s) {
  if (s == "float32") return DType::kF32;
  if (s == "float16") return DType::kF16;
  return DType::kBF16;
}

std::vector<Need> NeedsFor(const ModelFacts& m) {
  using F = KernelFamily;
  const std::vector<Phase> both = {Phase::kPrefill, Phase::kDecode};
  std::vector<Need> n;
  if (m.sparse_attention) {
    n.push_back({F::kSparseAttention,
                 {Phase::kPrefill},
                 std::nullopt,
                 "nsa-prefill-backend",
                 "attention-backend"});
    n.push_back({F::kSparseAttention,
                 {Phase::kDecode},
                 std::nullopt,
                 "nsa-decode-backend",
                 "attention-backend"});
    n.push_back({F::kIndexer, both, std::nullopt, "", ""});
  } else {
    n.push_back({F::kDenseAttention, both, std::nullopt, "attention-backend", ""});
  }
  for (WeightFormat f : m.linear_formats) {
    const std::string flag = f == WeightFormat::kFp8Block ? "fp8-gemm-backend"
                             : f == WeightFormat::kNvfp4  ? "fp4-gemm-backend"
                                                          : "";
    n.push_back({F::kMatmul, both, f, flag, ""});
  }
  if (m.expert_format) n.push_back({F::kMoe, both, *m.expert_format, "moe-runner-backend", ""});
  n.push_back({F::kSampling, both, std::nullopt, "sampling-backend", ""});
  return n;
}

KernelAttempt TryKernels(const ModelFacts& m, const std::vector<Need>& needs, const KernelEnv& e) {
  KernelAttempt a;
  for (const Need& n : needs) {
    std::vector<Situation> sits;
    for (Phase p : n.phases) sits.push_back(MakeSituation(m, n, p, e));
    std::string flag_used, name;
    for (const std::string& f : {n.flag, n.fallback_flag}) {
      auto it = f.empty() ? e.backends.end() : e.backends.find(f);
      if (it != e.backends.end()) {
        flag_used = f;
        name = it->second;
        break;
      }
    }
    Selection sel = SelectKernel(sits, name);
    std::string what = DescribeSituation(sits.front());
    what.replace(what.find(PhaseName(sits.front().phase)),
                 std::string(PhaseName(sits.front().phase)).size(), PhasesText(n.phases));
    if (!sel.ok) {
      // Report a refused explicit choice in preference to a family that found nothing.
      if (a.failure.empty() || (a.failed_flag.empty() && !flag_used.empty())) {
        a.failed_flag = flag_used;
        a.failure = what + ": " + sel.failure;
      }
      continue;
    }
    KernelChoice c;
    c.family = n.family;
    c.phases = PhasesText(n.phases);
    c.what = what;
    c.kernel = sel.kernel;
    c.flag = flag_used.empty() ? n.flag : flag_used;
    c.source = flag_used.empty() ? Source::kRule : Source::kCli;  // refined by the caller
    c.rule_id = flag_used.empty() ? "kernel-priority" : "";
    c.reason = flag_used.empty() ? "first of the " + std::string(DeviceName(e.device)) +
                                       " priority list that supports it"
                                 : "named by --" + flag_used;
    c.compiled_in = sel.compiled_in;
    c.candidates = sel.candidates;
    c.situations = sits;
    c.gaps = sel.gaps;
    a.choices.push_back(std::move(c));
    a.situations.push_back(std::move(sits));
  }
  a.ok = a.failure.empty();
  return a;
}

KernelEnv Resolver::BaseEnv() const {
  KernelEnv e;
  e.device = V("device") == "cuda" ? Device::kCuda : Device::kCpu;
  e.sm = e.device == Device::kCuda ? target_.sm : 0;
  e.compute = ComputeDTypeFromName(V("dtype").get<std::string>());
  e.graphs = e.device == Device::kCuda && V("disable-cuda-graph") == false;
  for (const char* b : kBackendOptions)
    if (const ExplicitValue* v = User(b)) e.backends[b] = v->value.get<std::string>();
  return e;
}

bool Resolver::AnyCombinationWorks(const KernelEnv& env, const std::vector<KvDtype>& kvs,
                                   const std::vector<int64_t>& pages) const {
  for (KvDtype kv : kvs)
    for (int64_t p : pages) {
      KernelEnv e = env;
      e.kv = kv;
      e.page = p;
      if (TryKernels(model_, needs_, e).ok) return true;
    }
  return false;
}

std::string Resolver::Alternatives(const KernelEnv& env, const std::vector<KvDtype>& kvs,
                                   const std::vector<int64_t>& pages,
                                   std::vector<std::string>* implicated) const {
  // Every single change of one explicit kernel-relevant setting.
  struct Change {
    std::string flag, value;
    std::function<void(KernelEnv&, std::vector<KvDtype>&, std::vector<int64_t>&)> apply;
  };
  std::vector<Change> changes;
  if (User("kv-cache-dtype"))
    for (const std::string& v : FindOption("kv-cache-dtype")->allowed)
      if (v != V("kv-cache-dtype"))
        changes.push_back(
            {"kv-cache-dtype", v, [v](KernelEnv&, auto& k, auto&) { k = {*KvDtypeFromName(v)}; }});
  if (User("page-size"))
    for (int64_t p : {1, 16, 32, 64, 128})
      if (p != V("page-size").get<int64_t>())
        changes.push_back(
            {"page-size", std::to_string(p), [p](KernelEnv&, auto&, auto& pg) { pg = {p}; }});
  if (User("dtype"))
    for (const std::string& v : FindOption("dtype")->allowed)
      if (v != V("dtype"))
        changes.push_back(
            {"dtype", v, [v](KernelEnv& e, auto&, auto&) { e.compute = ComputeDTypeFromName(v); }});
  if (User("disable-cuda-graph") && env.device == Device::kCuda)
    changes.push_back({"disable-cuda-graph", env.graphs ? "true" : "false",
                       [](KernelEnv& e, auto&, auto&) { e.graphs = !e.graphs; }});
  for (const auto& [flag, current] : env.backends) {
    std::vector<std::string> values = {"auto"};
    for (const std::string& v : FindOption(flag)->allowed) values.push_back(v);
    for (const std::string& v : values) {
      if (v == current) continue;
      const std::string f = flag;
      changes.push_back({flag, v, [f, v](KernelEnv& e, auto&, auto&) {
                           if (v == "auto")
                             e.backends.erase(f);
                           else
                             e.backends[f] = v;
                         }});
    }
  }
  auto works = [&](std::initializer_list<const Change*> cs) {
    KernelEnv e = env;
    std::vector<KvDtype> k = kvs;
    std::vector<int64_t> p = pages;
    for (const Change* c : cs) c->apply(e, k, p);
    return AnyCombinationWorks(e, k, p);
  };
  std::vector<std::string> parts;  // "--flag v1 | v2"
  std::string last_flag;
  for (const Change& c : changes) {
    if (!works({&c})) continue;
    if (c.flag != last_flag) {
      parts.push_back("--" + c.flag + " " + c.value);
      implicated->push_back(c.flag);
      last_flag = c.flag;
    } else {
      parts.back() += " | " + c.value;
    }
  }
  if (!parts.empty()) return "would work (changing one setting): " + Join(parts, "; ");
  std::vector<std::string> pairs;
  for (size_t i = 0; i < changes.size() && pairs.size() < 6; ++i)
    for (size_t j = i + 1; j < changes.size() && pairs.size() < 6; ++j) {
      if (changes[i].flag == changes[j].flag || !works({&changes[i], &changes[j]})) continue;
      pairs.push_back("--" + changes[i].flag + " " + changes[i].value + " --" + changes[j].flag +
                      " " + changes[j].value);
      for (const std::string& f : {changes[i].flag, changes[j].flag})
        if (std::find(implicated->begin(), implicated->end(), f) == implicated->end())
          implicated->push_back(f);
    }
  if (!pairs.empty()) return "would work (changing two settings): " + Join(pairs, " | ");
  return "no change of one or two explicit settings makes it work on this target";
}

Status Resolver::ResolveKernels() {
  needs_ = NeedsFor(model_);
  RuleContext ctx{model_, target_, values_};
  std::vector<KvDtype> kvs;
  std::vector<int64_t> pages;
  const Rule* kv_rule = nullptr;
  const Rule* page_rule = nullptr;
  if (const ExplicitValue* v = User("kv-cache-dtype")) {
    kvs.push_back(*KvDtypeFromName(v->value.get<std::string>()));
    SetUser("kv-cache-dtype");
  } else {
    kv_rule = FirstRule("kv-cache-dtype", ctx);
    for (const json& j : kv_rule->value(ctx)) kvs.push_back(*KvDtypeFromName(j.get<std::string>()));
  }
  if (const ExplicitValue* v = User("page-size")) {
    pages.push_back(v->value.get<int64_t>());
    SetUser("page-size");
  } else {
    page_rule = FirstRule("page-size", ctx);
    for (const json& j : page_rule->value(ctx)) pages.push_back(j.get<int64_t>());
  }
  const KernelEnv base = BaseEnv();
  KernelAttempt first, found;
  KvDtype kv_found = kvs[0];
  int64_t page_found = pages[0];
  std::string kv_refusal;
  for (KvDtype kv : kvs) {
    for (int64_t p : pages) {
      KernelEnv e = base;
      e.kv = kv;
      e.page = p;
      KernelAttempt a = TryKernels(model_, needs_, e);
      if (first.failure.empty() && !a.ok) first = a;
      if (a.ok) {
        found = a;
        kv_found = kv;
        page_found = p;
        break;
      }
    }
    if (found.ok) break;
    if (kv_refusal.empty()) kv_refusal = first.failure;
  }
  if (!found.ok) {
    std::vector<std::string> implicated;
    const std::string alternatives = Alternatives(base, kvs, pages, &implicated);
    std::string head = first.failed_flag.empty()
                           ? "no kernel supports " + first.failure
                           : Cite(first.failed_flag) + " cannot serve " + first.failure;
    std::vector<std::string> conflict;
    if (!first.failed_flag.empty()) conflict.push_back(Cite(first.failed_flag));
    for (const std::string& n : implicated)
      if (n != first.failed_flag) conflict.push_back(Cite(n));
    std::string msg = head;
    if (!conflict.empty()) msg += ". Conflicting settings: " + Join(conflict, ", ");
    return InvalidArgument(msg + ". " + alternatives);
  }
  if (kv_rule != nullptr) {
    std::string suffix;
    if (kv_found != kvs[0])
      suffix = "; " + std::string(KvDtypeName(kvs[0])) + " is not possible (" + kv_refusal + ")";
    SetRule("kv-cache-dtype", *kv_rule, KvDtypeName(kv_found), suffix);
  }
  if (page_rule != nullptr) SetRule("page-size", *page_rule, page_found);
  kernels_ = found.choices;
  for (KernelChoice& k : kernels_) {
    if (k.source != Source::kRule) k.source = s_.Get(k.flag)->source;
  }
  // The backend options' own fields.
  for (const char* b : kBackendOptions) {
    if (User(b)) {
      SetUser(b);
      bool used = false;
      for (const KernelChoice& k : kernels_) used = used || k.flag == b;
      if (!used)
        notes_.push_back(Cite(b) + " has no effect: " +
                         (model_.sparse_attention && std::string(b) == "attention-backend"
                              ? "both sparse phases are set by --nsa-prefill-backend and "
                                "--nsa-decode-backend"
                              : "this model does not use that kernel family"));
      continue;
    }
    const KernelChoice* used = nullptr;
    for (const KernelChoice& k : kernels_)
      if (k.flag == b) used = &k;
    const std::string bs = b;
    if (used == nullptr && model_.sparse_attention && User("attention-backend") &&
        (bs == "nsa-prefill-backend" || bs == "nsa-decode-backend")) {
      SetRule(b, *RuleById("nsa-follows-attention-backend"), V("attention-backend"));
    } else if (used != nullptr) {
      SetRule(b, *RuleById("kernel-priority"), used->kernel, " (" + used->what + ")");
    } else {
      std::string why = model_.sparse_attention && std::string(b) == "attention-backend"
                            ? " (DSA model: attention runs in the sparse kernels of "
                              "--nsa-prefill-backend / --nsa-decode-backend)"
                            : "";
      SetRule(b, *RuleById("backend-unused"), nullptr, why);
    }
  }
  return OkStatus();
}

}  // namespace lucid::config::internal
