#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

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

int32_t Draw(std::span<float> x, const RowSampling& row) {
  const float t = row.temperature;
  const float mx = *std::max_element(x.begin(), x.end());
  // Unnormalized probabilities exp((x - max) / t); the largest is exactly 1.
  for (float& v : x) v = std::exp((v - mx) / t);
  std::vector<int32_t> cand;
  cand.reserve(x.size());
  const float floor = row.min_p > 0 ? row.min_p : 0.0f;  // min_p * p_max, p_max == 1
  for (int32_t i = 0; i < static_cast<int32_t>(x.size()); ++i)
    if (x[i] >= floor && x[i] > 0) cand.push_back(i);
  const ByValueDesc order{x};
  if (row.top_k > 0 && static_cast<int64_t>(cand.size()) > row.top_k) {
    std::nth_element(cand.begin(), cand.begin() + row.top_k, cand.end(), order);
    cand.resize(row.top_k);
  }
  double total = 0;
  for (int32_t i : cand) total += x[i];
  if (row.top_p < 1.0f) {  // the only filter that needs the kept set in probability order
    std::sort(cand.begin(), cand.end(), order);
    double cum = 0;
    size_t keep = 0;
    while (keep < cand.size()) {
      cum += x[cand[keep++]];
      if (cum >= row.top_p * total) break;
    }
    cand.resize(keep);
    total = cum;
  }
  std::sort(cand.begin(), cand.end());  // walk in id order: no full sort on the common path
  const double target = row.uniform * total;
  double cum = 0;
  for (int32_t i : cand) {
    cum += x[i];
    if (target < cum) return i;
  }
  return cand.back();  // rounding: the target fell at the very end
}

}  // namespace

double CounterUniform(uint64_t seed, uint64_t counter) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ SplitMix64(counter + 0x632be59bd9b4e019ULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

void ApplyLogitEdits(std::span<float> x, std::span<const LogitEdit> edits, bool clamp) {
  for (int kind = 0; kind < kLogitEditKinds; ++kind) {
    for (const LogitEdit& e : edits) {
      if (static_cast<int>(e.kind) != kind) continue;
      float& v = x[e.id];
      switch (e.kind) {
        case LogitEditKind::kAdd:
          v += e.value;
          break;
        case LogitEditKind::kSuppress:
          v = -std::numeric_limits<float>::infinity();
          break;
        case LogitEditKind::kRepetition:
          v = v > 0 ? v / e.value : v * e.value;
          break;
        case LogitEditKind::kSubtract:
          v -= e.value;
          break;
      }
    }
  }
  // An extreme penalty can overflow a finite logit; keep the order without letting inf reach exp.
  if (clamp)
    for (float& v : x)
      v = std::clamp(v, -std::numeric_limits<float>::max(), std::numeric_limits<float>::max());
}

int32_t PickToken(std::span<float> x, const RowSampling& row) {
  if (row.forced_token >= 0) return row.forced_token;
  return row.temperature == 0.0f ? ArgMaxLowest(x) : Draw(x, row);
}

void RawRowLogprobs(std::span<const float> raw, int32_t token, int32_t k, float* logprob,
                    int32_t* top_ids, float* top_logprobs) {
  const float mx = *std::max_element(raw.begin(), raw.end());
  double sum = 0;
  for (float v : raw) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  *logprob = static_cast<float>(raw[token] - lse);
  if (k <= 0) return;
  const int32_t n = static_cast<int32_t>(raw.size());
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), ByValueDesc{raw});
  for (int32_t i = 0; i < k; ++i) {
    top_ids[i] = idx[i];
    top_logprobs[i] = static_cast<float>(raw[idx[i]] - lse);
  }
}

}  // namespace lucid
