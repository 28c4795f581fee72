// Running one model over the ranks of a tensor-parallel group (models/deepseek_v3_shard.h).
//
// Rank 0 runs the engine (scheduler, sampler; the server's HTTP thread and tokenizer): it builds
// each StepInput once and, through TpLeaderModel, broadcasts it before running its own shard of
// the step; every other rank runs RunTpWorker, which receives each step and runs its shard of the
// same Forward over its own KvStorage of the same geometry (the KV is replicated: MLA's latent is
// not split by heads). The collectives inside Forward (models/tensor_parallel.h) then meet. Only
// rank 0 samples: the logits are all-gathered, so its StepOutput is the whole step's.
// Wire format of a step (two broadcasts from rank 0): a header {kind, words}, then `words` int64
// values: the KV geometry (pages, page size, dtype) and the StepInput (tokens, positions, each
// sequence's lengths and page table, logits and hidden rows).
// A heartbeat (TpLeaderModel::Heartbeat: a header {kind ping}, then a barrier) lets an idle group
// notice a dead rank: the server's engine thread sends one every second while it has no work, so
// the leader's barrier fails when a worker is gone and a worker's wait for the next message fails
// when the leader is (each within the communicator's timeout).
// Failure: a collective that fails (a dead or stalled peer, core/communicator.h) fails the step
// on every surviving rank within the communicator's timeout: the leader's Forward returns it (the
// engine fails the step's requests; TpLeaderModel::failure() keeps it for the server, which then
// reports unhealthy and exits) and RunTpWorker returns it (the worker exits non-zero).
// Thread-safety: each is used by one thread (the engine thread on rank 0, main on a worker), but
// for TpLeaderModel::failure(), which any thread may call.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "models/model.h"

namespace lucid {

// A Model that broadcasts every step to the workers, then runs `local` (this rank's shard) on it.
// Borrows `local` and `comm` (both must outlive it). Every other Model call goes to `local`.
class TpLeaderModel final : public Model {
 public:
  TpLeaderModel(Model& local, Communicator& comm) : local_(local), comm_(comm) {}

  const ModelConfig& config() const override { return local_.config(); }
  const KvCacheSpec& kv_spec() const override { return local_.kv_spec(); }
  uint64_t weight_bytes() const override { return local_.weight_bytes(); }
  Allocator& kv_allocator() const override { return local_.kv_allocator(); }
  Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) override;
  bool SetNumericsCheck(bool on) override { return local_.SetNumericsCheck(on); }
  std::vector<std::optional<NonFiniteSite>> LastNonFiniteSites() const override {
    return local_.LastNonFiniteSites();
  }
  Status CheckFeedForwardWeights() override { return local_.CheckFeedForwardWeights(); }

  // One heartbeat: every worker answers it in a barrier. Call while no step runs.
  Status Heartbeat();
  // Tells every worker to return from RunTpWorker (OK). Call once, after the last step.
  Status Stop();

  // The first collective failure (kUnavailable: a rank died or stalled) that a step, a heartbeat
  // or Stop met; OK while the group is whole. Once set, the communicator is broken for good.
  Status failure() const;

 private:
  Status Note(Status s);  // keeps the first kUnavailable, returns s

  Model& local_;
  Communicator& comm_;
  mutable std::mutex mu_;
  Status failure_;
};

// A worker rank's loop: receives steps from rank 0 and runs `local` on each until rank 0 stops
// it (OK). A step's own error (the same on every rank, e.g. a malformed StepInput) is skipped, as
// the leader reports it; a collective's failure (kUnavailable) ends the loop with it.
Status RunTpWorker(Model& local, Communicator& comm);

// What one rank says about itself when the group meets after loading (ExchangeRankReports).
struct RankReport {
  int rank = 0;
  std::string host;  // at most 63 bytes are carried
  int tp = 1, ep = 1;
  bool dp_attention = false;  // attention over its own KV partition (--enable-dp-attention)
  int threads = 0;            // kernel threads (0: not said)
  std::string cpus;           // the CPUs it may run on (AffinityCpuList); at most 63 bytes
  uint64_t weight_bytes = 0;  // of this rank's shard
  int exit_code = 0;          // 0: loaded; else the exit status this rank will return
};

// Every rank's report, in rank order, on every rank (one all-gather of fixed-size records), so the
// leader can log the world and every rank knows whether another failed to load. `mine.rank` is
// taken from the communicator.
StatusOr<std::vector<RankReport>> ExchangeRankReports(Communicator& comm, RankReport mine);
// "rank 1 of 2 on HOST: tp 2, ep 1, 0.45 MiB of weights (its shard), 1 kernel thread on cpus 1"
// (", dp-attention" after the ep with data-parallel attention; the threads only when said).
std::string DescribeRank(const RankReport& r, int world);
// This process's CPU affinity as a list of ranges ("0-3,8"), what `mpirun --bind-to` gave it;
// empty if it cannot be read.
std::string AffinityCpuList();

}  // namespace lucid
