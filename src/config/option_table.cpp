#include "config/option_table.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "config/kernel_catalog.h"

namespace lucid::config {
namespace {

using F = KernelFamily;

OptionSpec Opt(std::string name, OptionType type, std::string def, std::string group,
               std::string help) {
  OptionSpec o;
  o.name = std::move(name);
  o.type = type;
  o.default_text = std::move(def);
  o.group = std::move(group);
  o.help = std::move(help);
  return o;
}

OptionSpec Range(OptionSpec o, double lo, double hi) {
  o.min = lo;
  o.max = hi;
  return o;
}

OptionSpec Enum(std::string name, std::string def, std::vector<std::string> allowed,
                std::string group, std::string help) {
  OptionSpec o =
      Opt(std::move(name), OptionType::kEnum, std::move(def), std::move(group), std::move(help));
  o.allowed = std::move(allowed);
  return o;
}

std::vector<OptionSpec> BuildTable() {
  const std::string kModel = "Model", kPar = "Parallelism", kMem = "Memory and batching",
                    kKern = "Kernels", kGraph = "CUDA graphs", kServer = "Server",
                    kDebug = "Debugging", kTarget = "Target (what to plan for)";
  const double kMaxI = 1LL << 40;
  std::vector<OptionSpec> t;
  t.push_back(Opt("model-path", OptionType::kString, "", kModel,
                  "Model directory: config.json (+ hf_quant_config.json) and, optionally, the "
                  "safetensors files; or a GGUF file (Llama family)"));
  t.push_back(Opt("served-model-name", OptionType::kString, "auto", kModel,
                  "Name reported by the API (auto: the model directory's name)"));
  t.push_back(Enum("dtype", "auto", {"bfloat16", "float16", "float32"}, kModel,
                   "Activation (compute) dtype"));
  t.push_back(Range(Opt("context-length", OptionType::kInt, "auto", kModel,
                        "Longest sequence (prompt + output) in tokens (auto: the model's "
                        "max_position_embeddings)"),
                    1, kMaxI));
  t.push_back(Range(Opt("tp-size", OptionType::kInt, "1", kPar,
                        "Tensor-parallel degree (devices one model instance spans)"),
                    1, 64));
  t.push_back(Range(Opt("ep-size", OptionType::kInt, "1", kPar,
                        "Expert-parallel degree: the routed experts are partitioned over this "
                        "many of the tensor-parallel ranks (1, or equal to --tp-size)"),
                    1, 64));
  t.push_back(Opt("enable-dp-attention", OptionType::kBool, "false", kPar,
                  "Data-parallel attention (SGLang's name): each of the --dp-size ranks holds the "
                  "attention weights whole and runs attention and holds the KV cache for its own "
                  "requests, the MoE stays expert-parallel; planned by explain, not built yet "
                  "(serve and generate refuse it)"));
  t.push_back(Range(Opt("dp-size", OptionType::kInt, "1", kPar,
                        "Data-parallel attention degree: equal to --tp-size with "
                        "--enable-dp-attention, 1 without"),
                    1, 64));
  t.push_back(Enum("kv-cache-dtype", "auto", {"f32", "bf16", "fp8_e4m3"}, kMem,
                   "KV cache storage dtype; fp8_e4m3 is the FlashMLA layout (656 B per token "
                   "per layer + indexer keys)"));
  t.push_back(Range(Opt("mem-fraction-static", OptionType::kFloat, "auto", kMem,
                        "Fraction of device memory for weights + KV cache; the rest must hold "
                        "activations, graph capture and runtime overhead"),
                    0.01, 1.0));
  t.push_back(Range(
      Opt("max-running-requests", OptionType::kInt, "auto", kMem, "Most requests decoded together"),
      1, 1 << 20));
  t.push_back(Range(Opt("max-total-tokens", OptionType::kInt, "auto", kMem,
                        "KV cache capacity in tokens (auto: everything the memory plan leaves)"),
                    1, kMaxI));
  t.push_back(Range(Opt("chunked-prefill-size", OptionType::kInt, "auto", kMem,
                        "Most prompt tokens computed in one step"),
                    1, 1 << 20));
  t.push_back(
      Range(Opt("page-size", OptionType::kInt, "auto", kMem, "Tokens per KV cache page"), 1, 4096));
  auto backend = [&](std::string name, std::vector<F> families, std::optional<WeightFormat> wf,
                     std::string help) {
    OptionSpec o =
        Enum(std::move(name), "auto", BackendNames(families, wf), kKern, std::move(help));
    o.kernel_families = std::move(families);
    return o;
  };
  t.push_back(backend("attention-backend", {F::kDenseAttention, F::kSparseAttention}, std::nullopt,
                      "MLA attention kernel; for DSA models also the sparse phases unless "
                      "--nsa-prefill-backend / --nsa-decode-backend are given"));
  OptionSpec nsa_p = backend("nsa-prefill-backend", {F::kSparseAttention}, std::nullopt,
                             "Sparse (DSA) attention kernel for prefill");
  nsa_p.aliases = {"dsa-prefill-backend"};
  t.push_back(nsa_p);
  OptionSpec nsa_d = backend("nsa-decode-backend", {F::kSparseAttention}, std::nullopt,
                             "Sparse (DSA) attention kernel for decode");
  nsa_d.aliases = {"dsa-decode-backend"};
  t.push_back(nsa_d);
  t.push_back(backend("moe-runner-backend", {F::kMoe}, std::nullopt, "Routed-expert (MoE) kernel"));
  t.push_back(backend("fp8-gemm-backend", {F::kMatmul}, WeightFormat::kFp8Block,
                      "GEMM kernel for fp8 block-quantized linear layers"));
  t.push_back(backend("fp4-gemm-backend", {F::kMatmul}, WeightFormat::kNvfp4,
                      "GEMM kernel for NVFP4 linear layers"));
  t.push_back(backend("sampling-backend", {F::kSampling}, std::nullopt, "Sampling kernel"));
  t.push_back(Enum("cpu-kernels", "auto", {"fast", "fast-bf16act", "reference"}, kKern,
                   "CPU kernel set: auto (fast-bf16act for a checkpoint whose torch_dtype is "
                   "bfloat16, else fast), fast (CpuFastOps: AVX-512/AVX2 chosen at run time, "
                   "LUCID_CPU_ISA caps the level; the matmuls keep ~16 bits of each input), "
                   "fast-bf16act (the same with the matmuls' inputs rounded to bf16, as GPU "
                   "engines compute: half the arithmetic in batched decode, ~1e-3 relative from "
                   "the f32 results) or reference (CpuOps: the plain oracle kernels, whose "
                   "results do not depend on the batch; for debugging)"));
  t.push_back(Enum("cpu-wait-policy", "auto", {"short-spin", "passive", "active", "environment"},
                   kKern,
                   "How the CPU kernels' OpenMP workers wait between parallel regions (auto: "
                   "environment when OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, else short-spin: "
                   "spin ~0.1 ms, then sleep, so a busy CPU is not starved); applied by lucid "
                   "re-executing itself once with the OpenMP variables set"));
  t.push_back(Opt("allow-unverified-kernels", OptionType::kBool, "false", kKern,
                  "Start on a GPU even when a kernel of the plan failed its self-test on this "
                  "device's compute capability, or was never run there (a warning names each)"));
  t.push_back(Opt("self-test-dir", OptionType::kString, "", kKern,
                  "Where device self-test records are kept, one per binary and compute capability "
                  "(default: $XDG_CACHE_HOME/lucid/self-test, else ~/.cache/lucid/self-test)"));
  t.push_back(Enum("cpu-contention", "auto", {"leave-a-core", "ignore"}, kKern,
                   "What the serving engine does while other processes want its CPUs (auto: "
                   "leave-a-core: the kernels' parallel regions run on one thread fewer until "
                   "the CPUs are free again, the outputs unchanged; ignore: always every "
                   "thread)"));
  t.push_back(Range(Opt("cuda-graph-max-bs", OptionType::kInt, "auto", kGraph,
                        "Largest decode batch captured in a CUDA graph"),
                    1, 4096));
  t.push_back(Opt("disable-cuda-graph", OptionType::kBool, "auto", kGraph,
                  "Do not capture CUDA graphs (auto: captured on cuda, never on cpu)"));
  t.push_back(Opt("host", OptionType::kString, "127.0.0.1", kServer, "Address to listen on"));
  t.push_back(
      Range(Opt("port", OptionType::kInt, "30000", kServer, "Port to listen on"), 1, 65535));
  OptionSpec key = Opt("api-key", OptionType::kString, "", kServer,
                       "Require this bearer token on API requests (never printed)");
  key.secret = true;
  t.push_back(key);
  t.push_back(
      Enum("log-level", "info", {"debug", "info", "warning", "error"}, kServer, "Log verbosity"));
  t.push_back(Opt("strict-request-fields", OptionType::kBool, "false", kServer,
                  "Answer 400 to unknown request fields, as OpenAI does (default: ignore them and "
                  "name them in the X-Lucid-Ignored-Fields header and the log, as vLLM and "
                  "SGLang accept them)"));
  t.push_back(Enum("tool-call-parser", "auto",
                   {"none", "glm45", "glm47", "deepseekv31", "deepseekv32"}, kServer,
                   "How chat completions read tool calls in the model's output into "
                   "message.tool_calls (SGLang's names; auto: by the model type)"));
  t.push_back(Enum("reasoning-parser", "auto",
                   {"none", "glm45", "deepseek-r1", "deepseek-v3", "qwen3"}, kServer,
                   "How chat completions split <think>...</think> into reasoning_content "
                   "(SGLang's names, one <think> parser; auto: by the model type)"));
  t.push_back(Range(Opt("max-concurrent-requests", OptionType::kInt, "256", kServer,
                        "Generation requests held at once (queued in the engine beyond "
                        "--max-running-requests); one more is answered 429"),
                    1, 1 << 16));
  t.push_back(Range(Opt("max-request-bytes", OptionType::kBytes, "8MiB", kServer,
                        "Largest request body; larger ones are answered 413"),
                    1, 1LL << 32));
  t.push_back(Range(Opt("shutdown-grace", OptionType::kInt, "30", kServer,
                        "Seconds in-flight requests get to finish after SIGINT/SIGTERM"),
                    0, 3600));
  t.push_back(Opt("allowed-origins", OptionType::kString, "", kServer,
                  "CORS: comma-separated origins whose browser pages may call the API, or * for "
                  "any (default: none, no CORS headers)"));
  t.push_back(Enum("nan-check", "logits", {"off", "logits", "layers"}, kDebug,
                   "Non-finite checks: off, on the logits before sampling, or after every layer "
                   "(names the first layer and op)"));
  t.push_back(Enum("device", "auto", {"cpu", "cuda"}, kTarget,
                   "Device to run on (auto: the target's GPU if it has one, else cpu)"));
  t.push_back(Opt("target", OptionType::kString, "local", kTarget,
                  "Machine to plan for: local (this one, with its GPUs in a CUDA build), cpu, or "
                  "cuda:sm_<NN> (sm_90, sm_100, sm_120, ...)"));
  t.push_back(Range(Opt("gpu-memory", OptionType::kBytes, "auto", kTarget,
                        "Memory per GPU, e.g. 96GiB (auto: a local GPU's free memory; a "
                        "described target needs it)"),
                    1, 1e15));
  t.push_back(Range(Opt("gpu-count", OptionType::kInt, "auto", kTarget,
                        "GPUs of the target (auto: this machine's GPUs of one kind, 1 for a "
                        "described target, 0 without GPUs)"),
                    1, 64));
  t.push_back(Range(Opt("cpu-memory", OptionType::kBytes, "auto", kTarget,
                        "System memory of the target (auto: this machine's MemTotal)"),
                    1, 1e15));
  for (OptionSpec& o : t) {
    if (o.group == kServer) o.server_only = true;
  }
  // Plan options that the tools which run a model take too, resolved the same way.
  const auto also = [&t](const char* name, CommandSet extra) {
    for (OptionSpec& o : t)
      if (o.name == name) o.commands |= extra;
  };
  also("model-path", kGenerate | kBench | kQuantize | kAlign);
  also("kv-cache-dtype", kGenerate | kBench);
  also("cpu-kernels", kGenerate | kBench);
  also("page-size", kGenerate);
  also("tp-size", kGenerate | kBench);
  also("ep-size", kGenerate | kBench);
  also("enable-dp-attention", kGenerate);
  also("dp-size", kGenerate);
  also("cpu-wait-policy", kGenerate | kBench);
  // generate --device cuda on a described GPU target, with a plan lucid's CUDA sets can run.
  for (const char* name : {"device", "target", "gpu-memory", "dtype", "disable-cuda-graph",
                           "allow-unverified-kernels", "self-test-dir"})
    also(name, kGenerate);
  also("self-test-dir", kBackends);
  also("device", kBench);  // bench --device cuda: the device benchmark
  AppendCommandOptions(t);
  return t;
}

std::string Canonical(std::string_view name) {
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  std::string s(name);
  for (char& c : s) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
  return s;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string NumText(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

StatusOr<double> ParseNumber(const std::string& flag, const std::string& text, bool integer) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v) || (integer && v != std::floor(v)))
    return InvalidArgument(flag + ": \"" + text + "\" is not " +
                           (integer ? "an integer" : "a number"));
  return v;
}

}  // namespace

const char* CommandName(Command c) {
  switch (c) {
    case kServe:
      return "serve";
    case kExplain:
      return "explain";
    case kGenerate:
      return "generate";
    case kBench:
      return "bench";
    case kSynth:
      return "synth";
    case kQuantize:
      return "quantize";
    case kAlign:
      return "align";
    case kBackends:
      return "backends";
  }
  return "?";
}

const char* OptionTypeName(OptionType t) {
  switch (t) {
    case OptionType::kString:
      return "string";
    case OptionType::kInt:
      return "int";
    case OptionType::kFloat:
      return "float";
    case OptionType::kBool:
      return "bool";
    case OptionType::kEnum:
      return "enum";
    case OptionType::kBytes:
      return "bytes";
  }
  return "?";
}

std::string OptionSpec::env_name() const {
  std::string s = "LUCID_";
  for (char c : name) s += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return s;
}

std::string OptionSpec::key() const {
  std::string s = name;
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

const std::vector<OptionSpec>& Options() {
  static const std::vector<OptionSpec> kTable = BuildTable();
  return kTable;
}

const OptionSpec* FindOption(std::string_view name) {
  const std::string c = Canonical(name);
  for (const OptionSpec& o : Options()) {
    if (o.name == c) return &o;
    for (const std::string& a : o.aliases)
      if (a == c) return &o;
  }
  return nullptr;
}

StatusOr<nlohmann::json> ParseOptionValue(const OptionSpec& spec, const std::string& text) {
  const std::string flag = spec.flag();
  if (spec.auto_default() && text == "auto") return nlohmann::json(nullptr);
  switch (spec.type) {
    case OptionType::kString:
      return nlohmann::json(text);
    case OptionType::kBool: {
      std::string l = Canonical(text);
      if (l == "true" || l == "1" || l == "yes" || l == "on") return nlohmann::json(true);
      if (l == "false" || l == "0" || l == "no" || l == "off") return nlohmann::json(false);
      return InvalidArgument(flag + ": \"" + text + "\" is not a boolean (true or false)");
    }
    case OptionType::kEnum: {
      for (const std::string& a : spec.allowed)
        if (a == text) return nlohmann::json(text);
      if (std::optional<std::string> foreign = ForeignKernelRefusal(spec.kernel_families, text))
        return InvalidArgument(flag + " " + text + ": " + *foreign);
      return InvalidArgument(flag + ": unknown value \"" + text +
                             "\" (valid: " + (spec.auto_default() ? "auto, " : "") +
                             Join(spec.allowed, ", ") + ")");
    }
    case OptionType::kInt:
    case OptionType::kFloat:
    case OptionType::kBytes: {
      double v = 0;
      if (spec.type == OptionType::kBytes) {
        StatusOr<int64_t> b = ParseBytes(text);
        if (!b.ok()) return InvalidArgument(flag + ": " + b.status().message());
        v = static_cast<double>(*b);
      } else {
        LUCID_ASSIGN_OR_RETURN(v, ParseNumber(flag, text, spec.type == OptionType::kInt));
      }
      if (spec.min < spec.max && (v < spec.min || v > spec.max))
        return InvalidArgument(flag + ": " + text + " is out of range [" + NumText(spec.min) +
                               ", " + NumText(spec.max) + "]");
      if (spec.type == OptionType::kFloat) return nlohmann::json(v);
      return nlohmann::json(static_cast<int64_t>(v));
    }
  }
  return InvalidArgument(flag + ": unhandled option type");
}

nlohmann::json DefaultValue(const OptionSpec& spec) {
  if (spec.auto_default()) return nullptr;
  if (spec.type == OptionType::kEnum && spec.default_text.empty()) return "";  // no default
  StatusOr<nlohmann::json> v = ParseOptionValue(spec, spec.default_text);
  LUCID_CHECK(v.ok(), "bad default in the option table for " + spec.name);
  return *v;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

StatusOr<int64_t> ParseBytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  struct U {
    const char* name;
    double mul;
  };
  static const U kUnits[] = {{"", 1},
                             {"B", 1},
                             {"KB", 1e3},
                             {"MB", 1e6},
                             {"GB", 1e9},
                             {"TB", 1e12},
                             {"KiB", 1024.0},
                             {"MiB", 1048576.0},
                             {"GiB", 1073741824.0},
                             {"TiB", 1099511627776.0},
                             {"K", 1024.0},
                             {"M", 1048576.0},
                             {"G", 1073741824.0},
                             {"T", 1099511627776.0}};
  if (used > 0 && std::isfinite(v) && v >= 0) {
    for (const U& u : kUnits)
      if (unit == u.name) return static_cast<int64_t>(std::llround(v * u.mul));
  }
  return InvalidArgument("\"" + text + "\" is not a size (examples: 96GiB, 80GB, 512MiB)");
}

}  // namespace lucid::config
