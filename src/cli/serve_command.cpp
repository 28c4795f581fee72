// `lucid serve`: resolves the configuration (config/ option table: flags, --config file, LUCID_*
// environment), starts listening at once (GET /health answers 503 "loading"), reads the weights
// with visible progress, builds the engine, runs a warm-up generation, and then serves until
// SIGINT/SIGTERM. Exit status: 0 after a clean shutdown; 2 for every refusal of the user's input,
// before or while loading (a configuration that cannot work, a model directory whose config,
// tokenizer or weights are malformed or unsupported: cli::ExitCodeFor); 1 for internal failures
// (port in use, warm-up failed, I/O errors).
// Shutdown: new generation requests get 503, in-flight ones have --shutdown-grace seconds to
// finish, then the engine fails the rest (each stream gets its final chunk and [DONE]); a second
// signal exits at once.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/process_env.h"
#include "cli/weight_prefetch.h"
#include "config/cli_options.h"
#include "config/cpu_kernels.h"
#include "config/option_table.h"
#include "config/resolver.h"
#include "config/wait_policy.h"
#include "core/parallel.h"
#include "formats/align_checkpoint.h"
#include "models/registry.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "server/model_assets.h"
#include "server/server_log.h"

namespace lucid::cli {
namespace {

using server::LogError;
using server::LogInfo;
using server::LogWarning;

// SIGINT/SIGTERM are blocked in every thread and taken by one watcher thread (sigwait), so HTTP
// and engine threads are never interrupted. The first signal sets `requested`; the second exits.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGUSR1);  // internal wake-up at exit
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a vanished client must not kill the server
    thread_ = std::thread([this] { Loop(); });
  }
  ~SignalWatcher() {
    done_ = true;
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }
  const std::atomic<bool>* requested() const { return &requested_; }
  // Waits until a signal arrives; returns its name.
  std::string Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return requested_.load(); });
    return name_;
  }

 private:
  void Loop() {
    while (true) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      if (done_) return;
      if (sig == SIGUSR1) continue;
      if (requested_.load()) {
        std::fprintf(stderr, "lucid serve: second signal, exiting now\n");
        std::_Exit(130);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        name_ = sig == SIGINT ? "SIGINT" : "SIGTERM";
        requested_ = true;
      }
      cv_.notify_all();
    }
  }
  sigset_t set_;
  std::thread thread_;
  std::atomic<bool> done_{false}, requested_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string name_;
};

EngineOptions EngineOptionsFrom(const config::ResolvedConfig& rc, int64_t context_length) {
  EngineOptions eo;
  eo.page_size = rc.Int("page-size");
  const int64_t total = rc.Int("max-total-tokens");
  eo.num_pages = (total + eo.page_size - 1) / eo.page_size;
  eo.max_running_requests = rc.Int("max-running-requests");
  eo.chunked_prefill_size = rc.Int("chunked-prefill-size");
  eo.context_length = context_length;
  const std::string nan = rc.String("nan-check");
  eo.nan_check = nan == "off"      ? EngineOptions::NanCheck::kOff
                 : nan == "layers" ? EngineOptions::NanCheck::kLayers
                                   : EngineOptions::NanCheck::kLogits;
  eo.kv_dtype = rc.kv_cache_dtype();
  // The CPU-contention rule (runtime/cpu_contention.h): one thread fewer while the CPU is busy.
  if (rc.String("cpu-contention") == "leave-a-core") eo.cpu_busy_threads = NumThreads() - 1;
  return eo;
}

// Start-up after the configuration resolved; returns the exit status.
int Serve(const config::ResolvedConfig& rc) {
  if (rc.Int("tp-size") > 1 || rc.Int("ep-size") > 1) {
    std::fprintf(stderr,
                 "lucid serve: --tp-size / --ep-size above 1: the server runs one process so far "
                 "(`mpirun -np N lucid generate --tp-size N` runs tensor-parallel; "
                 "docs/SERVING.md)\n");
    return 2;
  }
  SignalWatcher signals;
  server::ServerOptions so;
  so.host = rc.String("host");
  so.port = static_cast<int>(rc.Int("port"));
  so.api_key = rc.String("api-key");
  so.max_concurrent_requests = rc.Int("max-concurrent-requests");
  so.strict_request_fields = rc.Bool("strict-request-fields");
  for (std::string rest = rc.String("allowed-origins"); !rest.empty();) {
    const size_t comma = rest.find(',');
    std::string origin = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    origin.erase(0, origin.find_first_not_of(' '));
    origin.erase(origin.find_last_not_of(' ') + 1);
    if (!origin.empty()) so.allowed_origins.push_back(origin);
  }
  so.max_body_bytes = static_cast<size_t>(rc.Int("max-request-bytes"));
  const std::string model_path = rc.String("model-path");

  // --cpu-kernels: CpuFastOps by default, CpuOps with `reference` (the resolver validated the
  // value), on the host backend. Declared before the engine, so it outlives the model and the
  // engine thread.
  const std::unique_ptr<Backend> backend = config::MakeCpuBackend(rc.cpu_kernel_set());
  std::unique_ptr<Engine> engine;  // declared before the server: destroyed after it
  server::HttpServer http(so);
  if (Status s = http.Start(); !s.ok()) {
    LogError("lucid serve: " + s.message());
    return 1;
  }
  LogInfo("listening on " + http.url() + " (GET /health answers 503 until the model is ready)");
  http.SetPhase(server::Phase::kLoading, "reading " + model_path);

  StatusOr<server::ModelAssets> assets = server::LoadModelAssets(model_path);
  if (!assets.ok()) {
    LogError("lucid serve: " + assets.status().message());
    return ExitCodeFor(assets.status());
  }
  if (!assets->tokenizer)
    LogWarning("no tokenizer.json in " + model_path + ": requests must send token ids");
  if (!assets->chat_error.empty())
    LogWarning("chat completions unavailable: " + assets->chat_error);

  // A GGUF file (a path to a regular file) is mapped by the model itself; a safetensors directory
  // is opened and prefetched here.
  const bool gguf = std::filesystem::is_regular_file(model_path);
  std::optional<Checkpoint> ckpt;
  if (!gguf) {
    StatusOr<Checkpoint> opened = Checkpoint::Open(model_path);
    if (!opened.ok()) {
      LogError("lucid serve: " + opened.status().ToString());
      return ExitCodeFor(opened.status());
    }
    ckpt = std::move(*opened);
    if (Status s = PrefetchWeights(*ckpt, signals.requested()); !s.ok()) {
      LogError("lucid serve: " + s.ToString());
      return ExitCodeFor(s);
    }
    if (const uint64_t off = MisalignedWeightBytes(*ckpt); off > 0)
      LogWarning(MisalignedWeightsMessage(off));
  }
  http.SetPhase(server::Phase::kLoading, "preparing the model");
  LogInfo(std::string("kernels: ") + backend->ops().name() + " (--cpu-kernels " +
          rc.String("cpu-kernels") + ")");
  StatusOr<std::unique_ptr<Model>> model =
      gguf ? LoadModel(model_path, *backend) : LoadModel(*ckpt, *backend);
  if (!model.ok()) {
    LogError("lucid serve: " + model.status().ToString());
    return ExitCodeFor(model.status());
  }
  // The warm-up generation routes to a few experts only: every feed-forward block runs once here.
  http.SetPhase(server::Phase::kLoading, "checking every expert's weights");
  const auto check_start = std::chrono::steady_clock::now();
  if (Status s = (*model)->CheckFeedForwardWeights(); !s.ok()) {
    LogError("lucid serve: " + s.message());
    return ExitCodeFor(s);
  }
  LogInfo("weights: every MLP and expert gives finite outputs (" +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - check_start)
                             .count()) +
          " ms)");
  const ModelConfig mc = (*model)->config();
  const int64_t context = rc.Int("context-length");
  const EngineOptions eo = EngineOptionsFrom(rc, context);
  LogInfo("engine: page size " + std::to_string(eo.page_size) + ", " +
          std::to_string(eo.num_pages) + " KV pages, up to " +
          std::to_string(eo.max_running_requests) + " running requests, context " +
          std::to_string(context) + ", kernel threads " + std::to_string(NumThreads()) +
          (eo.cpu_busy_threads > 0
               ? " (" + std::to_string(eo.cpu_busy_threads) + " while the CPU is contended)"
               : ""));
  if (assets->tokenizer && int64_t(assets->tokenizer->vocab_size()) > mc.vocab_size)
    LogWarning("the tokenizer has " + std::to_string(assets->tokenizer->vocab_size()) +
               " ids but the model only " + std::to_string(mc.vocab_size) +
               ": text whose tokens fall outside the model's vocabulary is refused (400)");
  StatusOr<std::unique_ptr<Engine>> made = CreateEngine(std::move(*model), assets->tokenizer, eo);
  if (!made.ok()) {
    LogError("lucid serve: " + made.status().ToString());
    return ExitCodeFor(made.status());
  }
  engine = std::move(*made);

  server::ServingModel sm;
  sm.name = rc.String("served-model-name");
  sm.context_length = context;
  sm.vocab_size = mc.vocab_size;
  sm.tokenizer = assets->tokenizer;
  sm.chat_template = assets->chat_template;
  sm.chat_error = assets->chat_error;
  sm.bos_token = assets->bos_token;
  sm.eos_token = assets->eos_token;
  sm.model_path = model_path;
  sm.tool_call_format = server::ToolCallFormatFromName(rc.String("tool-call-parser"));
  sm.reasoning_parser = rc.String("reasoning-parser") != "none";
  if (assets->tokenizer) {
    std::vector<int32_t> eos(mc.eos_token_ids.begin(), mc.eos_token_ids.end());
    // A directory's tokenizer.json, or the one a GGUF file's metadata describes.
    auto grammars = grammar::CompilerForTokenizerJson(assets->tokenizer_json, model_path,
                                                      *assets->tokenizer, mc.vocab_size, eos);
    if (grammars.ok()) {
      sm.grammars = std::move(*grammars);
    } else {
      sm.grammar_error = grammars.status().message();
      LogWarning("structured output unavailable: " + sm.grammar_error);
    }
  }
  http.AttachEngine(engine.get(), sm, {{"config", rc.ToJson()}});
  http.SetPhase(server::Phase::kWarmingUp, "running a warm-up generation");
  const int32_t bos = mc.bos_token_id ? static_cast<int32_t>(*mc.bos_token_id) : 0;
  if (Status s = server::RunTestGeneration(*engine, bos, 2, std::chrono::seconds(300)); !s.ok()) {
    LogError("lucid serve: the warm-up generation failed: " + s.ToString());
    return 1;
  }
  http.SetPhase(server::Phase::kReady);
  LogInfo("ready: serving '" + sm.name + "' at " + http.url() + " (OpenAI API under " + http.url() +
          "/v1)");

  const std::string sig = signals.Wait();
  LogInfo(sig + ": shutting down; " + std::to_string(http.in_flight()) + " requests in flight (" +
          std::to_string(rc.Int("shutdown-grace")) + " s to finish)");
  http.BeginShutdown();
  if (int64_t left = http.WaitIdle(std::chrono::seconds(rc.Int("shutdown-grace"))); left > 0)
    LogWarning(std::to_string(left) + " requests did not finish in time; aborting them");
  engine->Stop();
  http.WaitIdle(std::chrono::seconds(10));
  http.Stop();
  LogInfo("stopped");
  return 0;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over HTTP (OpenAI and SGLang APIs)");
  opts->AddTo(cmd, config::kServe);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    StatusOr<config::ResolvedConfig> rc = settings.ok()
                                              ? config::Resolve(*settings)
                                              : StatusOr<config::ResolvedConfig>(settings.status());
    if (rc.ok() && rc->String("model-path").empty())
      rc = InvalidArgument(
          "--model-path is required (a model directory with config.json and safetensors)");
    if (rc.ok() && !rc->data().not_runnable_here.empty()) {
      std::string m = "this build cannot run the resolved plan:";
      for (const std::string& n : rc->data().not_runnable_here) m += "\n  - " + n;
      rc = FailedPrecondition(m);
    }
    if (!rc.ok()) {
      std::cerr << "lucid serve: " << rc.status().message() << "\n";
      *exit_code = 2;
      return;
    }
    // The resolver accepted the policy, so planning it again cannot fail; re-executes at most once.
    if (StatusOr<config::WaitPolicyPlan> wait = config::PlanWaitPolicy(
            settings->Get("cpu-wait-policy"), config::OmpEnvironmentOf(*settings));
        wait.ok())
      ApplyWaitPolicy(*wait, "serve");
    server::SetLogLevel(rc->String("log-level"));
    if (server::LogEnabled(server::LogLevel::kInfo)) std::cerr << rc->ToText() << std::flush;
    *exit_code = Serve(*rc);
  });
}

}  // namespace lucid::cli
