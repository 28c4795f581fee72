// Sampler: picks one request's next token from its logits row. Semantics follow vLLM / OpenAI:
//   0. logit_bias: bias[id] is added to the raw logit (OpenAI / vLLM); for the first min_tokens
//      output tokens the ids given to SuppressUntil (EOS, stop_token_ids) are -inf (vLLM's
//      min_tokens).
//   1. Penalties, on a copy of the raw logits:
//      repetition_penalty r (HF / vLLM): for every token id seen in the prompt or the output,
//        a positive logit is divided by r, a negative one multiplied by r;
//      frequency_penalty f and presence_penalty p (OpenAI): for every token id generated so far,
//        logit -= f * count + p.
//   2. temperature == 0: greedy, the argmax of the penalized logits (lowest id on ties); the
//      filters below do not apply.
//   3. Otherwise logits / temperature -> softmax, then the filters in vLLM's order: min_p (drop
//      tokens whose probability is below min_p * the largest), top_k (keep the k most likely, ties
//      to the lower id), top_p (keep the smallest most-likely-first set whose mass reaches top_p;
//      always at least one token); the kept mass is renormalized and sampled by inverse CDF over
//      the kept tokens in id order.
//   Randomness is counter based: the uniform draw for output token n is a hash of (seed, n), so a
//   request's output depends only on its seed, prompt and parameters, never on what else is in the
//   batch or on a preemption and recompute.
// Logprobs are those of the RAW model distribution: log_softmax of the logits before penalties,
// temperature and filters (vLLM's default "raw_logprobs"). top alternatives are the k most likely
// raw tokens, best first (ties to the lower id).
// The arithmetic is ops/sampling.h's: Plan gives a row's parameters and edits, which a device's
// Ops::SampleRows applies where the logits are; Sample runs the same functions on the host.
// Every logit must be finite: the engine's numerics guard checks the row before it gets here.
// Thread-safety: a RequestSampler belongs to one request; distinct ones are independent.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "ops/sampling.h"
#include "runtime/engine.h"

namespace lucid {

class RequestSampler {
 public:
  // `prompt` feeds the repetition penalty; vocab is the logits row length.
  RequestSampler(const SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt,
                 int64_t vocab);

  // Picks the next token from `logits` [vocab]. `step` is the index of the output token being
  // sampled (0 for the first). Records the token for the penalties. If logprobs is not null and
  // params.logprobs >= 0, fills it for the chosen token.
  int32_t Sample(std::span<const float> logits, int64_t step, TokenLogprob* logprobs);

  // The biased and penalized logits (steps 0-1 above) for `logits`, given the tokens recorded so
  // far; `step` as in Sample (the min_tokens suppression applies while step < min_tokens).
  std::vector<float> Penalized(std::span<const float> logits, int64_t step = 0) const;

  // Output token `step`'s row parameters (ops/sampling.h): the edits of steps 0-1 are appended
  // to *edits and the row names their range there. Sample(logits, step) picks
  // PickToken(logits edited so, row).
  RowSampling Plan(int64_t step, std::vector<LogitEdit>* edits) const;
  // Records `token`, sampled from Plan(step)'s row elsewhere (a device), for the penalties.
  void Record(int32_t token);

  // The ids that min_tokens keeps from being sampled (the engine's EOS ids and stop_token_ids).
  void SuppressUntilMinTokens(std::vector<int32_t> ids) { suppressed_ = std::move(ids); }

 private:
  SamplingParams params_;
  uint64_t seed_;
  int64_t vocab_;
  std::vector<int32_t> seen_;  // sorted unique ids of the prompt and output (repetition penalty)
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<int32_t> suppressed_;
};

// log_softmax of `logits` at `token`, and the k most likely tokens with their log-probabilities.
TokenLogprob RawLogprobs(std::span<const float> logits, int32_t token, int32_t k);

}  // namespace lucid
