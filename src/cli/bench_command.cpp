// `lucid bench`: machine probes, then prefill, decode at batch sizes and a context sweep on one
// model (bench/bench.h). Human-readable lines go to stdout, or to stderr with --json (the JSON
// document then goes to stdout). `--device cuda` (a CUDA build on a GPU machine) runs the device
// benchmark instead (bench/device_benchmark.h) on the plan's CUDA op set on GPU 0, with the
// device's probes (backends/cuda/cuda_probe.h) and batch sizes 1,8,32,128 unless --batch says
// otherwise.
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/local_gpus.h"
#include "cli/process_env.h"
#include "cli/serve_parallel.h"
#include "config/cli_options.h"
#include "config/cpu_kernels.h"
#include "config/resolver.h"
#include "config/wait_policy.h"
#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_probe.h"
#include "bench/device_benchmark.h"
#include "cli/plan_backend.h"
#endif

namespace lucid::cli {
namespace {

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

// The benchmark's options from the resolved plan (model, kernel set, KV dtype) and the command's
// own arguments (config/command_options.cpp).
StatusOr<BenchOptions> OptionsFrom(const config::ExplicitSettings& s,
                                   const config::ResolvedConfig& rc) {
  BenchOptions o;
  o.model_path = rc.String("model-path");
  if (o.model_path.empty()) return InvalidArgument("--model-path is required");
  const config::CpuKernelSet set = rc.cpu_kernel_set();
  o.kernel_set = config::CpuKernelSetName(set);
  const config::ResolvedField* k = rc.Field("cpu-kernels");
  o.kernel_set_reason = k->source == config::Source::kRule ? "auto: " + k->reason : "given";
  o.reference_ops = set == config::CpuKernelSet::kReference;
  o.activations = set == config::CpuKernelSet::kFastBf16Activations ? FastActivations::kBf16
                                                                    : FastActivations::kF32;
  o.kv_dtype = rc.kv_cache_dtype();
  LUCID_ASSIGN_OR_RETURN(o.batches, ParseList("--batch", s.String("batch")));
  LUCID_ASSIGN_OR_RETURN(o.contexts, ParseList("--context", s.String("context")));
  o.prompt_len = s.Int("prompt-len");
  o.gen_len = s.Int("gen-len");
  o.repeats = static_cast<int>(s.Int("repeats"));
  o.skip_prefill = s.Bool("skip-prefill");
  o.by_weight = s.Bool("by-weight");
  return o;
}

// `lucid bench --device cuda`: the device benchmark on GPU 0 (one process; the plan's CUDA op set,
// cuda-bf16act or cuda-reference as --dtype says, which the self-test gate of serve and generate
// does not hold a benchmark to: its figures are timings).
Status RunOnCuda(const config::ExplicitSettings& s, const config::ResolvedConfig& rc) {
#ifdef LUCID_HAVE_CUDA
  if (rc.Int("tp-size") != 1) return FailedPrecondition("bench --device cuda runs on one GPU");
  LUCID_ASSIGN_OR_RETURN(const cuda::CudaOpsSet* set, PlanCudaOpsSet(rc));
  DeviceBenchOptions o;
  o.model_path = rc.String("model-path");
  if (o.model_path.empty()) return InvalidArgument("--model-path is required");
  o.kv_dtype = rc.kv_cache_dtype();
  o.batches = {1, 8, 32, 128};
  if (s.Get("batch") != nullptr) {
    LUCID_ASSIGN_OR_RETURN(o.batches, ParseList("--batch", s.String("batch")));
  }
  o.prompt_len = s.Int("prompt-len");
  o.context = s.Int("prompt-len");
  o.gen_len = s.Int("gen-len");
  o.repeats = static_cast<int>(s.Int("repeats"));
  o.skip_prefill = s.Bool("skip-prefill");
  LUCID_ASSIGN_OR_RETURN(std::vector<cuda::CudaDeviceInfo> devices, cuda::ProbeCudaDevices());
  if (devices.empty()) return FailedPrecondition("--device cuda: no CUDA device");
  LUCID_ASSIGN_OR_RETURN(cuda::CudaProbe measured, cuda::ProbeCudaDevice(0));
  DeviceProbes probes;
  probes.device = cuda::DescribeDevice(devices[0]);
  probes.read_gbs = measured.read_gbs;
  probes.peak_gbs = devices[0].peak_bandwidth_gbs;
  probes.bf16_tflops = measured.bf16_tflops;
  probes.f32_tflops = measured.f32_tflops;
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> b,
                         cuda::CudaBackend::Create(0, set->make, set->backend));
  const bool json = s.Bool("json");
  LUCID_ASSIGN_OR_RETURN(nlohmann::json j, RunDeviceBench(*b, probes, o, json ? stderr : stdout));
  if (json) std::printf("%s\n", j.dump(2).c_str());
  return OkStatus();
#else
  (void)s;
  (void)rc;
  return FailedPrecondition(
      "bench --device cuda: this build has no CUDA backend (configure with -DLUCID_CUDA=ON)");
#endif
}

Status Run(const config::ExplicitSettings& s) {
  if (const config::ExplicitValue* d = s.Get("device"); d != nullptr && d->value == "cuda") {
    LUCID_ASSIGN_OR_RETURN(config::ResolvedConfig rc, ResolveOnThisMachine(s));
    return RunOnCuda(s, rc);
  }
  // The same OpenMP wait policy as `lucid serve` (config/wait_policy.h); may re-execute once,
  // before any parallel region runs.
  LUCID_ASSIGN_OR_RETURN(
      config::WaitPolicyPlan wait,
      config::PlanWaitPolicy(s.Get("cpu-wait-policy"), config::OmpEnvironmentOf(s)));
  ApplyWaitPolicy(wait, "bench");
  const bool json = s.Bool("json");
  std::fprintf(json ? stderr : stdout, "cpu wait policy: %s\n",
               config::DescribeWaitPolicy(wait).c_str());
  LUCID_ASSIGN_OR_RETURN(config::ResolvedConfig rc, config::Resolve(s));
  if (!rc.data().cpu_kernels.has_value())
    return FailedPrecondition("bench runs on the cpu device only (--device cpu)");
  LUCID_ASSIGN_OR_RETURN(BenchOptions o, OptionsFrom(s, rc));
  // `mpirun -np N lucid bench --tp-size N`: every rank runs the benchmark on its shard; rank 0
  // prints, the others write nothing.
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, JoinWorld(rc.Int("tp-size"), "bench"));
  std::optional<TimedCommunicator> timed;
  if (comm) timed.emplace(*comm);
  o.tp = timed ? &*timed : nullptr;
  o.ep_size = static_cast<int>(rc.Int("ep-size"));
  const bool leader = !comm || comm->rank() == 0;
  std::FILE* log = json ? stderr : stdout;
  std::FILE* quiet = leader ? nullptr : std::fopen("/dev/null", "w");
  if (!leader && quiet == nullptr) return Internal("bench: cannot open /dev/null");
  StatusOr<nlohmann::json> j = RunBench(o, leader ? log : quiet);
  if (quiet != nullptr) std::fclose(quiet);
  if (!j.ok()) return j.status();
  if (json && leader) std::printf("%s\n", j->dump(2).c_str());
  return OkStatus();
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark a model: bandwidth/FMA probes, prefill, decode, context sweep");
  opts->AddTo(cmd, config::kBench);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    Status s = settings.ok() ? Run(*settings) : settings.status();
    if (!s.ok()) {
      std::fprintf(stderr, "lucid bench: %s\n", s.message().c_str());
      *exit_code = ExitCodeFor(s);
    }
  });
}

}  // namespace lucid::cli
