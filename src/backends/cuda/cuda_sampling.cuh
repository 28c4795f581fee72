// One row of Ops::SampleRows by one block of kSampleThreads threads (cuda_sampling.h says what
// it computes), written as phases: SampleRowPhases takes how to run a phase on every thread (the
// kernel: each thread its own, then __syncthreads; cuda_sampling_test.cpp: every thread in turn
// on the CPU, through the conformance suite's SampleRows cases). A value a thread keeps from one
// phase to the next lives in the state's per-thread arrays; a block-wide value (a reduction's
// result, the token) is written by one thread and read by all after the barrier, and is not
// written again before every thread has passed another barrier.
// - Reductions (SampleReduce, cuda_block_phases.cuh's TreeReduce): each thread its partial, then a
// tree
//   over the threads; the result in a state scalar of its type.
// - Thresholds: a bitwise search over the float bits of the (positive) probabilities, one
//   reduction per probe (LargestBitsReaching), then ties at the threshold ranked by id through an
//   exclusive prefix of per-thread counts over contiguous slices (KeepAtThreshold).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_block_phases.cuh"
#include "backends/cuda/cuda_weight_view.cuh"
#include "ops/sampling.h"

namespace lucid::cuda {

inline constexpr int kSampleThreads = 256;

// A value and its id; "a before b": the larger value, then the lower id (no NaN reaches here).
struct ValId {
  float v;
  int32_t id;
};
__host__ __device__ inline bool Before(ValId a, ValId b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

// The block's shared state for one row.
struct SampleRowState {
  double d[kSampleThreads];  // reduction and prefix buffers, one entry per thread
  int64_t n[kSampleThreads];
  float f[kSampleThreads];
  int32_t i[kSampleThreads];
  ValId vi[kSampleThreads];
  int32_t found[kSampleThreads], last[kSampleThreads];  // per thread: the draw's walk
  double d_out;                                         // reduction results
  int64_t n_out;
  float f_out;
  int32_t i_out;
  ValId vi_out;
  int64_t keep;  // TopP's ties kept and mass kept
  double kept;
};

// This thread's contiguous slice [*lo, *hi) of a row of V ids (id order across threads).
__host__ __device__ inline void Slice(int64_t V, int tid, int64_t* lo, int64_t* hi) {
  const int64_t per = (V + kSampleThreads - 1) / kSampleThreads;
  *lo = V < tid * per ? V : tid * per;
  *hi = V < *lo + per ? V : *lo + per;
}

// The reduction over the block's threads (cuda_block_phases.cuh).
template <typename T, typename Part, typename Op, typename Run>
__host__ __device__ T SampleReduce(T* sh, T* out, Part part, Op op, Run run) {
  return TreeReduce<kSampleThreads>(sh, out, part, op, run);
}

struct SumOfD {
  __host__ __device__ double operator()(double a, double b) const { return a + b; }
};
struct SumOfN {
  __host__ __device__ int64_t operator()(int64_t a, int64_t b) const { return a + b; }
};
struct BestOf {
  __host__ __device__ ValId operator()(ValId a, ValId b) const { return Before(b, a) ? b : a; }
};

// The largest bits b with f(b) >= goal, f non-increasing in b (f(0) >= goal): bitwise search.
template <typename F, typename G>
__host__ __device__ uint32_t LargestBitsReaching(F f, G goal) {
  uint32_t t = 0;
  for (int bit = 30; bit >= 0; --bit) {
    const uint32_t c = t | (1u << bit);
    if (f(c) >= goal) t = c;
  }
  return t;
}

// Keeps, of the values with bits == tb, those whose rank by id is below `keep`; zeroes the rest
// and every value below tb.
template <typename Run>
__host__ __device__ void KeepAtThreshold(SampleRowState& st, float* x, int64_t V, uint32_t tb,
                                         int64_t keep, Run run) {
  run([&](int tid) {
    int64_t lo, hi, ties = 0;
    Slice(V, tid, &lo, &hi);
    for (int64_t i = lo; i < hi; ++i) ties += x[i] > 0 && BitsOfFloat(x[i]) == tb;
    st.n[tid] = ties;
  });
  ExclusivePrefix<kSampleThreads>(st.n, run);
  run([&](int tid) {
    int64_t lo, hi, rank = st.n[tid];
    Slice(V, tid, &lo, &hi);
    for (int64_t i = lo; i < hi; ++i) {
      if (!(x[i] > 0)) continue;
      const uint32_t b = BitsOfFloat(x[i]);
      if (b < tb || (b == tb && rank++ >= keep)) x[i] = 0.0f;
    }
  });
}

// Step 1 (ops/sampling.h's ApplyLogitEdits): x = raw edited.
template <typename Run>
__host__ __device__ void EditRow(const float* raw, float* x, int64_t V, const RowSampling& p,
                                 const LogitEdit* edits, Run run) {
  run([&](int tid) {
    for (int64_t i = tid; i < V; i += kSampleThreads) x[i] = raw[i];
  });
  run([&](int tid) {  // kAdd in list order: an id may repeat
    if (tid == 0)
      for (int32_t e = p.edit_begin; e < p.edit_end; ++e)
        if (edits[e].kind == LogitEditKind::kAdd) x[edits[e].id] += edits[e].value;
  });
  for (int kind = 1; kind < kLogitEditKinds; ++kind)  // distinct ids within a kind
    run([&](int tid) {
      for (int32_t e = p.edit_begin + tid; e < p.edit_end; e += kSampleThreads) {
        const LogitEdit ed = edits[e];
        if (static_cast<int>(ed.kind) != kind) continue;
        float& v = x[ed.id];
        if (ed.kind == LogitEditKind::kSuppress) v = -INFINITY;
        if (ed.kind == LogitEditKind::kRepetition) v = v > 0 ? v / ed.value : v * ed.value;
        if (ed.kind == LogitEditKind::kSubtract) v -= ed.value;
      }
    });
  if (p.clamp)
    run([&](int tid) {
      for (int64_t i = tid; i < V; i += kSampleThreads)
        x[i] = fminf(fmaxf(x[i], -FLT_MAX), FLT_MAX);
    });
}

// top_k over the candidates (x > 0): the k larger-first ones, ties to the lower id.
template <typename Run>
__host__ __device__ void TopKCandidates(SampleRowState& st, float* x, int64_t V, int64_t k,
                                        Run run) {
  auto count_at_least = [&](uint32_t b) {
    return SampleReduce(
        st.n, &st.n_out,
        [&](int tid) {
          int64_t c = 0;
          for (int64_t i = tid; i < V; i += kSampleThreads) c += x[i] > 0 && BitsOfFloat(x[i]) >= b;
          return c;
        },
        SumOfN{}, run);
  };
  if (count_at_least(1) <= k) return;
  const uint32_t tb = LargestBitsReaching(count_at_least, k);
  const int64_t above = tb == 0x7fffffffu ? 0 : count_at_least(tb + 1);
  KeepAtThreshold(st, x, V, tb, k - above, run);
}

// top_p: the shortest larger-first prefix of the candidates whose mass reaches top_p * total;
// returns the kept mass (the prefix's running sum, as the host's loop).
template <typename Run>
__host__ __device__ double TopPCandidates(SampleRowState& st, float* x, int64_t V, double total,
                                          float top_p, Run run) {
  const double goal = top_p * total;
  auto mass_at_least = [&](uint32_t b) {
    return SampleReduce(
        st.d, &st.d_out,
        [&](int tid) {
          double m = 0;
          for (int64_t i = tid; i < V; i += kSampleThreads)
            if (x[i] > 0 && BitsOfFloat(x[i]) >= b) m += x[i];
          return m;
        },
        SumOfD{}, run);
  };
  const uint32_t tb = LargestBitsReaching(mass_at_least, goal);
  const double above = tb == 0x7fffffffu ? 0.0 : mass_at_least(tb + 1);
  const int64_t ties = SampleReduce(
      st.n, &st.n_out,
      [&](int tid) {
        int64_t c = 0;
        for (int64_t i = tid; i < V; i += kSampleThreads) c += x[i] > 0 && BitsOfFloat(x[i]) == tb;
        return c;
      },
      SumOfN{}, run);
  run([&](int tid) {
    if (tid != 0) return;
    const double v = FloatFromBits(tb);
    double cum = above;
    int64_t keep = 0;
    while (keep < ties) {
      cum += v;
      ++keep;
      if (cum >= goal) break;
    }
    st.keep = keep;
    st.kept = cum;
  });
  const int64_t keep = st.keep;
  const double kept = st.kept;
  KeepAtThreshold(st, x, V, tb, keep, run);
  return kept;
}

// Step 2 for temperature > 0 (ops/sampling.h's Draw).
template <typename Run>
__host__ __device__ int32_t DrawToken(SampleRowState& st, float* x, int64_t V, const RowSampling& p,
                                      Run run) {
  const float mx = SampleReduce(
      st.f, &st.f_out,
      [&](int tid) {
        float m = -INFINITY;
        for (int64_t i = tid; i < V; i += kSampleThreads) m = fmaxf(m, x[i]);
        return m;
      },
      [](float a, float b) { return fmaxf(a, b); }, run);
  const float floor = p.min_p > 0 ? p.min_p : 0.0f;
  run([&](int tid) {
    for (int64_t i = tid; i < V; i += kSampleThreads) {
      const float e = expf((x[i] - mx) / p.temperature);
      x[i] = e >= floor && e > 0 ? e : 0.0f;  // 0: not a candidate
    }
  });
  if (p.top_k > 0) TopKCandidates(st, x, V, p.top_k, run);
  auto sum_of_x = [&](int tid) {
    double s = 0;
    for (int64_t i = tid; i < V; i += kSampleThreads) s += x[i];
    return s;
  };
  double total = SampleReduce(st.d, &st.d_out, sum_of_x, SumOfD{}, run);
  if (p.top_p < 1.0f) total = TopPCandidates(st, x, V, total, p.top_p, run);
  // The kept mass in id order: the first id where the running sum exceeds the target.
  const double target = p.uniform * total;
  run([&](int tid) {
    int64_t lo, hi;
    Slice(V, tid, &lo, &hi);
    double mine = 0;
    for (int64_t i = lo; i < hi; ++i) mine += x[i];
    st.d[tid] = mine;
  });
  ExclusivePrefix<kSampleThreads>(st.d, run);
  run([&](int tid) {
    int64_t lo, hi;
    Slice(V, tid, &lo, &hi);
    double cum = st.d[tid];
    int32_t found = INT32_MAX, last = -1;
    for (int64_t i = lo; i < hi; ++i) {
      if (!(x[i] > 0)) continue;
      last = static_cast<int32_t>(i);
      if (cum <= target) {
        cum += x[i];
        if (target < cum && found == INT32_MAX) found = static_cast<int32_t>(i);
      }
    }
    st.found[tid] = found;
    st.last[tid] = last;
  });
  const int32_t first = SampleReduce(
      st.i, &st.i_out, [&](int tid) { return st.found[tid]; },
      [](int32_t a, int32_t b) { return a < b ? a : b; }, run);
  const int32_t end = SampleReduce(
      st.i, &st.i_out, [&](int tid) { return st.last[tid]; },
      [](int32_t a, int32_t b) { return a > b ? a : b; }, run);
  return first != INT32_MAX ? first : end;  // rounding: the target fell at the very end
}

// The row's three steps: raw [V] -> *token, lp [1 + K] (the token's raw logprob, then the K best
// ids'), top_ids [K]; x [V] is scratch.
template <typename Run>
__host__ __device__ void SampleRowPhases(SampleRowState& st, const float* raw, float* x, int64_t V,
                                         const RowSampling& p, const LogitEdit* edits, int64_t K,
                                         int32_t* token_out, float* lp, int32_t* top_ids, Run run) {
  EditRow(raw, x, V, p, edits, run);
  int32_t token;
  if (p.forced_token >= 0) {
    token = p.forced_token;  // a prompt token's logprob: no draw
  } else if (p.temperature == 0.0f) {
    token = SampleReduce(
                st.vi, &st.vi_out,
                [&](int tid) {
                  ValId best{-INFINITY, INT32_MAX};
                  for (int64_t i = tid; i < V; i += kSampleThreads)
                    if (Before(ValId{x[i], static_cast<int32_t>(i)}, best))
                      best = {x[i], static_cast<int32_t>(i)};
                  return best;
                },
                BestOf{}, run)
                .id;
  } else {
    token = DrawToken(st, x, V, p, run);
  }
  // Step 3: the raw row's log-softmax at the token and its K best ids, each the best after the
  // previous one.
  ValId prev{INFINITY, -1};
  auto best_after_prev = [&](int tid) {
    ValId best{-INFINITY, INT32_MAX};
    for (int64_t i = tid; i < V; i += kSampleThreads) {
      const ValId c{raw[i], static_cast<int32_t>(i)};
      if (Before(prev, c) && Before(c, best)) best = c;
    }
    return best;
  };
  ValId best = SampleReduce(st.vi, &st.vi_out, best_after_prev, BestOf{}, run);
  const float mx = best.v;
  const double lse = mx + log(SampleReduce(
                              st.d, &st.d_out,
                              [&](int tid) {
                                double s = 0;
                                for (int64_t i = tid; i < V; i += kSampleThreads)
                                  s += exp(static_cast<double>(raw[i]) - mx);
                                return s;
                              },
                              SumOfD{}, run));
  run([&](int tid) {
    if (tid != 0) return;
    *token_out = token;
    lp[0] = static_cast<float>(raw[token] - lse);
  });
  for (int64_t j = 0; j < K; ++j) {
    if (j > 0) {
      prev = best;
      best = SampleReduce(st.vi, &st.vi_out, best_after_prev, BestOf{}, run);
    }
    run([&](int tid) {
      if (tid != 0) return;
      top_ids[j] = best.id;
      lp[1 + j] = static_cast<float>(best.v - lse);
    });
  }
}

}  // namespace lucid::cuda
