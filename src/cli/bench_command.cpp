// `lucid bench`: machine probes, then prefill, decode at batch sizes and a context sweep on one
// model (bench/bench.h). Human-readable lines go to stdout, or to stderr with --json (the JSON
// document then goes to stdout).
#include <cstdio>
#include <sstream>

#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/process_env.h"
#include "config/cpu_kernels.h"
#include "config/wait_policy.h"
#include "formats/model_config.h"

namespace lucid::cli {
namespace {

struct BenchFlags {
  BenchOptions o;
  std::string batches = "1,8,32";
  std::string contexts;
  std::string kv_cache_dtype = "f32";
  std::string cpu_kernels;     // "" = not given: auto
  bool reference_ops = false;  // deprecated alias of --cpu-kernels reference
  bool json = false;
};

StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    int64_t mult = 1;
    if (item.back() == 'k' || item.back() == 'K') {
      mult = 1024;
      item.pop_back();
    }
    size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || x <= 0)
      return InvalidArgument(flag + ": \"" + item + "\" is not a positive count");
    v.push_back(x * mult);
  }
  return v;
}

// --cpu-kernels, or the deprecated --reference-ops (which must not contradict it); `auto` (the
// default) chooses by the checkpoint's torch_dtype, and *reason says so.
StatusOr<config::CpuKernelSet> KernelSet(const BenchFlags& f, std::string* reason) {
  const std::string text = f.cpu_kernels.empty() ? "auto" : f.cpu_kernels;
  if (f.cpu_kernels.empty() && f.reference_ops) return config::CpuKernelSet::kReference;
  std::string torch_dtype;
  if (text == "auto") {
    LUCID_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(f.o.model_path));
    torch_dtype = config.torch_dtype;
    *reason = "auto: " + config::CpuKernelSetForCheckpointReason(torch_dtype);
  }
  LUCID_ASSIGN_OR_RETURN(config::CpuKernelSet set, config::ChooseCpuKernelSet(text, torch_dtype));
  if (f.reference_ops && set != config::CpuKernelSet::kReference)
    return InvalidArgument(
        "--reference-ops (deprecated: = --cpu-kernels reference) contradicts "
        "--cpu-kernels " +
        text);
  return set;
}

Status Run(BenchFlags& f) {
  // The same OpenMP wait policy as `lucid serve` (config/wait_policy.h); may re-execute once.
  LUCID_ASSIGN_OR_RETURN(config::WaitPolicyPlan wait, config::PlanWaitPolicyFromEnvironment());
  ApplyWaitPolicy(wait, "bench");
  std::fprintf(f.json ? stderr : stdout, "cpu wait policy: %s\n",
               config::DescribeWaitPolicy(wait).c_str());
  std::string reason = "given";
  LUCID_ASSIGN_OR_RETURN(config::CpuKernelSet set, KernelSet(f, &reason));
  f.o.kernel_set = config::CpuKernelSetName(set);
  f.o.kernel_set_reason = reason;
  f.o.reference_ops = set == config::CpuKernelSet::kReference;
  f.o.activations = set == config::CpuKernelSet::kFastBf16Activations ? FastActivations::kBf16
                                                                      : FastActivations::kF32;
  LUCID_ASSIGN_OR_RETURN(f.o.batches, ParseList("--batch", f.batches));
  LUCID_ASSIGN_OR_RETURN(f.o.contexts, ParseList("--context", f.contexts));
  LUCID_ASSIGN_OR_RETURN(f.o.kv_dtype, ParseKvCacheDtype(f.kv_cache_dtype));
  LUCID_ASSIGN_OR_RETURN(nlohmann::json j, RunBench(f.o, f.json ? stderr : stdout));
  if (f.json) std::printf("%s\n", j.dump(2).c_str());
  return OkStatus();
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark a model: bandwidth/FMA probes, prefill, decode, context sweep");
  cmd->add_option("--model-path", f->o.model_path, "Model directory")->required();
  cmd->add_option("--batch", f->batches, "Decode batch sizes, comma-separated");
  cmd->add_option("--prompt-len", f->o.prompt_len, "Prefill length and decode context")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--gen-len", f->o.gen_len, "Timed decode steps per configuration")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--context", f->contexts, "Context sweep, e.g. 1k,4k,16k,32k (DSA vs dense)");
  cmd->add_option("--repeats", f->o.repeats, "Prefill repeats (median)")->check(CLI::Range(1, 100));
  cmd->add_option("--cpu-kernels", f->cpu_kernels,
                  "CPU kernel set: auto (fast-bf16act for a bfloat16 checkpoint, else fast), fast "
                  "(CpuFastOps), fast-bf16act (CpuFastOps with bf16 matmul activations) or "
                  "reference (CpuOps) [default: auto]");
  cmd->add_flag("--reference-ops", f->reference_ops,
                "Deprecated alias of --cpu-kernels reference (the CpuOps reference kernels)");
  cmd->add_flag("--skip-prefill", f->o.skip_prefill, "Do not measure prefill");
  cmd->add_flag(
      "--by-weight", f->o.by_weight,
      "Print each decode batch's matmuls per weight (time, GB/s, share of the bandwidth)");
  cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                  "KV cache storage: f32 (default, = auto) | bf16 | fp8_e4m3");
  cmd->add_flag("--json", f->json, "Print the results as JSON on stdout");
  cmd->callback([f, exit_code] {
    Status s = Run(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "lucid bench: %s\n", s.ToString().c_str());
      *exit_code = s.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
  });
}

}  // namespace lucid::cli
