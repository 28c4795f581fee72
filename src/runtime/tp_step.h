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
// Failure: a collective that fails (a dead or stalled peer, core/communicator.h) fails the step
// on every surviving rank within the communicator's timeout: the leader's Forward returns it (the
// engine fails the step's requests) and RunTpWorker returns it (the worker exits non-zero).
// Thread-safety: each is used by one thread (the engine thread on rank 0, main on a worker).
#pragma once

#include <memory>

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

  // Tells every worker to return from RunTpWorker (OK). Call once, after the last step.
  Status Stop();

 private:
  Model& local_;
  Communicator& comm_;
};

// A worker rank's loop: receives steps from rank 0 and runs `local` on each until rank 0 stops
// it (OK). A step's own error (the same on every rank, e.g. a malformed StepInput) is skipped, as
// the leader reports it; a collective's failure (kUnavailable) ends the loop with it.
Status RunTpWorker(Model& local, Communicator& comm);

}  // namespace lucid
