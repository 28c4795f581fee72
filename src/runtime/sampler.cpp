#include "runtime/sampler.h"

#include <algorithm>

namespace lucid {

RequestSampler::RequestSampler(const SamplingParams& params, uint64_t seed,
                               std::span<const int32_t> prompt, int64_t vocab)
    : params_(params), seed_(seed), vocab_(vocab) {
  if (params_.repetition_penalty != 1.0f) {
    seen_.assign(prompt.begin(), prompt.end());
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  }
}

RowSampling RequestSampler::Plan(int64_t step, std::vector<LogitEdit>* edits) const {
  RowSampling row;
  row.temperature = params_.temperature;
  row.top_p = params_.top_p;
  row.min_p = params_.min_p;
  row.top_k = params_.top_k;
  row.uniform =
      params_.temperature == 0.0f ? 0.0 : CounterUniform(seed_, static_cast<uint64_t>(step));
  row.edit_begin = static_cast<int32_t>(edits->size());
  for (const auto& [id, bias] : params_.logit_bias)
    edits->push_back({id, LogitEditKind::kAdd, bias});
  if (step < params_.min_tokens)
    for (int32_t id : suppressed_) edits->push_back({id, LogitEditKind::kSuppress, 0.0f});
  const float r = params_.repetition_penalty;
  if (r != 1.0f)
    for (int32_t id : seen_) edits->push_back({id, LogitEditKind::kRepetition, r});
  const float f = params_.frequency_penalty, p = params_.presence_penalty;
  if (f != 0.0f || p != 0.0f)
    for (const auto& [id, count] : output_counts_)
      edits->push_back({id, LogitEditKind::kSubtract, f * static_cast<float>(count) + p});
  row.edit_end = static_cast<int32_t>(edits->size());
  row.clamp = r != 1.0f ? 1 : 0;
  return row;
}

std::vector<float> RequestSampler::Penalized(std::span<const float> logits, int64_t step) const {
  std::vector<float> x(logits.begin(), logits.end());
  std::vector<LogitEdit> edits;
  const RowSampling row = Plan(step, &edits);
  ApplyLogitEdits(x, edits, row.clamp != 0);
  return x;
}

int32_t RequestSampler::Sample(std::span<const float> logits, int64_t step,
                               TokenLogprob* logprobs) {
  std::vector<LogitEdit> edits;
  const RowSampling row = Plan(step, &edits);
  std::vector<float> x(logits.begin(), logits.end());
  ApplyLogitEdits(x, edits, row.clamp != 0);
  const int32_t token = PickToken(x, row);
  if (logprobs != nullptr && params_.logprobs >= 0)
    *logprobs = RawLogprobs(logits, token, params_.logprobs);
  Record(token);
  return token;
}

void RequestSampler::Record(int32_t token) {
  if (params_.repetition_penalty != 1.0f) {
    auto it = std::lower_bound(seen_.begin(), seen_.end(), token);
    if (it == seen_.end() || *it != token) seen_.insert(it, token);
  }
  ++output_counts_[token];
}

TokenLogprob RawLogprobs(std::span<const float> logits, int32_t token, int32_t k) {
  k = std::min(k, static_cast<int32_t>(logits.size()));
  TokenLogprob out;
  out.token = token;
  std::vector<int32_t> ids(std::max(k, 0));
  std::vector<float> lps(ids.size());
  RawRowLogprobs(logits, token, k, &out.logprob, ids.data(), lps.data());
  for (int32_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], lps[i]);
  return out;
}

}  // namespace lucid
