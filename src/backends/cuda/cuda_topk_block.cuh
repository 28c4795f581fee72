// Top-k of one row of n scores by one block of kTopKThreads threads, in TopK's order (ops/ops.h:
// NaN first, then larger, ties to the lower index, -0 equal to +0), without sorting the row:
// 1. radix select: each score's rank key (TopKKey: a larger key ranks first) is histogrammed 8
//    bits at a time, most significant first, among the scores that share the bits chosen so far;
//    four passes find the key K of the k-th best and how many of the scores equal to K are taken
//    (the rest of the k are above it);
// 2. collect: each thread counts, in its contiguous segment of the row, the scores above K and
//    those equal to it; one thread turns the counts into bases; each thread then writes its
//    scores above K and its ties whose rank among the ties (index order) is under the number
//    taken, as (key << 32 | ~index) so that one unsigned order is TopK's;
// 3. a bitonic sort of those k words (padded with zeros to P, a power of two) into descending
//    order, and the indices written out.
// The work is O(n) per pass plus O(P log^2 P) for the sort, not a sort of the row. The phases are
// host functions too: TopKBlockPhases takes how to run a phase on every thread (the kernel: each
// thread its own, then __syncthreads; cuda_topk_test.cpp: every thread in turn on the CPU).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace lucid::cuda {

inline constexpr int kTopKThreads = 256;

// A larger key ranks first: every NaN 0xFFFFFFFF (above +inf, tied), -0 as +0, otherwise the
// float's order.
__host__ __device__ inline uint32_t TopKKey(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof(b));
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The sort word of score index i: larger words rank first.
__host__ __device__ inline uint64_t TopKWord(uint32_t key, int64_t i) {
  return (static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}

__host__ __device__ inline int32_t TopKIndexOf(uint64_t word) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(word));
}

// The smallest power of two >= k (the sort's length).
__host__ __device__ inline int64_t TopKSortLength(int64_t k) {
  int64_t p = 1;
  while (p < k) p *= 2;
  return p;
}

struct TopKBlockState {
  uint32_t hist[256];
  uint32_t prefix, mask, take;   // K's bits so far; which bits are chosen; ties to take
  uint32_t above[kTopKThreads];  // per thread: scores above K, then its first slot
  uint32_t ties[kTopKThreads];   // per thread: scores equal to K, then its first rank
  uint32_t n_above;
};

__host__ __device__ inline void TopKAtomicInc(uint32_t* p) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, 1u);
#else
  ++*p;
#endif
}

// out[0..k) = offset + the k best of s[0..n) in TopK's order, 0 < k <= n; buf holds P =
// TopKSortLength(k) words. run(f) runs f(tid) for every tid < kTopKThreads and returns when all
// have (a barrier).
template <typename Run>
__host__ __device__ void TopKBlockPhases(TopKBlockState& st, const float* s, int64_t n, int64_t k,
                                         int32_t offset, int32_t* out, uint64_t* buf, int64_t P,
                                         Run run) {
  run([&](int tid) {
    if (tid == 0) {
      st.prefix = 0;
      st.mask = 0;
      st.take = static_cast<uint32_t>(k);
    }
  });
  for (int shift = 24; shift >= 0; shift -= 8) {
    run([&](int tid) { st.hist[tid] = 0; });
    run([&](int tid) {
      for (int64_t i = tid; i < n; i += kTopKThreads) {
        const uint32_t key = TopKKey(s[i]);
        if ((key & st.mask) == st.prefix) TopKAtomicInc(&st.hist[(key >> shift) & 255u]);
      }
    });
    run([&](int tid) {
      if (tid != 0) return;
      uint32_t above = 0;  // scores sharing the prefix in buckets above b
      for (int b = 255; b >= 0; --b) {
        if (above + st.hist[b] >= st.take) {
          st.prefix |= static_cast<uint32_t>(b) << shift;
          st.take -= above;
          break;
        }
        above += st.hist[b];
      }
      st.mask |= 255u << shift;
    });
  }
  const int64_t seg = (n + kTopKThreads - 1) / kTopKThreads;
  run([&](int tid) {
    uint32_t above = 0, ties = 0;
    for (int64_t i = tid * seg; i < n && i < (tid + 1) * seg; ++i) {
      const uint32_t key = TopKKey(s[i]);
      above += key > st.prefix;
      ties += key == st.prefix;
    }
    st.above[tid] = above;
    st.ties[tid] = ties;
  });
  run([&](int tid) {
    if (tid != 0) return;
    uint32_t a = 0, t = 0;
    for (int i = 0; i < kTopKThreads; ++i) {
      const uint32_t na = st.above[i], nt = st.ties[i];
      st.above[i] = a;
      st.ties[i] = t;
      a += na;
      t += nt;
    }
    st.n_above = a;
  });
  run([&](int tid) {
    uint32_t a = st.above[tid], t = st.ties[tid];
    for (int64_t i = tid * seg; i < n && i < (tid + 1) * seg; ++i) {
      const uint32_t key = TopKKey(s[i]);
      if (key > st.prefix) {
        buf[a++] = TopKWord(key, i);
      } else if (key == st.prefix) {
        if (t < st.take) buf[st.n_above + t] = TopKWord(key, i);
        ++t;
      }
    }
    for (int64_t i = k + tid; i < P; i += kTopKThreads) buf[i] = 0;
  });
  for (int64_t size = 2; size <= P; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2)
      run([&](int tid) {
        for (int64_t i = tid; i < P; i += kTopKThreads) {
          const int64_t j = i ^ stride;
          if (j <= i) continue;
          const uint64_t a = buf[i], b = buf[j];
          if ((i & size) == 0 ? a < b : a > b) {  // descending runs where bit `size` is clear
            buf[i] = b;
            buf[j] = a;
          }
        }
      });
  run([&](int tid) {
    for (int64_t i = tid; i < k; i += kTopKThreads) out[i] = offset + TopKIndexOf(buf[i]);
  });
}

}  // namespace lucid::cuda
