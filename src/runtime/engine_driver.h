// Drivers that run requests to completion without `lucid serve`: for tests, benchmarks and tools.
//
// ResultCollector is a Sink target that accumulates one request's events into a GenerationResult
// and lets another thread wait for the final one. RunToCompletion steps an EngineCore on the
// calling thread (deterministic: every request is added before the first step, so they batch
// together); GenerateAll submits to a threaded Engine and waits. GreedyGenerate is one greedy
// request through a fresh EngineCore over a borrowed model: what `lucid generate`, the
// benchmarks' warm-up and the model tests run (there is no other generation loop).
// Thread-safety: ResultCollector may be fed from the engine thread while another thread waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/engine_core.h"

namespace lucid {

struct GenerationResult {
  std::vector<int32_t> tokens;  // every generated token, in order
  std::string text;             // concatenated event texts
  std::vector<TokenLogprob> logprobs;
  std::vector<TokenLogprob> prompt_logprobs;  // GenerationRequest::prompt_logprobs
  Tensor prompt_logits;  // GenerationRequest::prompt_logits: [prompt_len, vocab]
  std::string finish_reason;
  Status error;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t events = 0;
  bool finished = false;
  bool order_ok = true;  // false if an event arrived after the final one
};

class ResultCollector {
 public:
  Engine::Sink sink();
  // Blocks until the final event arrived.
  GenerationResult Wait();
  bool finished() const;

 private:
  void Add(const RequestOutput& out);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  GenerationResult result_;
};

// Adds every request to `core` (ids 1..n), then steps until no work is left or max_steps ran.
// Returns the results in request order. InvalidArgument if a request fails validation (nothing is
// run then); DeadlineExceeded-like Internal if max_steps ran out.
// If max_running is not null it receives the most requests that ran in one step.
StatusOr<std::vector<GenerationResult>> RunToCompletion(EngineCore& core,
                                                        std::vector<GenerationRequest> requests,
                                                        int64_t max_steps = 1000000,
                                                        int64_t* max_running = nullptr);

// Submits every request to `engine` and waits for all of them.
StatusOr<std::vector<GenerationResult>> GenerateAll(Engine& engine,
                                                    std::vector<GenerationRequest> requests);

// A Model that forwards every call to `model`, which it does not own (EngineCore owns its model;
// a driver over a model its caller keeps hands it this). `model` must outlive it.
std::unique_ptr<Model> BorrowModel(Model& model);

// The max_new_tokens (>= 0) greedy tokens of `prompt` (argmax, lowest id on ties; EOS does not
// stop it), through an EngineCore over `model` (borrowed) with a KV pool of `page_size`-token
// pages in `kv_dtype`, the whole prompt prefilled in one step. If prompt_logits is not null it
// receives the prompt's logits [prompt_len, vocab]. Errors: InvalidArgument for a prompt the
// engine refuses (empty, ids out of range, past the context), the request's error if it failed.
StatusOr<std::vector<int32_t>> GreedyGenerate(Model& model, const std::vector<int32_t>& prompt,
                                              int64_t max_new_tokens, Tensor* prompt_logits,
                                              int64_t page_size = 64,
                                              KvDtype kv_dtype = KvDtype::kF32);

// Index of the largest value (first on ties).
int32_t ArgMax(const float* v, int64_t n);

}  // namespace lucid
