#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace lucid {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Higher value first, then lower id.
struct ByValueDesc {
  std::span<const float> v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

int32_t ArgMaxLowest(std::span<const float> v) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace

double CounterUniform(uint64_t seed, uint64_t counter) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ SplitMix64(counter + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

RequestSampler::RequestSampler(const SamplingParams& params, uint64_t seed,
                               std::span<const int32_t> prompt, int64_t vocab)
    : params_(params), seed_(seed), vocab_(vocab) {
  if (params_.repetition_penalty != 1.0f) {
    seen_.assign(prompt.begin(), prompt.end());
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  }
}

std::vector<float> RequestSampler::Penalized(std::span<const float> logits, int64_t step) const {
  std::vector<float> x(logits.begin(), logits.end());
  for (const auto& [id, bias] : params_.logit_bias) x[id] += bias;
  if (step < params_.min_tokens)
    for (int32_t id : suppressed_) x[id] = -std::numeric_limits<float>::infinity();
  const float r = params_.repetition_penalty;
  if (r != 1.0f)
    for (int32_t id : seen_) x[id] = x[id] > 0 ? x[id] / r : x[id] * r;
  const float f = params_.frequency_penalty, p = params_.presence_penalty;
  if (f != 0.0f || p != 0.0f)
    for (const auto& [id, count] : output_counts_) x[id] -= f * static_cast<float>(count) + p;
  // An extreme penalty can overflow a finite logit; keep the order without letting inf reach exp.
  if (r != 1.0f)
    for (float& v : x) v = std::clamp(v, -std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::max());
  return x;
}

int32_t RequestSampler::Draw(std::vector<float>& x, int64_t step) const {
  const float t = params_.temperature;
  const float mx = *std::max_element(x.begin(), x.end());
  // Unnormalized probabilities exp((x - max) / t); the largest is exactly 1.
  for (float& v : x) v = std::exp((v - mx) / t);
  std::vector<int32_t> cand;
  cand.reserve(x.size());
  const float floor = params_.min_p > 0 ? params_.min_p : 0.0f;  // min_p * p_max, p_max == 1
  for (int32_t i = 0; i < static_cast<int32_t>(x.size()); ++i)
    if (x[i] >= floor && x[i] > 0) cand.push_back(i);
  const ByValueDesc order{x};
  if (params_.top_k > 0 && static_cast<int64_t>(cand.size()) > params_.top_k) {
    std::nth_element(cand.begin(), cand.begin() + params_.top_k, cand.end(), order);
    cand.resize(params_.top_k);
  }
  double total = 0;
  for (int32_t i : cand) total += x[i];
  if (params_.top_p < 1.0f) {  // the only filter that needs the kept set in probability order
    std::sort(cand.begin(), cand.end(), order);
    double cum = 0;
    size_t keep = 0;
    while (keep < cand.size()) {
      cum += x[cand[keep++]];
      if (cum >= params_.top_p * total) break;
    }
    cand.resize(keep);
    total = cum;
  }
  std::sort(cand.begin(), cand.end());  // walk in id order: no full sort on the common path
  const double target = CounterUniform(seed_, static_cast<uint64_t>(step)) * total;
  double cum = 0;
  for (int32_t i : cand) {
    cum += x[i];
    if (target < cum) return i;
  }
  return cand.back();  // rounding: the target fell at the very end
}

int32_t RequestSampler::Sample(std::span<const float> logits, int64_t step,
                               TokenLogprob* logprobs) {
  std::vector<float> x = Penalized(logits, step);
  const int32_t token = params_.temperature == 0.0f ? ArgMaxLowest(x) : Draw(x, step);
  if (logprobs != nullptr && params_.logprobs >= 0)
    *logprobs = RawLogprobs(logits, token, params_.logprobs);
  if (params_.repetition_penalty != 1.0f) {
    auto it = std::lower_bound(seen_.begin(), seen_.end(), token);
    if (it == seen_.end() || *it != token) seen_.insert(it, token);
  }
  ++output_counts_[token];
  return token;
}

TokenLogprob RawLogprobs(std::span<const float> logits, int32_t token, int32_t k) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  const int32_t n = static_cast<int32_t>(logits.size());
  k = std::min(k, n);
  if (k > 0) {
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), ByValueDesc{logits});
    for (int32_t i = 0; i < k; ++i)
      out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  }
  return out;
}

}  // namespace lucid
