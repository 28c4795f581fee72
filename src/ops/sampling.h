// Token sampling as arithmetic on one logits row, shared by the engine's per-request sampler
// (runtime/sampler.h, which states the semantics) and Ops::SampleRows, so that a device samples
// the rows where they were computed and returns token ids and logprobs, not logits, to the host.
//
// A row is sampled in three steps:
// 1. Edits: a copy of the raw row is edited by the row's LogitEdits, kind by kind in the order of
//    LogitEditKind (kAdd edits in list order, so a repeated id adds twice; the ids of one of the
//    other kinds are distinct), then, when RowSampling::clamp, every value is clamped to the
//    finite range.
// 2. The token: temperature 0 takes the argmax (lowest id on ties). Otherwise exp((x - max) / t)
//    (the largest is 1), the candidates x >= min_p (and > 0), top_k of them (larger first, then
//    lower id), top_p (the smallest larger-first prefix whose mass reaches top_p of the kept
//    mass), and the token where the running mass in id order first exceeds uniform * kept mass
//    (the last candidate when rounding leaves the target at the very end).
// 3. Logprobs of the RAW row (before edits): log_softmax at the token and at the row's k most
//    likely ids (larger first, then lower id).
// Every raw logit must be finite (the engine's numerics guard checks the row first).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace lucid {

enum class LogitEditKind : int32_t {
  kAdd = 0,         // x += value (logit_bias)
  kSuppress = 1,    // x = -inf (min_tokens)
  kRepetition = 2,  // x = x > 0 ? x / value : x * value (repetition_penalty)
  kSubtract = 3,    // x -= value (frequency and presence penalties)
};
inline constexpr int kLogitEditKinds = 4;

struct LogitEdit {
  int32_t id = 0;
  LogitEditKind kind = LogitEditKind::kAdd;
  float value = 0.0f;
};

// One row's parameters (plain data: a device copies it as bytes).
struct RowSampling {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;       // 0: off
  double uniform = 0.0;    // the draw, in [0, 1)
  int32_t edit_begin = 0;  // this row's edits: [edit_begin, edit_end) of the edit list
  int32_t edit_end = 0;
  int32_t clamp = 0;  // 1: clamp every edited-row value to [-FLT_MAX, FLT_MAX]
  // >= 0: no draw; the token is this id, and step 3 gives its logprob (a prompt position's
  // logprob of the prompt's next token, where the logits are). -1: steps 1 and 2 choose.
  int32_t forced_token = -1;
};

// Uniform double in [0, 1) from (seed, counter): splitmix64 finalizers, 53 bits.
double CounterUniform(uint64_t seed, uint64_t counter);

// Step 1 on `x` (the raw row, edited in place).
void ApplyLogitEdits(std::span<float> x, std::span<const LogitEdit> edits, bool clamp);

// Step 2 on `x` (the edited row; overwritten with scratch values), or row.forced_token when it is
// set. Requires a non-empty row.
int32_t PickToken(std::span<float> x, const RowSampling& row);

// Step 3: *logprob = log_softmax(raw)[token]; top_ids / top_logprobs [k] (k <= raw.size()) the k
// most likely ids and their log-probabilities.
void RawRowLogprobs(std::span<const float> raw, int32_t token, int32_t k, float* logprob,
                    int32_t* top_ids, float* top_logprobs);

}  // namespace lucid
