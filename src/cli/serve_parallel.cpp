#include "cli/serve_parallel.h"

#include <signal.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/memory_check.h"
#include "cli/weight_prefetch.h"
#include "config/cpu_kernels.h"
#include "core/parallel.h"
#include "dist/mpi_communicator.h"
#include "formats/align_checkpoint.h"
#include "models/registry.h"
#include "runtime/tp_step.h"
#include "server/server_log.h"

namespace lucid::cli {

using server::LogError;
using server::LogInfo;
using server::LogWarning;

StatusOr<std::unique_ptr<Communicator>> JoinWorld(int64_t tp, const std::string& command) {
  const int world = LaunchedWorldSize();
  if (tp <= 1) {
    if (world > 1 && command == "serve")
      return InvalidArgument("this process is one of " + std::to_string(world) +
                             " ranks but --tp-size is 1: give --tp-size " + std::to_string(world) +
                             " (one server over all ranks), or start lucid serve without mpirun");
    return std::unique_ptr<Communicator>();
  }
  if (world != tp)
    return InvalidArgument("--tp-size " + std::to_string(tp) + " needs " + std::to_string(tp) +
                           " ranks: launch it as `mpirun -np " + std::to_string(tp) + " lucid " +
                           command + " ...` (this process is one of " + std::to_string(world) +
                           ")");
  return MakeMpiCommunicator();
}

StatusOr<ServedModel> LoadServedModel(const config::ResolvedConfig& rc, Backend& backend,
                                      Communicator* tp, bool leader,
                                      const std::atomic<bool>* cancel,
                                      const std::function<void(const std::string&)>& stage) {
  const std::string model_path = rc.String("model-path");
  ServedModel out;
  // A GGUF file (a path to a regular file) is mapped by the model itself; a safetensors directory
  // is opened and prefetched here.
  const bool gguf = std::filesystem::is_regular_file(model_path);
  if (!gguf) {
    LUCID_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::Open(model_path));
    out.ckpt = std::move(opened);
    LUCID_RETURN_IF_ERROR(PrefetchWeights(*out.ckpt, cancel));
    if (const uint64_t off = MisalignedWeightBytes(*out.ckpt); off > 0 && leader)
      LogWarning(MisalignedWeightsMessage(off));
  }
  stage("preparing the model");
  if (leader)
    LogInfo(std::string("kernels: ") + backend.ops().name() +
            (backend.device() == Device::kCpu ? " (--cpu-kernels " + rc.String("cpu-kernels") + ")"
                                              : std::string()));
  ModelLoadOptions load;
  load.tp = tp;
  load.ep_size = static_cast<int>(rc.Int("ep-size"));
  load.dp_attention = rc.Bool("enable-dp-attention");
  const char* check = std::getenv("LUCID_TP_CHECK_REPLICATED");
  load.tp_check_replicated = check != nullptr && std::string(check) == "1";
  StatusOr<std::unique_ptr<Model>> model = Internal("the model was not loaded");
  out.weights_held = HeldGrowth(backend.allocator(), [&] {
    model = gguf ? LoadModel(model_path, backend, load) : LoadModel(*out.ckpt, backend, load);
  });
  LUCID_ASSIGN_OR_RETURN(out.model, std::move(model));
  // The warm-up generation routes to a few experts only: every feed-forward block runs once here.
  stage("checking every expert's weights");
  const auto check_start = std::chrono::steady_clock::now();
  LUCID_RETURN_IF_ERROR(out.model->CheckFeedForwardWeights());
  if (leader)
    LogInfo("weights: every MLP and expert gives finite outputs (" +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - check_start)
                               .count()) +
            " ms)");
  return out;
}

EngineOptions EngineOptionsFrom(const config::ResolvedConfig& rc, int64_t context_length) {
  EngineOptions eo;
  eo.page_size = rc.Int("page-size");
  const int64_t total = rc.Int("max-total-tokens");  // per rank under data-parallel attention
  eo.kv_partitions = rc.Bool("enable-dp-attention") ? static_cast<int>(rc.Int("dp-size")) : 1;
  eo.num_pages = (total + eo.page_size - 1) / eo.page_size * eo.kv_partitions;
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

int MeetAfterLoad(Communicator& comm, const config::ResolvedConfig& rc, const Model* model,
                  int exit_code, std::vector<RankReport>* world) {
  RankReport mine;
  mine.host = comm.host();
  mine.tp = comm.size();
  mine.ep = static_cast<int>(rc.Int("ep-size"));
  mine.dp_attention = rc.Bool("enable-dp-attention");
  mine.threads = NumThreads();
  mine.cpus = AffinityCpuList();
  mine.weight_bytes = model != nullptr ? model->weight_bytes() : 0;
  mine.exit_code = model != nullptr ? 0 : (exit_code != 0 ? exit_code : 1);
  StatusOr<std::vector<RankReport>> all = ExchangeRankReports(comm, mine);
  if (!all.ok()) {
    LogError("lucid serve: rank " + std::to_string(comm.rank()) +
             ": the ranks did not meet after loading: " + all.status().ToString());
    return 1;
  }
  if (world != nullptr) *world = *all;
  int code = 0;
  for (const RankReport& r : *all) {
    if (comm.rank() == 0 && r.exit_code == 0) LogInfo("world: " + DescribeRank(r, comm.size()));
    if (r.exit_code == 0) continue;
    if (code == 0) code = r.exit_code;
    if (comm.rank() == 0 && r.rank != 0)
      LogError("lucid serve: rank " + std::to_string(r.rank) +
               " could not load the model (its error is in the log above); exiting with status " +
               std::to_string(r.exit_code));
  }
  return code;
}

int ServeWorker(const config::ResolvedConfig& rc, Communicator& comm) {
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  if (server::LogEnabled(server::LogLevel::kInfo)) server::SetLogLevel("warning");
  const std::string me = "lucid serve (rank " + std::to_string(comm.rank()) + "): ";
  const std::chrono::milliseconds step_timeout = comm.timeout();
  comm.SetTimeout(std::max(step_timeout, kStartupMeetingTimeout));
  const std::unique_ptr<Backend> backend = config::MakeCpuBackend(rc.cpu_kernel_set());
  StatusOr<ServedModel> loaded =
      LoadServedModel(rc, *backend, &comm, /*leader=*/false, nullptr, [](const std::string&) {});
  if (!loaded.ok()) LogError(me + loaded.status().ToString());
  if (const int code = MeetAfterLoad(comm, rc, loaded.ok() ? loaded->model.get() : nullptr,
                                     loaded.ok() ? 0 : ExitCodeFor(loaded.status()));
      code != 0)
    return code;
  comm.SetTimeout(step_timeout);
  if (const Status s = RunTpWorker(*loaded->model, comm); !s.ok()) {
    LogError(me + "the tensor-parallel group failed: " + s.ToString() + "; exiting with status 1");
    return 1;
  }
  return 0;
}

}  // namespace lucid::cli
