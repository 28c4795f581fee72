// Engine: continuous batching over the paged KV cache. The contract between the HTTP server
// (server/, which only parses, enqueues and streams) and everything that touches the model.
//
// Threading: one engine thread owns the Model, the KvStorage, the block manager and the scheduler.
// Submit/Abort/Stats are thread-safe and never block on model work. Each request's events are
// delivered, in order, by calling its sink on the engine thread; a sink must return quickly (push
// to a queue and notify) and must not call back into the engine.
// Lifetime: Stop() finishes or fails in-flight requests (each gets a final event) and joins the
// thread; the destructor calls Stop().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/model.h"
#include "runtime/cpu_contention.h"
#include "runtime/token_constraint.h"

namespace lucid {

namespace tok {
class Tokenizer;
}

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0 = off
  float min_p = 0.0f;
  std::optional<uint64_t> seed;  // same seed + same prompt + same params = same output
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids (unless ignore_eos)
  std::vector<std::string> stop;        // matched on detokenized text, not emitted
  bool ignore_eos = false;
  int32_t logprobs = -1;  // -1: none; k >= 0: the chosen token's logprob plus top-k alternatives
  bool skip_special_tokens = true;
  // Added by the agent API (issue 24), as vLLM's fields of the same names:
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits before sampling
  int64_t min_tokens = 0;  // EOS and stop_token_ids cannot be sampled before this many tokens
  bool include_stop_str_in_output = false;  // a matched stop string ends the text, not cut
  // Structured output: a grammar the output must follow (null: none). Each step the tokens it
  // forbids are masked to -inf before the penalties and the sampler (so logprobs are those of the
  // masked distribution, as vLLM's); the request finishes with "stop" once the grammar accepts a
  // stop token. It reaches "length" if max_tokens runs out first.
  std::shared_ptr<const TokenConstraint> constraint;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids (text requests are tokenized by the server)
  SamplingParams sampling;
  // Prompt logprobs (issue 24; vLLM's prompt_logprobs, SGLang's return_logprob with
  // logprob_start_len): k >= 0 returns, with the first event, the raw logprob of every prompt
  // token from position prompt_logprobs_start (>= 1: token 0 has no context) with its k most
  // likely alternatives; -1: none. The prefix cache reuses at most the tokens before
  // prompt_logprobs_start - 1, so that the rows needed are computed.
  int32_t prompt_logprobs = -1;
  int64_t prompt_logprobs_start = 1;
  // Every prompt row's logits (prompt logprobs, echo, `lucid generate --dump-logits`): the model
  // computes lm_head for every row of this request's chunks, the prefix cache is not used for its
  // prompt (a cached row has no logits), and the first event carries them in
  // RequestOutput::prompt_logits. Off, lm_head runs only for the row that is sampled.
  bool prompt_logits = false;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // top alternatives, best first
};

// One event for one request. Events arrive in order; exactly one has finished == true.
struct RequestOutput {
  std::vector<int32_t> new_tokens;  // tokens generated since the previous event
  std::string text;                 // their detokenized text (empty without a tokenizer)
  std::vector<TokenLogprob> logprobs;
  // The prompt logprobs asked for (GenerationRequest::prompt_logprobs), in the first event only:
  // prompt positions prompt_logprobs_start, start + 1, ... in order.
  std::vector<TokenLogprob> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;  // "stop", "length", "abort", "error" (when finished)
  Status error;               // set when finish_reason == "error": says what failed and where
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
  int64_t cached_tokens = 0;      // prompt tokens served from the prefix cache
  // With GenerationRequest::prompt_logits, in the first event only: [prompt_len, vocab] f32, row p
  // the logits after prompt token p (row prompt_len - 1 is what the first token was sampled from).
  Tensor prompt_logits;
};

struct EngineOptions {
  int64_t page_size = 64;
  // KV pool size (from the memory planner). 0 = a small fallback for tools and tests: pages for
  // min(max_running_requests, 4) sequences of min(context_length, 8192) tokens.
  int64_t num_pages = 0;
  // Data-parallel attention (docs/PARALLEL.md): the pool is split into this many partitions of
  // num_pages / kv_partitions pages, one per attention rank (KvBlockManager); this process's
  // KvStorage holds one partition's pages (rank 0's; each other rank holds its own), and the
  // model maps a sequence's page ids to its rank. num_pages must divide by it. 1: one pool.
  int kv_partitions = 1;
  int64_t max_running_requests = 64;
  int64_t chunked_prefill_size = 2048;  // max tokens computed per step
  int64_t context_length = 0;           // 0 = the model's max_position_embeddings
  // kOff: only the rows about to be sampled are checked (a non-finite value is never sampled);
  // kLogits: every computed row (its final hidden state, and its logits where computed); kLayers:
  // also the model's per-op check, which names the
  // first layer and op that produced a non-finite value (slower).
  enum class NanCheck { kOff, kLogits, kLayers } nan_check = NanCheck::kLogits;
  bool enable_prefix_cache = true;
  // Added by the runtime (issue 6): the KV pool's storage dtype (--kv-cache-dtype).
  KvDtype kv_dtype = KvDtype::kF32;
  // The CPU-contention rule of the threaded engine (runtime/cpu_contention.h): the team of the
  // kernels' parallel regions while other processes want the CPUs. 0: the rule is off (the
  // default for tools and tests); `lucid serve` sets NumThreads() - 1 (option cpu-contention).
  // The outputs do not depend on it. Where the rule reads its counters: null is ReadCpu.
  int cpu_busy_threads = 0;
  CpuReader cpu_reader;
  // Called on the threaded engine's thread each time it has had nothing to do for
  // idle_tick_every (and again every idle_tick_every while that lasts): the heartbeat of a
  // tensor-parallel group (runtime/tp_step.h). Null: the thread sleeps until work arrives.
  std::function<void()> idle_tick;
  std::chrono::milliseconds idle_tick_every{1000};
};

struct EngineStats {
  int64_t running = 0, queued = 0;
  int64_t pages_total = 0, pages_used = 0, pages_cached = 0;
  int64_t prefix_hit_tokens = 0;                                      // cumulative
  int64_t prompt_tokens = 0, generated_tokens = 0;                    // cumulative
  int64_t requests_ok = 0, requests_error = 0, requests_aborted = 0;  // cumulative
  // Added by the runtime (issue 6), cumulative: requests preempted for lack of pages (each is
  // recomputed later), and cached prefix pages evicted to make room.
  int64_t preemptions = 0, prefix_cache_evictions = 0;
  // Cumulative, a part of requests_error: those failed by the numerics guard (non-finite values;
  // their error message starts with "numerics:"). The server's health reads it (issue 26).
  int64_t requests_numeric_error = 0;
  // The threaded engine's kernel team (the CPU-contention rule): threads its parallel regions run
  // on now, and how many times the rule has lowered it (cumulative). 0 and 0 for an EngineCore.
  int64_t cpu_team_threads = 0, cpu_team_lowerings = 0;
};

class Engine {
 public:
  using Sink = std::function<void(const RequestOutput&)>;
  virtual ~Engine() = default;

  // Validates (prompt non-empty, ids in range, prompt + max_tokens within the context and the KV
  // pool, sampling values in range: temperature >= 0, top_p in (0, 1], top_k >= -1 (-1 and 0 are
  // off), min_p in [0, 1], repetition_penalty > 0, frequency/presence in [-2, 2], max_tokens >= 1,
  // logprobs in [-1, 20], stop strings non-empty and only with a tokenizer, logit_bias ids in the
  // vocabulary with finite values, min_tokens in [0, max_tokens]) and enqueues. Errors
  // (InvalidArgument; Unavailable after Stop) are returned here, synchronously, and no event
  // follows. Semantics of each sampling field: runtime/sampler.h. Token events: new_tokens
  // includes a stop token id (EOS or stop_token_ids) but text never includes its text, nor a stop
  // string or anything after it. logprobs are of the raw model distribution (before penalties and
  // temperature), as vLLM's default.
  virtual StatusOr<uint64_t> Submit(GenerationRequest request, Sink sink) = 0;
  // Frees the request's pages; its sink gets a final event with finish_reason "abort".
  virtual void Abort(uint64_t id) = 0;
  virtual EngineStats Stats() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  virtual void Stop() = 0;
};

// The engine over a loaded model; `tokenizer` (may be null) is used for stop strings and text.
// Starts the engine thread. Errors: InvalidArgument for options that cannot work (see
// EngineCore::Create; a negative cpu_busy_threads), Unimplemented for kLayers on a model without
// the per-op check. (Added by the runtime, issue 6; MakeEngine aborts on those errors instead.)
StatusOr<std::unique_ptr<Engine>> CreateEngine(std::unique_ptr<Model> model,
                                               std::shared_ptr<const tok::Tokenizer> tokenizer,
                                               const EngineOptions& options);
std::unique_ptr<Engine> MakeEngine(std::unique_ptr<Model> model,
                                   std::shared_ptr<const tok::Tokenizer> tokenizer,
                                   const EngineOptions& options);

}  // namespace lucid
