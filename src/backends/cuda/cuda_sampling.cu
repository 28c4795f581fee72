#include <cfloat>

#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_sampling.h"

namespace lucid::cuda {
namespace {

// A value and its id; "a before b": the larger value, then the lower id (no NaN reaches here).
struct ValId {
  float v;
  int32_t id;
};
__device__ bool Before(ValId a, ValId b) { return a.v > b.v || (a.v == b.v && a.id < b.id); }

// Block-wide reduction of one T per thread with `op`, returned to every thread. `sh` is the
// block's shared buffer of kThreads T.
template <typename T, typename Op>
__device__ T Reduce(T v, Op op, T* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = sh[0];
  __syncthreads();
  return r;
}

// The shared buffers of one block (one row).
struct Shared {
  double d[kThreads];
  int64_t n[kThreads];
  ValId vi[kThreads];
  float f[kThreads];
  int32_t i[kThreads];
};

__device__ double SumD(double v, Shared& s) {
  return Reduce(
      v, [](double a, double b) { return a + b; }, s.d);
}
__device__ int64_t SumN(int64_t v, Shared& s) {
  return Reduce(
      v, [](int64_t a, int64_t b) { return a + b; }, s.n);
}
__device__ ValId Best(ValId v, Shared& s) {
  return Reduce(
      v, [](ValId a, ValId b) { return Before(b, a) ? b : a; }, s.vi);
}

// This thread's contiguous slice [*lo, *hi) of a row of V ids (id order across threads).
__device__ void Slice(int64_t V, int64_t* lo, int64_t* hi) {
  const int64_t per = (V + kThreads - 1) / kThreads;
  *lo = min(V, threadIdx.x * per);
  *hi = min(V, *lo + per);
}

// Exclusive prefix over the threads of a per-thread value (thread order = id order of slices);
// `sh` is the block's shared buffer of kThreads T.
template <typename T>
__device__ T ExclusivePrefix(T mine, T* sh) {
  sh[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    T run = 0;
    for (int i = 0; i < kThreads; ++i) {
      const T c = sh[i];
      sh[i] = run;
      run += c;
    }
  }
  __syncthreads();
  const T r = sh[threadIdx.x];
  __syncthreads();
  return r;
}

// Positive floats order as their bits.
__device__ uint32_t Bits(float v) { return __float_as_uint(v); }

// Step 1: x = raw edited (ops/sampling.h's ApplyLogitEdits).
__device__ void Edit(const float* raw, float* x, int64_t V, const RowSampling& p,
                     const LogitEdit* edits) {
  for (int64_t i = threadIdx.x; i < V; i += kThreads) x[i] = raw[i];
  __syncthreads();
  if (threadIdx.x == 0)  // kAdd in list order: an id may repeat
    for (int32_t e = p.edit_begin; e < p.edit_end; ++e)
      if (edits[e].kind == LogitEditKind::kAdd) x[edits[e].id] += edits[e].value;
  __syncthreads();
  for (int kind = 1; kind < kLogitEditKinds; ++kind) {  // distinct ids within a kind
    for (int32_t e = p.edit_begin + threadIdx.x; e < p.edit_end; e += kThreads) {
      const LogitEdit ed = edits[e];
      if (static_cast<int>(ed.kind) != kind) continue;
      float& v = x[ed.id];
      if (ed.kind == LogitEditKind::kSuppress) v = -INFINITY;
      if (ed.kind == LogitEditKind::kRepetition) v = v > 0 ? v / ed.value : v * ed.value;
      if (ed.kind == LogitEditKind::kSubtract) v -= ed.value;
    }
    __syncthreads();
  }
  if (p.clamp)
    for (int64_t i = threadIdx.x; i < V; i += kThreads)
      x[i] = fminf(fmaxf(x[i], -FLT_MAX), FLT_MAX);
  __syncthreads();
}

// Keeps, of the values with bits == tb, those whose rank by id is below `keep`; zeroes the rest
// and every value below tb.
__device__ void KeepAtThreshold(float* x, int64_t V, uint32_t tb, int64_t keep, Shared& s) {
  int64_t lo, hi;
  Slice(V, &lo, &hi);
  int64_t ties = 0;
  for (int64_t i = lo; i < hi; ++i) ties += x[i] > 0 && Bits(x[i]) == tb;
  int64_t rank = ExclusivePrefix(ties, s.n);
  for (int64_t i = lo; i < hi; ++i) {
    if (!(x[i] > 0)) continue;
    const uint32_t b = Bits(x[i]);
    if (b < tb || (b == tb && rank++ >= keep)) x[i] = 0.0f;
  }
  __syncthreads();
}

// The largest bits b with f(b) >= goal, f non-increasing in b (f(0) >= goal): bitwise search.
template <typename F, typename G>
__device__ uint32_t LargestBitsReaching(F f, G goal) {
  uint32_t t = 0;
  for (int bit = 30; bit >= 0; --bit) {
    const uint32_t c = t | (1u << bit);
    if (f(c) >= goal) t = c;
  }
  return t;
}

// top_k over the candidates (x > 0): the k larger-first ones, ties to the lower id.
__device__ void TopK(float* x, int64_t V, int64_t k, Shared& s) {
  auto count_at_least = [&](uint32_t b) {
    int64_t c = 0;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) c += x[i] > 0 && Bits(x[i]) >= b;
    return SumN(c, s);
  };
  if (count_at_least(1) <= k) return;
  const uint32_t tb = LargestBitsReaching(count_at_least, k);
  const int64_t above = tb == 0x7fffffffu ? 0 : count_at_least(tb + 1);
  KeepAtThreshold(x, V, tb, k - above, s);
}

// top_p: the shortest larger-first prefix of the candidates whose mass reaches top_p * total;
// returns the kept mass (the prefix's running sum, as the host's loop).
__device__ double TopP(float* x, int64_t V, double total, float top_p, Shared& s) {
  const double goal = top_p * total;
  auto mass_at_least = [&](uint32_t b) {
    double m = 0;
    for (int64_t i = threadIdx.x; i < V; i += kThreads)
      if (x[i] > 0 && Bits(x[i]) >= b) m += x[i];
    return SumD(m, s);
  };
  const uint32_t tb = LargestBitsReaching(mass_at_least, goal);
  const double above = tb == 0x7fffffffu ? 0.0 : mass_at_least(tb + 1);
  int64_t ties = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) ties += x[i] > 0 && Bits(x[i]) == tb;
  ties = SumN(ties, s);
  __shared__ int64_t keep_sh;
  __shared__ double kept_sh;
  if (threadIdx.x == 0) {
    const double v = __uint_as_float(tb);
    double cum = above;
    int64_t keep = 0;
    while (keep < ties) {
      cum += v;
      ++keep;
      if (cum >= goal) break;
    }
    keep_sh = keep;
    kept_sh = cum;
  }
  __syncthreads();
  const int64_t keep = keep_sh;
  const double kept = kept_sh;
  __syncthreads();
  KeepAtThreshold(x, V, tb, keep, s);
  return kept;
}

// Step 2 for temperature > 0 (ops/sampling.h's Draw).
__device__ int32_t Draw(float* x, int64_t V, const RowSampling& p, Shared& s) {
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) mx = fmaxf(mx, x[i]);
  mx = Reduce(
      mx, [](float a, float b) { return fmaxf(a, b); }, s.f);
  const float floor = p.min_p > 0 ? p.min_p : 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float e = expf((x[i] - mx) / p.temperature);
    x[i] = e >= floor && e > 0 ? e : 0.0f;  // 0: not a candidate
  }
  __syncthreads();
  if (p.top_k > 0) TopK(x, V, p.top_k, s);
  double total = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) total += x[i];
  total = SumD(total, s);
  if (p.top_p < 1.0f) total = TopP(x, V, total, p.top_p, s);
  // The kept mass in id order: the first id where the running sum exceeds the target.
  const double target = p.uniform * total;
  int64_t lo, hi;
  Slice(V, &lo, &hi);
  double mine = 0;
  for (int64_t i = lo; i < hi; ++i) mine += x[i];
  double cum = ExclusivePrefix(mine, s.d);
  ValId found{0.0f, INT32_MAX}, last{0.0f, -1};
  for (int64_t i = lo; i < hi; ++i) {
    if (!(x[i] > 0)) continue;
    last.id = static_cast<int32_t>(i);
    if (cum <= target) {
      cum += x[i];
      if (target < cum && found.id == INT32_MAX) found.id = static_cast<int32_t>(i);
    }
  }
  const int32_t first = Reduce(
      found.id, [](int32_t a, int32_t b) { return min(a, b); }, s.i);
  const int32_t end = Reduce(
      last.id, [](int32_t a, int32_t b) { return max(a, b); }, s.i);
  return first != INT32_MAX ? first : end;  // rounding: the target fell at the very end
}

__global__ void SampleRowsKernel(const float* logits, int64_t V, const RowSampling* rows,
                                 const LogitEdit* edits, float* scratch, int32_t* tokens,
                                 float* logprobs, int32_t* top_ids, int64_t K) {
  __shared__ Shared s;
  const int64_t r = blockIdx.x;
  const RowSampling p = rows[r];
  const float* raw = logits + r * V;
  float* x = scratch + r * V;
  Edit(raw, x, V, p, edits);
  int32_t token;
  if (p.forced_token >= 0) {
    token = p.forced_token;  // a prompt token's logprob: no draw
  } else if (p.temperature == 0.0f) {
    ValId best{-INFINITY, INT32_MAX};
    for (int64_t i = threadIdx.x; i < V; i += kThreads)
      if (Before(ValId{x[i], static_cast<int32_t>(i)}, best))
        best = {x[i], static_cast<int32_t>(i)};
    token = Best(best, s).id;
  } else {
    token = Draw(x, V, p, s);
  }
  // Step 3: the raw row's log-softmax at the token and its K best ids.
  ValId best{-INFINITY, INT32_MAX};
  for (int64_t i = threadIdx.x; i < V; i += kThreads)
    if (Before(ValId{raw[i], static_cast<int32_t>(i)}, best))
      best = {raw[i], static_cast<int32_t>(i)};
  best = Best(best, s);
  const float mx = best.v;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) sum += exp(static_cast<double>(raw[i]) - mx);
  const double lse = mx + log(SumD(sum, s));
  float* lp = logprobs + r * (1 + K);
  if (threadIdx.x == 0) {
    tokens[r] = token;
    lp[0] = static_cast<float>(raw[token] - lse);
  }
  for (int64_t j = 0; j < K; ++j) {
    if (j > 0) {  // the best after the previous pick
      const ValId prev = best;
      best = {-INFINITY, INT32_MAX};
      for (int64_t i = threadIdx.x; i < V; i += kThreads) {
        const ValId c{raw[i], static_cast<int32_t>(i)};
        if (Before(prev, c) && Before(c, best)) best = c;
      }
      best = Best(best, s);
    }
    if (threadIdx.x == 0) {
      top_ids[r * K + j] = best.id;
      lp[1 + j] = static_cast<float>(best.v - lse);
    }
  }
}

__global__ void ApplyTokenBitmaskKernel(float* logits, const int32_t* bitmask, int64_t R,
                                        int64_t V) {
  const int64_t W = (V + 31) / 32;
  LUCID_GRID_LOOP(i, R * V) {
    const int64_t r = i / V, j = i % V;
    if (((static_cast<uint32_t>(bitmask[r * W + j / 32]) >> (j % 32)) & 1u) == 0)
      logits[i] = -INFINITY;
  }
}

}  // namespace

void LaunchApplyTokenBitmask(float* logits, const int32_t* bitmask, int64_t R, int64_t V,
                             cudaStream_t stream) {
  if (R > 0 && V > 0)
    ApplyTokenBitmaskKernel<<<Blocks(R * V), kThreads, 0, stream>>>(logits, bitmask, R, V);
}

void LaunchSampleRows(const float* logits, int64_t R, int64_t V, const RowSampling* rows,
                      const LogitEdit* edits, float* scratch, int32_t* tokens, float* logprobs,
                      int32_t* top_ids, int64_t K, cudaStream_t stream) {
  if (R > 0)
    SampleRowsKernel<<<static_cast<unsigned>(R), kThreads, 0, stream>>>(
        logits, V, rows, edits, scratch, tokens, logprobs, top_ids, K);
}

}  // namespace lucid::cuda
