#include "config/resolver.h"

#include <algorithm>

#include "config/cuda_plan_set.h"
#include "config/fp8_scale_plan.h"
#include "config/option_table.h"
#include "config/resolver_internal.h"
#include "config/wait_policy.h"
#include "formats/align_checkpoint.h"

namespace lucid::config {
namespace internal {

using json = nlohmann::json;

const ExplicitValue* Resolver::User(const std::string& name) const {
  const ExplicitValue* v = s_.Get(name);
  return v != nullptr && !v->value.is_null() ? v : nullptr;
}

void Resolver::SetUser(const std::string& name) {
  const ExplicitValue* v = s_.Get(name);
  const OptionSpec* spec = FindOption(name);
  ResolvedField f{name, v->value, v->source, v->origin, "", "", spec->secret};
  values_[name] = v->value;
  fields_[name] = f;
}

void Resolver::SetDefault(const std::string& name) {
  const OptionSpec* spec = FindOption(name);
  ResolvedField f{name, DefaultValue(*spec), Source::kDefault, "", "", "", spec->secret};
  values_[name] = f.value;
  fields_[name] = f;
}

void Resolver::SetRule(const std::string& name, const Rule& rule, json value,
                       const std::string& reason_suffix) {
  RuleContext ctx{model_, target_, values_};
  ResolvedField f{name, value, Source::kRule, "", rule.id, rule.reason(ctx) + reason_suffix, false};
  // An explicit "auto" is recorded as where the decision was asked for.
  if (const ExplicitValue* v = s_.Get(name)) f.origin = v->origin + " = auto";
  values_[name] = value;
  fields_[name] = f;
}

Status Resolver::FillFromRule(const std::string& name) {
  if (User(name)) {
    SetUser(name);
    return OkStatus();
  }
  const OptionSpec* spec = FindOption(name);
  if (!spec->auto_default()) {
    SetDefault(name);
    return OkStatus();
  }
  RuleContext ctx{model_, target_, values_};
  const Rule* r = FirstRule(name, ctx);
  if (r == nullptr) return Internal("no rule resolves " + name);
  SetRule(name, *r, r->value(ctx));
  return OkStatus();
}

std::string Resolver::Cite(const std::string& name) const {
  auto it = fields_.find(name);
  const std::string value = it != fields_.end() ? it->second.ValueText()
                            : s_.Get(name)      ? s_.Get(name)->text
                                                : "auto";
  const std::string prov = it != fields_.end()       ? it->second.Provenance()
                           : s_.Get(name) != nullptr ? SourceName(s_.Get(name)->source)
                                                     : "unset";
  return "--" + name + " " + value + " (" + prov + ")";
}

Status Resolver::ResolveTargetFields() {
  if (User("target"))
    SetUser("target");
  else
    SetDefault("target");
  LUCID_ASSIGN_OR_RETURN(Target t, ParseTargetSpec(V("target").get<std::string>()));
  AddLocalGpus(local_gpus_, &t);
  target_ = t;
  if (!target_.has_gpu) {
    for (const char* g : {"gpu-memory", "gpu-count"})
      if (User(g))
        return InvalidArgument(Cite(g) + " describes GPUs, but --target " + target_.spec +
                               " has none (use --target cuda:sm_<NN> to plan for GPUs)");
  } else if (!User("gpu-memory") && !target_.local) {
    return InvalidArgument("--target " + target_.spec +
                           " needs --gpu-memory (memory per GPU, e.g. 96GiB)");
  }
  LUCID_RETURN_IF_ERROR(FillFromRule("gpu-count"));
  LUCID_RETURN_IF_ERROR(FillFromRule("gpu-memory"));
  LUCID_RETURN_IF_ERROR(FillFromRule("cpu-memory"));
  target_.gpu_count = V("gpu-count").get<int64_t>();
  target_.gpu_memory = V("gpu-memory").get<int64_t>();
  target_.cpu_memory = V("cpu-memory").get<int64_t>();
  LUCID_RETURN_IF_ERROR(FillFromRule("device"));
  if (V("device") == "cuda" && !target_.has_gpu)
    return InvalidArgument(
        Cite("device") + " needs a GPU, but --target " + target_.spec + " has none" +
        (target_.no_gpu_reason.empty() ? "" : " (" + target_.no_gpu_reason + ")") +
        " (would work: --device cpu, or --target cuda:sm_<NN> to plan for one)");
  return OkStatus();
}

Status Resolver::ResolveModelFields() {
  LUCID_RETURN_IF_ERROR(FillFromRule("model-path"));
  LUCID_RETURN_IF_ERROR(FillFromRule("served-model-name"));
  LUCID_RETURN_IF_ERROR(FillFromRule("tp-size"));
  const int64_t tp = V("tp-size").get<int64_t>();
  const int64_t heads = model_.config.num_attention_heads;
  if (tp > 1 && V("device") == "cpu" && heads > 0 && heads % tp != 0) {
    std::string ok;
    for (int64_t t = 1; t <= heads && t <= 64; ++t)
      if (heads % t == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(t);
    return InvalidArgument(Cite("tp-size") + " needs to divide the model's " +
                           std::to_string(heads) + " attention heads (would work: --tp-size " + ok +
                           ")");
  }
  if (V("device") == "cuda") {
    std::string ok;
    for (int64_t t = 1; t <= target_.gpu_count; ++t)
      if (heads % t == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(t);
    if (tp > target_.gpu_count || heads % tp != 0)
      return InvalidArgument(
          Cite("tp-size") + " needs " +
          (heads % tp != 0 ? "to divide the model's " + std::to_string(heads) + " attention heads"
                           : std::to_string(tp) + " GPUs, the target has " +
                                 std::to_string(target_.gpu_count)) +
          " (would work: --tp-size " + ok + ")");
  }
  LUCID_RETURN_IF_ERROR(FillFromRule("ep-size"));
  const int64_t ep = V("ep-size").get<int64_t>();
  if (ep != 1 && ep != tp)
    return InvalidArgument(Cite("ep-size") +
                           " partitions the experts over the tensor-parallel "
                           "ranks, so it is 1 or --tp-size (" +
                           std::to_string(tp) + ") (would work: --ep-size 1, --ep-size " +
                           std::to_string(tp) + ")");
  const int64_t experts = model_.config.n_routed_experts;
  if (ep > 1 && experts > 0 && experts % ep != 0)
    return InvalidArgument(Cite("ep-size") + " needs to divide the model's " +
                           std::to_string(experts) + " routed experts (would work: --ep-size 1)");
  LUCID_RETURN_IF_ERROR(FillFromRule("enable-dp-attention"));
  LUCID_RETURN_IF_ERROR(FillFromRule("dp-size"));
  const int64_t dp = V("dp-size").get<int64_t>();
  if (V("enable-dp-attention") == true && dp != tp)
    return InvalidArgument(Cite("dp-size") + " with " + Cite("enable-dp-attention") +
                           " needs to equal --tp-size " + std::to_string(tp) +
                           " (every tensor-parallel rank runs attention for its own requests; "
                           "would work: --dp-size " +
                           std::to_string(tp) + ")");
  if (V("enable-dp-attention") == false && dp != 1)
    return InvalidArgument(Cite("dp-size") + " needs --enable-dp-attention (would work: " +
                           "--enable-dp-attention --dp-size " + std::to_string(tp) +
                           " | --dp-size 1)");
  LUCID_RETURN_IF_ERROR(FillFromRule("dtype"));
  LUCID_RETURN_IF_ERROR(FillFromRule("context-length"));
  const int64_t max_pos = model_.config.max_position_embeddings;
  if (max_pos > 0 && V("context-length").get<int64_t>() > max_pos)
    return InvalidArgument(Cite("context-length") +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(max_pos) +
                           " (would work: --context-length <= " + std::to_string(max_pos) + ")");
  LUCID_RETURN_IF_ERROR(FillFromRule("disable-cuda-graph"));
  if (V("disable-cuda-graph") == false && V("device") == "cpu")
    return InvalidArgument(Cite("disable-cuda-graph") +
                           " asks for CUDA graphs, but the device is cpu (would work: "
                           "--disable-cuda-graph true)");
  return OkStatus();
}

Status Resolver::ResolveCpuKernels() {
  LUCID_RETURN_IF_ERROR(FillFromRule("cpu-kernels"));
  LUCID_ASSIGN_OR_RETURN(CpuKernelSet set, ParseCpuKernelSet(V("cpu-kernels").get<std::string>()));
  if (V("device") == "cpu")
    cpu_kernels_ = DescribeCpuKernels(set, target_.local);
  else if (User("cpu-kernels"))
    notes_.push_back(Cite("cpu-kernels") + " has no effect: the device is " +
                     V("device").get<std::string>());
  return OkStatus();
}

Status Resolver::ResolveWaitPolicy() {
  LUCID_ASSIGN_OR_RETURN(WaitPolicyPlan p,
                         PlanWaitPolicy(s_.Get("cpu-wait-policy"), OmpEnvironmentOf(s_)));
  ResolvedField f{"cpu-wait-policy", p.policy, p.source, p.origin, p.rule_id, p.reason, false};
  values_[f.name] = f.value;
  fields_[f.name] = f;
  return OkStatus();
}

StatusOr<ResolvedConfig> Resolver::Run() {
  LUCID_RETURN_IF_ERROR(ResolveTargetFields());
  LUCID_RETURN_IF_ERROR(ResolveModelFields());
  LUCID_RETURN_IF_ERROR(ResolveKernels());
  LUCID_RETURN_IF_ERROR(ResolveCpuKernels());
  if (model_.misaligned_weight_bytes > 0 && V("device") == "cpu")
    notes_.push_back(MisalignedWeightsMessage(model_.misaligned_weight_bytes));
  LUCID_RETURN_IF_ERROR(FillFromRule("chunked-prefill-size"));
  LUCID_RETURN_IF_ERROR(FillFromRule("max-running-requests"));
  LUCID_RETURN_IF_ERROR(FillFromRule("cuda-graph-max-bs"));
  if (User("cuda-graph-max-bs") && V("disable-cuda-graph") == true)
    notes_.push_back(Cite("cuda-graph-max-bs") + " has no effect: CUDA graphs are off (" +
                     Cite("disable-cuda-graph") + ")");
  LUCID_RETURN_IF_ERROR(ResolveMemory());
  LUCID_RETURN_IF_ERROR(ResolveWaitPolicy());
  for (const OptionSpec& o : Options())
    if (o.in_plan() && !fields_.count(o.name)) LUCID_RETURN_IF_ERROR(FillFromRule(o.name));

  ResolvedData d;
  for (const OptionSpec& o : Options())
    if (o.in_plan()) d.fields.push_back(fields_.at(o.name));
  d.target = target_;
  const ModelConfig& c = model_.config;
  d.model_summary = c.architecture + " (" + c.model_type + "), " +
                    std::to_string(c.num_hidden_layers) + " layers, " +
                    (model_.sparse_attention ? "DSA sparse attention" : "dense MLA") + "; " +
                    model_.QuantDescription() + "; weights " +
                    FormatBytes(static_cast<double>(model_.TotalBytes())) +
                    (model_.sizes_from_checkpoint ? " (safetensors headers)"
                                                  : " (computed from config.json: no weights)");
  d.kernels = kernels_;
  d.fp8_scales = Fp8ScaleLines(kernels_, target_.sm, model_);
  d.cpu_kernels = cpu_kernels_;
  d.memory = memory_;
  d.notes = notes_;
  if (V("device") == "cuda" && !BuildHasCuda())
    d.not_runnable_here.push_back(
        "this build has no CUDA backend (configure with -DLUCID_CUDA=ON)");
  if (V("device") == "cuda" && BuildHasCuda())
    d.notes.push_back(
        "--device cuda: `lucid serve` and `lucid generate` run lucid's CUDA kernels "
        "(cuda-bf16act for --dtype bfloat16, or cuda-fp8act where named for the FP8 block "
        "matmuls; cuda-reference's exact f32 for float32; no CUDA graphs) on GPU 0, and `lucid "
        "bench` its device benchmark");
  if (V("device") == "cuda") {  // a model runs one CUDA op set (config/cuda_plan_set.h)
    const StatusOr<std::string> set = CudaOpsSetOfPlan(kernels_);
    if (!set.ok()) d.not_runnable_here.push_back(set.status().message());
  }
  if (V("device") == "cuda" && V("tp-size").get<int64_t>() > 1)
    d.not_runnable_here.push_back("tensor parallelism " + V("tp-size").dump() +
                                  " on the CUDA backend: a model runs on one GPU so far");
  // One line per kernel gap, naming the families it affects ("kernel cuda-reference cannot be
  // captured in a CUDA graph (dense_attention, matmul, ...)").
  std::vector<std::pair<std::string, std::string>> gaps;
  for (const KernelChoice& k : kernels_) {
    if (!k.compiled_in)
      d.not_runnable_here.push_back(std::string(FamilyName(k.family)) + " " + k.phases +
                                    ": kernel " + k.kernel + " is not compiled into this build");
    for (const std::string& g : k.gaps) {
      auto it = std::find_if(gaps.begin(), gaps.end(), [&](const auto& p) { return p.first == g; });
      if (it == gaps.end()) it = gaps.insert(gaps.end(), {g, ""});
      if (it->second.find(FamilyName(k.family)) == std::string::npos)
        it->second += (it->second.empty() ? "" : ", ") + std::string(FamilyName(k.family));
    }
  }
  for (const auto& [g, families] : gaps)
    d.not_runnable_here.push_back("kernel " + g + " (" + families + ")");
  if (V("tp-size").get<int64_t>() > model_.max_tensor_parallel)
    d.not_runnable_here.push_back("tensor parallelism " + V("tp-size").dump() +
                                  ": the model registry implements tp <= " +
                                  std::to_string(model_.max_tensor_parallel) + " so far");
  return ResolvedConfig(std::move(d));
}

std::vector<std::string> Fp8ScaleLines(const std::vector<KernelChoice>& kernels, int sm,
                                       const ModelFacts& model) {
  std::vector<std::string> lines;
  for (const KernelChoice& k : kernels) {
    for (const Situation& s : k.situations) {
      if (s.weight_format != WeightFormat::kFp8Block) continue;
      for (const KernelDecl* decl : FindKernels(k.family, k.kernel)) {
        if (Refusal(*decl, s, s.device != Device::kCuda)) continue;  // as SelectKernel does
        const std::string line =
            DecideFp8Scales(*decl, sm, model.ue8m0_scales, model.fp8_scales_stored_ue8m0).Line();
        if (std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(line);
        break;
      }
      break;
    }
  }
  return lines;
}

}  // namespace internal

StatusOr<ResolvedConfig> Resolve(const ExplicitSettings& settings, const ResolveOptions& options) {
  if (options.model != nullptr)
    return internal::Resolver(settings, *options.model, options.local_gpus).Run();
  ModelFacts model;
  {
    const ExplicitValue* mp = settings.Get("model-path");
    if (mp == nullptr || !mp->value.is_string() || mp->value.get<std::string>().empty())
      return InvalidArgument("--model-path is required (a directory with config.json)");
    LUCID_ASSIGN_OR_RETURN(model, LoadModelFacts(mp->value.get<std::string>()));
  }
  return internal::Resolver(settings, model, options.local_gpus).Run();
}

}  // namespace lucid::config
