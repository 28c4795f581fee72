// The parts of `lucid serve` that several ranks share (docs/PARALLEL.md):
// joining the MPI world (`lucid generate` joins it the same way), loading this rank's model (its
// shard under tensor parallelism), the meeting after loading, and a worker rank's whole life.
//
// Start-up of a group of N ranks (`mpirun -np N lucid serve --tp-size N ...`): every rank joins
// the world and raises its communicator's timeout to kStartupMeetingTimeout, loads and checks its
// shard, then all meet (MeetAfterLoad: one all-gather of each rank's report; rank 0 logs the
// world, one line per rank) and set the timeout back. A rank that could not load still meets, so
// every rank ends with the same exit status. After the meeting a worker runs rank 0's steps
// (RunTpWorker) until rank 0 stops it; rank 0 runs the HTTP server and the engine.
// Thread-safety: call from main.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "config/resolver.h"
#include "core/communicator.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/tp_step.h"

namespace lucid::cli {

// How long the ranks may reach the meeting after loading apart from each other.
inline constexpr std::chrono::milliseconds kStartupMeetingTimeout{std::chrono::minutes(10)};

// The group this process is one of, for `command` ("serve", "generate"): null for --tp-size 1
// (refused, exit 2, when the launcher started several ranks); the MPI world otherwise, which must
// have exactly tp ranks (InvalidArgument naming the mpirun command to run).
StatusOr<std::unique_ptr<Communicator>> JoinWorld(int64_t tp, const std::string& command);

struct ServedModel {
  std::optional<Checkpoint> ckpt;  // a safetensors directory (a GGUF file is the model's own)
  std::unique_ptr<Model> model;
  // The backend memory the load took (cli/memory_check.h); nullopt where the allocator does not
  // count (the CPU).
  std::optional<int64_t> weights_held;
};

// Opens the checkpoint, prefetches its weights, loads the model (this rank's shard when `tp` is a
// group: --ep-size from rc) and runs every feed-forward block once (Model::
// CheckFeedForwardWeights). `stage` is told what starts (the server's /health detail); `leader`:
// this rank logs (kernels, misaligned weights, the check's time).
StatusOr<ServedModel> LoadServedModel(const config::ResolvedConfig& rc, Backend& backend,
                                      Communicator* tp, bool leader,
                                      const std::atomic<bool>* cancel,
                                      const std::function<void(const std::string&)>& stage);

// The engine's options from the plan: page size, KV pages (max-total-tokens in whole pages, per
// attention rank under data-parallel attention), batch limits, numerics check, KV dtype.
EngineOptions EngineOptionsFrom(const config::ResolvedConfig& rc, int64_t context_length);

// The meeting after loading (every rank, whether its load succeeded or not): `model` is this
// rank's (null when it failed, with its exit status in `exit_code`). Returns 0 when every rank
// loaded, else the exit status the group ends with (the first failed rank's; 1 when the meeting
// itself failed). Rank 0 logs "world: rank r of N on HOST: tp, ep, MiB of weights" for each rank
// and, for a worker that failed, that its error is in its own log. `world` (may be null) receives
// every rank's report.
int MeetAfterLoad(Communicator& comm, const config::ResolvedConfig& rc, const Model* model,
                  int exit_code, std::vector<RankReport>* world = nullptr);

// A worker rank (rank > 0): loads its shard, meets, then runs rank 0's steps until rank 0 stops
// it. Writes nothing on stdout; logs warnings and errors only. SIGINT and SIGTERM are ignored
// (rank 0 decides when the group stops; a rank 0 that vanished is noticed within the
// communicator's timeout). Returns the exit status: 0 once stopped by rank 0, 1 when the group
// failed (a dead or stalled rank), the group's status when a rank could not load.
int ServeWorker(const config::ResolvedConfig& rc, Communicator& comm);

}  // namespace lucid::cli
