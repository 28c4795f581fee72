// EngineCore: the single-threaded heart of the engine. Each Step() asks the scheduler for
// {sequence: tokens}, builds ONE StepInput over all of them (page tables, the KV lengths the
// engine owns, which rows need logits), runs Model::Forward, guards the numerics, commits the KV
// it accepts (the sequence lengths advance here, never in the model), samples, and delivers each
// request's event to its sink. The threaded Engine (engine.cpp) wraps it; tests drive
// it directly, step by step, with no threads.
//
// Numerics guard (EngineOptions::nan_check): a request whose logits row is not finite never reaches
// the sampler; it fails with finish_reason "error" and a Status naming the request, the positions
// computed and the step; with kLayers the model's per-op check also names the first layer and op
// that produced a non-finite value. Other requests in the same batch continue (rows are independent
// through the model). kOff still checks the rows that are sampled (a NaN must never be sampled);
// kLogits checks every row (prefill chunks included): its final hidden state, lm_head's input (a
// non-finite one makes its logits non-finite; lm_head itself runs only where logits are used),
// and its logits where they are computed; kLayers adds the model's op check.
// KV of a failed step is never registered in the prefix cache.
// Ownership: owns the model, the KV storage, the block manager, the scheduler and every request.
// Thread-safety: Validate() may be called from any thread (reads immutable state only); everything
// else belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/engine.h"
#include "runtime/kv_block_manager.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/stop_string_filter.h"

namespace lucid {

namespace tok {
class IncrementalDetokenizer;
}

// Most top alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

class EngineCore {
 public:
  // Errors: InvalidArgument for options that cannot work (non-positive sizes, a context longer than
  // the model's, a pool smaller than one page); Unimplemented if nan_check is kLayers and the model
  // has no per-op check.
  static StatusOr<std::unique_ptr<EngineCore>> Create(
      std::unique_ptr<Model> model, std::shared_ptr<const tok::Tokenizer> tokenizer,
      const EngineOptions& options);
  ~EngineCore();

  // The options in force (num_pages and context_length resolved when they were 0).
  const EngineOptions& options() const { return options_; }
  const ModelConfig& model_config() const { return model_->config(); }

  // Checks a request against the model, the pool and the sampling ranges (see Engine::Submit).
  Status Validate(const GenerationRequest& request) const;
  // Adds a validated request under a caller-chosen unique id.
  void Add(uint64_t id, GenerationRequest request, Engine::Sink sink);
  // Frees the request's pages and sends its final "abort" event; false if it is not in flight.
  bool Abort(uint64_t id);
  // Aborts every request in flight (Stop()).
  void AbortAll();
  // Fails every request in flight with `error` (finish_reason "error").
  void FailAll(const Status& error);

  bool HasWork() const { return !scheduler_.empty(); }
  // Runs one scheduler step. Does nothing without work.
  void Step();

  EngineStats Stats() const;
  const KvBlockManager& blocks() const { return blocks_; }
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  struct Request;
  EngineCore(std::unique_ptr<Model> model, std::shared_ptr<const tok::Tokenizer> tokenizer,
             const EngineOptions& options, KvStorage kv);

  // What a step produced for one chunk: `count` logits rows (StepOutput order) for positions
  // [first_position, first_position + count), the chunk's last rows (all of them, its last, or
  // none; see Step), and, when the numerics check is on, every row's final hidden state.
  struct ChunkLogits {
    float* rows = nullptr;  // this step's own buffer: a constraint masks its row in place
    int64_t count = 0;
    int64_t first_position = 0;
    const float* hidden = nullptr;  // [chunk.count, hidden_size] or null
    // Logits kept on the device (StepInput::logits_on_device): rows is null and nonfinite[t] is 1
    // where row t holds a NaN or an infinity (Ops::NonFiniteRows, read back).
    const int32_t* nonfinite = nullptr;
  };
  // Returns an error naming where the chunk's logits (or, in kLayers mode, an op) went non-finite.
  // `site` is the model's report for the chunk (kLayers only).
  Status CheckChunk(const ScheduledChunk& chunk, const ChunkLogits& logits,
                    const std::optional<NonFiniteSite>& site) const;
  // Copies the chunk's prompt rows into r.prompt_logits (GenerationRequest::prompt_logits).
  void KeepPromptLogits(Request& r, const ChunkLogits& logits);
  // Samples from `logits_row` (this step's row of the request, already masked by its constraint).
  void SampleAndEmit(Request& r, float* logits_row);
  // Whether this step needs the request's logits on the host: prompt logits still to collect.
  // Else it is sampled, and its prompt logprobs are taken, where the logits are (a grammar's mask
  // applied there); on a device only such requests' rows are copied to the host.
  static bool NeedsHostLogits(const Request& r);
  // One flag per row of `logits` (device memory): NaN or infinity present (Ops::NonFiniteRows).
  StatusOr<std::vector<int32_t>> NonFiniteLogitRows(Backend& dev, const Tensor& logits);
  // Rows `rows` (ascending) of `logits` (device memory) as a host tensor [rows.size(), vocab] the
  // engine may write (a grammar mask of a request also collecting prompt rows); an empty tensor for
  // no rows. Only those rows are copied.
  static StatusOr<Tensor> HostLogitRows(Backend& dev, const Tensor& logits,
                                        const std::vector<int64_t>& rows);
  // Samples each (request id, logits row) of `picks` where `logits` are, with Ops::SampleRows:
  // the host reads tokens and logprobs, not logits (engine_device_sampling.cpp).
  void SampleOnDevice(Backend& dev, const Tensor& logits,
                      const std::vector<std::pair<uint64_t, int64_t>>& picks);
  // A prompt logprob to take where the logits are: row `row` of the step's logits predicts
  // prompt token `token` of request `id`, with its `top` most likely alternatives.
  struct PromptLogprobJob {
    uint64_t id = 0;
    int64_t row = 0;
    int32_t token = 0;
    int32_t top = 0;
  };
  // Appends each job's logprob to its request's prompt_lps, in job order: Ops::SampleRows with the
  // prompt token forced (RowSampling::forced_token), the host reading logprobs, not logits.
  void PromptLogprobsOnDevice(Backend& dev, const Tensor& logits,
                              const std::vector<PromptLogprobJob>& jobs);
  // The rows j of a chunk's `count` logits rows from `first_position` whose prompt logprob is the
  // next one r collects, with the prompt token each predicts (consecutive targets from
  // prompt_lp_start + prompt_lps.size(); a recomputation after preemption repeats none).
  std::vector<std::pair<int64_t, int32_t>> DuePromptLogprobs(const Request& r,
                                                             const ScheduledChunk& c,
                                                             int64_t first_position,
                                                             int64_t count) const;
  // Delivers `token` (sampled from this step's row of r) and its logprobs.
  void Emit(Request& r, int32_t token, TokenLogprob lp);
  void CollectPromptLogprobs(Request& r, const ScheduledChunk& c, const ChunkLogits& logits);
  void Finish(Request& r, RequestOutput& out, const std::string& reason, Status error = {});
  void Fail(uint64_t id, const Status& error);
  void FailBatch(const StepPlan& plan, const Status& error);

  std::unique_ptr<Model> model_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  EngineOptions options_;
  KvStorage kv_;
  KvBlockManager blocks_;
  Scheduler scheduler_;
  std::vector<int32_t> eos_ids_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::mt19937_64 seed_source_;
  EngineStats stats_;
};

}  // namespace lucid
