// The outer-product GEMM for many tokens (see GemmRows in cpu_fast_kernels.h, kernels and panel
// layouts in cpu_fast_gemm.h).
//
// Blocking, per call (one thread): for each k block of kKc columns (whole scale blocks for packed
// formats), every token's activations are packed once into x panels of mr tokens ([kc][mr]); then
// for each block of kNb weight rows, the rows are decoded (DequantSpan: bit for bit the reference
// dequantization) and transposed into w panels of nr rows ([kc][nr]), and the micro-kernel runs
// over every (x panel, w panel) pair, adding its k block into y. Each weight element is decoded
// once per call; the w block stays in L2 while every x panel passes over it.
#include "backends/cpu/cpu_fast_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"

namespace lucid::fast {
namespace {

int64_t EnvOr(const char* name, int64_t v) {
  const char* s = std::getenv(name);
  return s ? std::atoll(s) : v;
}
const int64_t kKc = EnvOr("LUCID_GEMM_KC", 256);  // k columns per block
const int64_t kNb = EnvOr("LUCID_GEMM_NB", 192);  // weight rows per L2 block
const int64_t kOrder = EnvOr("LUCID_GEMM_ORDER", 0);
const int64_t kAhead = EnvOr("LUCID_GEMM_AHEAD", 4);

const GemmKernels* KernelsFor(CpuIsa isa) {
  return isa == CpuIsa::kAvx512 || isa == CpuIsa::kAvx512Bf16 ? Avx512GemmKernels() : nullptr;
}

// A 64-byte aligned scratch buffer of at least n floats, per thread and purpose (reused).
float* Scratch(std::vector<float>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n + 16)) buf.resize(n + 16);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// Appends the cache lines holding view row n, columns [k0, k1), as stored (payload and scales).
void AddRowLines(const Weight& w, int64_t n, int64_t k0, int64_t k1,
                 std::vector<const char*>* lines) {
  const int64_t row = w.row_begin + n;
  auto add = [&](const void* base, int64_t b0, int64_t b1) {
    const char* p = static_cast<const char*>(base);
    for (int64_t b = b0 & ~int64_t{63}; b < b1; b += 64) lines->push_back(p + b);
  };
  const int64_t K = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      return add(w.data.raw(), (row * K + k0) * 4, (row * K + k1) * 4);
    case WeightFormat::kBF16:
      return add(w.data.raw(), (row * K + k0) * 2, (row * K + k1) * 2);
    case WeightFormat::kFp8Block:
      return add(w.data.raw(), row * K + k0, row * K + k1);
    case WeightFormat::kNvfp4: {
      const int64_t rb = w.data.size(1), sb = w.scale.size(1);
      add(w.data.raw(), row * rb + k0 / 2, row * rb + (k1 + 1) / 2);
      return add(w.scale.raw(), row * sb + k0 / 16, row * sb + (k1 + 15) / 16);
    }
  }
}

}  // namespace

bool GemmSupports(const KernelTable& kt, WeightFormat f) {
  return KernelsFor(kt.isa) != nullptr &&
         (f == WeightFormat::kF32 || f == WeightFormat::kBF16 || f == WeightFormat::kFp8Block ||
          f == WeightFormat::kNvfp4);
}

bool GemmRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
              int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const GemmKernels* g = KernelsFor(kt.isa);
  if (!GemmSupports(kt, w.format)) return false;
  const bool packed = w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kNvfp4;
  if (packed && w.block_cols <= 0) return false;
  if (n1 <= n0 || t1 <= t0) return true;
  const int64_t K = w.cols, mr = g->mr, nr = g->nr;
  // Packed k blocks start at scale-block boundaries (DequantSpan's rule).
  const int64_t kc = packed ? std::max<int64_t>(1, kKc / w.block_cols) * w.block_cols : kKc;
  const int64_t M = t1 - t0, xpanels = (M + mr - 1) / mr;
  const int64_t nb = std::max<int64_t>(nr, kNb / nr * nr);
  const int64_t wpanels = (std::min(nb, n1 - n0) + nr - 1) / nr;
  thread_local std::vector<float> xbuf, wbuf, rbuf;
  float* xp = Scratch(xbuf, xpanels * mr * kc);
  float* wp = Scratch(wbuf, wpanels * nr * kc);
  // Decoded rows of one w panel before the transpose (NVFP4 writes whole 16-column groups).
  const int64_t rstride = (kc + 16 + 15) / 16 * 16;
  float* rows = Scratch(rbuf, nr * rstride);
  const float* rp[64];
  const uint16_t* rp16[64];
  const float* wf32 =
      w.format == WeightFormat::kF32 ? w.data.data<const float>() + w.row_begin * K : nullptr;
  const uint16_t* bf16 =
      w.format == WeightFormat::kBF16 ? w.data.data<const uint16_t>() + w.row_begin * K : nullptr;
  thread_local std::vector<const char*> lines;
  // While one weight block is multiplied, the next one's stored bytes are prefetched into L2, a
  // slice per x panel (the rows are short runs the hardware prefetcher does not follow well).
  thread_local std::vector<const char*> next;
  auto plan_next = [&](int64_t k0, int64_t b0) {
    next.clear();
    if (b0 + nb >= n1)
      k0 += kc, b0 = n0;
    else
      b0 += nb;
    if (k0 >= K) return;
    const int64_t k1 = std::min(K, k0 + kc);
    for (int64_t n = b0; n < std::min(n1, b0 + nb); ++n) AddRowLines(w, n, k0, k1, &next);
  };
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    const int64_t kk = std::min(kc, K - k0);
    for (int64_t q = 0; q < xpanels; ++q) {
      const int64_t t = t0 + q * mr;
      g->pack_x(x.f32.data() + t * x.Kpad + k0, x.Kpad, static_cast<int>(std::min(mr, t1 - t)), kk,
                xp + q * mr * kc);
    }
    for (int64_t b0 = n0; b0 < n1; b0 += nb) {
      const int64_t b1 = std::min(n1, b0 + nb), bp = (b1 - b0 + nr - 1) / nr;
      for (int64_t p = 0; p < bp; ++p) {
        for (int64_t j = 0; j < nr; ++j) {
          const int64_t n = b0 + p * nr + j;
          if (n + kAhead < b1) {  // a few rows ahead into L1 (they are in L2/L3 by now)
            lines.clear();
            AddRowLines(w, n + kAhead, k0, k0 + kk, &lines);
            for (const char* l : lines) __builtin_prefetch(l, 0, 3);
          }
          if (n >= b1) {
            rp[j] = nullptr;
          } else if (wf32) {
            rp[j] = wf32 + n * K + k0;
          } else if (bf16) {
            rp16[j] = bf16 + n * K + k0;
          } else {
            DequantSpan(kt, w, n, k0, k0 + kk, rows + j * rstride);
            rp[j] = rows + j * rstride;
          }
          if (n >= b1) rp16[j] = nullptr;
        }
        if (bf16)
          g->pack_w_bf16(rp16, kk, wp + p * nr * kc);
        else
          g->pack_w(rp, kk, wp + p * nr * kc);
      }
      auto tile = [&](int64_t q, int64_t p) {
        const int64_t t = t0 + q * mr, n = b0 + p * nr;
        g->tile(xp + q * mr * kc, wp + p * nr * kc, kk, y + t * ldy + n, ldy,
                static_cast<int>(std::min(mr, t1 - t)), static_cast<int>(std::min(nr, b1 - n)),
                k0 > 0);
      };
      plan_next(k0, b0);
      const size_t slice = (next.size() + xpanels - 1) / xpanels;
      if (kOrder == 0) {
        for (int64_t q = 0; q < xpanels; ++q) {
          for (size_t i = q * slice; i < std::min(next.size(), (q + 1) * slice); ++i)
            __builtin_prefetch(next[i], 0, 2);
          for (int64_t p = 0; p < bp; ++p) tile(q, p);
        }
      } else {
        for (int64_t p = 0; p < bp; ++p)
          for (int64_t q = 0; q < xpanels; ++q) tile(q, p);
      }
    }
  }
  return true;
}

}  // namespace lucid::fast
