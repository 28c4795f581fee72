// `lucid serve`: resolves the configuration (config/ option table: flags, --config file, LUCID_*
// environment), starts listening at once (GET /health answers 503 "loading"), reads the weights
// with visible progress, builds the engine, runs the largest step on a device (its activations
// take their memory then; cli/memory_check.h) and a warm-up generation, and then serves until
// SIGINT/SIGTERM. Exit status: 0 after a clean shutdown; 2 for every refusal of the user's input,
// before or while loading (a configuration that cannot work, a model directory whose config,
// tokenizer or weights are malformed or unsupported: cli::ExitCodeFor); 1 for internal failures
// (port in use, the largest step or the warm-up failed, I/O errors).
// Shutdown: new generation requests get 503, in-flight ones have --shutdown-grace seconds to
// finish, then the engine fails the rest (each stream gets its final chunk and [DONE]); a second
// signal exits at once.
// Several ranks (`mpirun -np N lucid serve --tp-size N`, cli/serve_parallel.h): rank 0 does all
// of the above over a TpLeaderModel and, after the shutdown, stops the workers; the others run
// ServeWorker. When the group fails (a rank died or stalled: TpLeaderModel::failure()), the
// requests in flight have failed with the collective's error, /health answers 503 "failed" for
// kFailedLinger, and rank 0 exits 1.
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
#include "cli/local_gpus.h"
#include "cli/memory_check.h"
#include "cli/plan_backend.h"
#include "cli/process_env.h"
#include "cli/serve_parallel.h"
#include "config/cli_options.h"
#include "config/option_table.h"
#include "config/resolver.h"
#include "config/wait_policy.h"
#include "core/parallel.h"
#include "formats/align_checkpoint.h"
#include "models/registry.h"
#include "runtime/engine.h"
#include "runtime/tp_step.h"
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
  // Waits up to `d` for a signal: true (and its name in *name) once one arrived.
  bool WaitFor(std::chrono::milliseconds d, std::string* name) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, d, [&] { return requested_.load(); })) return false;
    *name = name_;
    return true;
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

server::ServerOptions ServerOptionsFrom(const config::ResolvedConfig& rc) {
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
  return so;
}

// What the routes know about the model, with structured output's grammar compiler.
server::ServingModel ServingModelFrom(const config::ResolvedConfig& rc,
                                      const server::ModelAssets& assets, const ModelConfig& mc) {
  server::ServingModel sm;
  sm.name = rc.String("served-model-name");
  sm.context_length = rc.Int("context-length");
  sm.vocab_size = mc.vocab_size;
  sm.tokenizer = assets.tokenizer;
  sm.chat_template = assets.chat_template;
  sm.chat_error = assets.chat_error;
  sm.bos_token = assets.bos_token;
  sm.eos_token = assets.eos_token;
  sm.model_path = rc.String("model-path");
  sm.tool_call_format = server::ToolCallFormatFromName(rc.String("tool-call-parser"));
  sm.reasoning_parser = rc.String("reasoning-parser") != "none";
  if (assets.tokenizer) {
    std::vector<int32_t> eos(mc.eos_token_ids.begin(), mc.eos_token_ids.end());
    // A directory's tokenizer.json, or the one a GGUF file's metadata describes.
    auto grammars = grammar::CompilerForTokenizerJson(assets.tokenizer_json, sm.model_path,
                                                      *assets.tokenizer, mc.vocab_size, eos);
    if (grammars.ok()) {
      sm.grammars = std::move(*grammars);
    } else {
      sm.grammar_error = grammars.status().message();
      LogWarning("structured output unavailable: " + sm.grammar_error);
    }
  }
  return sm;
}

// After the tensor-parallel group lost a rank: /health answers 503 ("failed", with the reason)
// for kFailedLinger, so that health checks see it, then the server stops; returns 1.
constexpr std::chrono::seconds kFailedLinger{2};

int FailServing(server::HttpServer& http, Engine& engine, const Status& failure) {
  LogError("lucid serve: the tensor-parallel group failed: " + failure.ToString() +
           "; requests fail, /health answers 503, exiting with status 1 in " +
           std::to_string(kFailedLinger.count()) + " s");
  http.SetPhase(server::Phase::kFailed,
                "a rank of the tensor-parallel group failed: " + failure.message());
  std::this_thread::sleep_for(kFailedLinger);
  engine.Stop();
  http.WaitIdle(std::chrono::seconds(5));
  http.Stop();
  LogInfo("stopped after the failure");
  return 1;
}

// Serves until a signal (then shuts down: returns 0) or, under tensor parallelism, until the
// group fails (returns 1). `leader` is null for one process.
int ServeUntilStopped(const config::ResolvedConfig& rc, SignalWatcher& signals,
                      server::HttpServer& http, Engine& engine, TpLeaderModel* leader) {
  std::string sig;
  while (!signals.WaitFor(std::chrono::milliseconds(100), &sig))
    if (leader != nullptr && !leader->failure().ok())
      return FailServing(http, engine, leader->failure());
  LogInfo(sig + ": shutting down; " + std::to_string(http.in_flight()) + " requests in flight (" +
          std::to_string(rc.Int("shutdown-grace")) + " s to finish)");
  http.BeginShutdown();
  if (int64_t left = http.WaitIdle(std::chrono::seconds(rc.Int("shutdown-grace"))); left > 0)
    LogWarning(std::to_string(left) + " requests did not finish in time; aborting them");
  engine.Stop();
  http.WaitIdle(std::chrono::seconds(10));
  http.Stop();
  if (leader != nullptr) {
    // The engine thread has stopped: the communicator is main's now.
    if (const Status s = leader->Stop(); !s.ok()) {
      LogError("lucid serve: stopping the worker ranks failed: " + s.ToString());
      return 1;
    }
    LogInfo("the worker ranks stopped");
  }
  LogInfo("stopped");
  return 0;
}

// Start-up after the configuration resolved, on rank 0 (or the only process); returns the exit
// status. `comm` is the tensor-parallel group (null for one process).
int ServeLeader(const config::ResolvedConfig& rc, Communicator* comm, SignalWatcher& signals) {
  if (server::LogEnabled(server::LogLevel::kInfo)) std::cerr << rc.ToText() << std::flush;
  const std::string model_path = rc.String("model-path");
  const std::chrono::milliseconds step_timeout = comm ? comm->timeout() : kDefaultCollectiveTimeout;
  if (comm) comm->SetTimeout(std::max(step_timeout, kStartupMeetingTimeout));
  // The plan's device (cli/plan_backend.h): the --cpu-kernels set on the host, or the plan's CUDA
  // set on GPU 0. Declared before the engine, so it outlives the model and the engine thread.
  StatusOr<PlanBackend> backend = MakePlanBackend(rc);
  if (!backend.ok()) {
    LogError("lucid serve: " + backend.status().message());
    if (comm) MeetAfterLoad(*comm, rc, nullptr, ExitCodeFor(backend.status()));
    return ExitCodeFor(backend.status());
  }
  if (!backend->description.empty()) LogInfo("backend: " + backend->description);
  for (const std::string& n : backend->notes) LogInfo("kernels: " + n);
  for (const std::string& w : backend->warnings) LogWarning("kernels: " + w);
  std::unique_ptr<Model> tp_shard;  // under tensor parallelism: what the engine's leader borrows
  std::unique_ptr<Engine> engine;   // declared before the server: destroyed after it
  server::HttpServer http(ServerOptionsFrom(rc));
  // A group must meet even when this rank fails before loading, so that the workers end too.
  auto fail = [&](int code) {
    if (comm) MeetAfterLoad(*comm, rc, nullptr, code);
    return code;
  };
  if (Status s = http.Start(); !s.ok()) {
    LogError("lucid serve: " + s.message());
    return fail(1);
  }
  LogInfo("listening on " + http.url() + " (GET /health answers 503 until the model is ready)");
  http.SetPhase(server::Phase::kLoading, "reading " + model_path);

  StatusOr<server::ModelAssets> assets = server::LoadModelAssets(model_path);
  if (!assets.ok()) {
    LogError("lucid serve: " + assets.status().message());
    return fail(ExitCodeFor(assets.status()));
  }
  if (!assets->tokenizer)
    LogWarning("no tokenizer.json in " + model_path + ": requests must send token ids");
  if (!assets->chat_error.empty())
    LogWarning("chat completions unavailable: " + assets->chat_error);

  StatusOr<ServedModel> loaded = LoadServedModel(
      rc, *backend->backend, comm, /*leader=*/true, signals.requested(),
      [&](const std::string& stage) { http.SetPhase(server::Phase::kLoading, stage); });
  if (!loaded.ok()) LogError("lucid serve: " + loaded.status().ToString());
  nlohmann::json server_info = {{"config", rc.ToJson()}};
  if (comm) {
    std::vector<RankReport> world;
    if (const int code = MeetAfterLoad(*comm, rc, loaded.ok() ? loaded->model.get() : nullptr,
                                       loaded.ok() ? 0 : ExitCodeFor(loaded.status()), &world);
        code != 0)
      return code;
    comm->SetTimeout(step_timeout);
    for (const RankReport& r : world)  // /server_info says the world too
      server_info["world"].push_back({{"rank", r.rank},
                                      {"host", r.host},
                                      {"tp", r.tp},
                                      {"ep", r.ep},
                                      {"dp_attention", r.dp_attention},
                                      {"threads", r.threads},
                                      {"cpus", r.cpus},
                                      {"weight_bytes", r.weight_bytes}});
  } else if (!loaded.ok()) {
    return ExitCodeFor(loaded.status());
  }
  const ModelConfig mc = loaded->model->config();
  const int64_t context = rc.Int("context-length");
  EngineOptions eo = EngineOptionsFrom(rc, context);
  LogInfo("engine: page size " + std::to_string(eo.page_size) + ", " +
          std::to_string(eo.num_pages) + " KV pages" +
          (eo.kv_partitions > 1
               ? " (data-parallel attention: " + std::to_string(eo.num_pages / eo.kv_partitions) +
                     " on each of " + std::to_string(eo.kv_partitions) +
                     " ranks, each holding its own requests' KV)"
               : std::string()) +
          ", up to " + std::to_string(eo.max_running_requests) + " running requests, context " +
          std::to_string(context) + ", kernel threads " + std::to_string(NumThreads()) +
          (eo.cpu_busy_threads > 0
               ? " (" + std::to_string(eo.cpu_busy_threads) + " while the CPU is contended)"
               : ""));
  if (assets->tokenizer && int64_t(assets->tokenizer->vocab_size()) > mc.vocab_size)
    LogWarning("the tokenizer has " + std::to_string(assets->tokenizer->vocab_size()) +
               " ids but the model only " + std::to_string(mc.vocab_size) +
               ": text whose tokens fall outside the model's vocabulary is refused (400)");
  // Under tensor parallelism the engine runs a TpLeaderModel over this rank's shard, and its
  // thread sends the group a heartbeat every second while idle (runtime/tp_step.h).
  TpLeaderModel* leader = nullptr;
  std::unique_ptr<Model> engine_model = std::move(loaded->model);
  if (comm) {
    tp_shard = std::move(engine_model);
    auto l = std::make_unique<TpLeaderModel>(*tp_shard, *comm);
    leader = l.get();
    engine_model = std::move(l);
    eo.idle_tick = [leader] { (void)leader->Heartbeat(); };  // a failure is kept in failure()
  }
  StatusOr<std::unique_ptr<Engine>> made = Internal("the engine was not made");
  MemoryCheck memory{.device = DeviceName(backend->backend->device()),
                     .weights_planned = rc.memory().weights,
                     .kv_pool_planned = rc.memory().kv_pool_bytes,
                     .weights_held = loaded->weights_held};
  memory.kv_pool_held = HeldGrowth(backend->backend->allocator(), [&] {
    made = CreateEngine(std::move(engine_model), assets->tokenizer, eo);
  });
  if (!made.ok()) {
    LogError("lucid serve: " + made.status().ToString());
    // The workers wait for rank 0's first message: stop them (the engine never ran a step).
    if (leader) (void)TpLeaderModel(*tp_shard, *comm).Stop();
    return ExitCodeFor(made.status());
  }
  engine = std::move(*made);
  http.SetPhase(server::Phase::kWarmingUp, "running the largest step and a warm-up generation");
  const int32_t bos = mc.bos_token_id ? static_cast<int32_t>(*mc.bos_token_id) : 0;
  auto stop = [&] {
    engine->Stop();
    if (leader && leader->failure().ok()) (void)leader->Stop();
  };
  // On a device, the largest step first: its activations take their memory now.
  memory.activations_planned = rc.memory().activations;
  memory.largest_step_tokens = LargestStepTokens(eo);
  memory.runtime_overhead_planned = rc.memory().runtime_overhead;
  StatusOr<std::optional<StepMemory>> grew =
      ProfileLargestStep(*engine, backend->backend->allocator(), backend->backend->ops(), eo, bos);
  if (!grew.ok()) {
    LogError("lucid serve: the largest step (" + std::to_string(memory.largest_step_tokens) +
             " tokens) failed at start-up: " + grew.status().ToString() +
             (grew.status().code() == StatusCode::kResourceExhausted
                  ? " (lower --chunked-prefill-size or --mem-fraction-static)"
                  : ""));
    stop();
    return 1;
  }
  if (grew->has_value()) {
    memory.activations_held = (*grew)->activations;
    memory.ops_scratch_held = (*grew)->ops_scratch;
  }
  // The plan `explain` printed against what the backend holds (cli/memory_check.h).
  if (!memory.agrees())
    LogWarning(memory.Describe() + ": the memory plan and the backend disagree");
  else if (!memory.activations_within_plan())
    LogWarning(memory.Describe() + ": the activations took more than the plan allowed for");
  else if (!memory.ops_scratch_within_plan())
    LogWarning(memory.Describe() + ": the ops' scratch took more than the runtime overhead " +
               "allowed for");
  else
    LogInfo(memory.Describe());
  server_info["memory"] = memory.ToJson();
  server::ServingModel sm = ServingModelFrom(rc, *assets, mc);
  http.AttachEngine(engine.get(), sm, server_info);
  if (Status s = server::RunTestGeneration(*engine, {bos}, 2, std::chrono::seconds(300)); !s.ok()) {
    LogError("lucid serve: the warm-up generation failed: " + s.ToString());
    stop();
    return 1;
  }
  http.SetPhase(server::Phase::kReady);
  LogInfo("ready: serving '" + sm.name + "' at " + http.url() + " (OpenAI API under " + http.url() +
          "/v1)");
  return ServeUntilStopped(rc, signals, http, *engine, leader);
}

// Joins the world (null communicator for --tp-size 1) and runs rank 0's part or a worker's.
int Serve(const config::ResolvedConfig& rc) {
  // Before MPI starts its threads, so that they too have the signals blocked.
  SignalWatcher signals;
  StatusOr<std::unique_ptr<Communicator>> comm = JoinWorld(rc.Int("tp-size"), "serve");
  if (!comm.ok()) {
    std::fprintf(stderr, "lucid serve: %s\n", comm.status().message().c_str());
    return ExitCodeFor(comm.status());
  }
  if (*comm && (*comm)->rank() != 0) return ServeWorker(rc, **comm);
  return ServeLeader(rc, comm->get(), signals);
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over HTTP (OpenAI and SGLang APIs)");
  opts->AddTo(cmd, config::kServe);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    StatusOr<config::ResolvedConfig> rc = settings.ok()
                                              ? ResolveOnThisMachine(*settings)
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
    *exit_code = Serve(*rc);
  });
}

}  // namespace lucid::cli
