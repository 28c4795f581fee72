// The outer-product GEMM for many tokens (see GemmRows in cpu_fast_kernels.h, kernels and panel
// layouts in cpu_fast_gemm.h).
//
// x is packed once per PackedX (PackX -> GemmPackX) into panels of mr tokens, [K][mr] each, so
// any k block of a panel is contiguous; such an x has no f32 rows. Per GemmRows call (one
// thread), for each k block of kKc columns (whole scale blocks for packed formats) and each block
// of kNb weight rows: the rows are decoded and transposed into w panels of nr rows, [kc][nr]
// (bf16, FP8-block and NVFP4 decoded in registers inside the transpose with the arithmetic of the
// vector DequantSpan, so the values equal DequantizeRowSpan's; anything else through DequantSpan
// and a row buffer); then the micro-kernel runs over every (x panel, w panel) pair and adds the k
// block into y. Two variants of the panels: bf16 pairs (vdpbf16ps levels, GemmPairs) and, for
// NVFP4 against bf16 activations at AVX2, int16 x per 16-column group with a power-of-two scale
// against 2 * e2m1 int16 weights (GemmQ16, exact int32 sums per group). Each weight element is
// decoded once per call. While one block is multiplied, the next block's stored bytes are
// prefetched into L2, a slice per x panel (rows are short runs the hardware prefetcher does not
// follow).
#include "backends/cpu/cpu_fast_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/dtype.h"
#include "core/parallel.h"
#include "core/status.h"

namespace lucid::fast {
namespace {

// Blocking (lucid_gemm_bench on the dev box, Zen 5: 48 KB L1, 1 MB L2; kc 256..1024 and 64..384
// rows measured within a few percent of each other): an x panel's k block (kc x 12 floats, 36 KB)
// stays in L1 while the block's w panels (kc x 32 floats each, 384 KB for 128 rows) come from L2.
constexpr int64_t kKc = 768;  // k columns per block (a multiple of 128: whole FP8 scale blocks)
constexpr int64_t kNb = 128;  // weight rows per L2 block

const GemmKernels* KernelsFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2:
      return Avx2GemmKernels();
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx512Bf16:
      return Avx512GemmKernels();
    default:
      return nullptr;
  }
}

// A 64-byte aligned scratch buffer of at least n floats, per thread and purpose (reused).
float* Scratch(std::vector<float>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n + 16)) buf.resize(n + 16);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// GCC's dead-code elimination drops loops whose only effect is __builtin_prefetch (not a side
// effect to it), so on x86 the prefetch is an asm statement.
template <int kLocality>
inline void Prefetch(const char* p) {
#if defined(__x86_64__) || defined(__i386__)
  if constexpr (kLocality >= 3)
    asm volatile("prefetcht0 %0" ::"m"(*p));
  else if constexpr (kLocality == 2)
    asm volatile("prefetcht1 %0" ::"m"(*p));
  else
    asm volatile("prefetcht2 %0" ::"m"(*p));
#else
  __builtin_prefetch(p, 0, kLocality);
#endif
}

template <int kLocality>
void PrefetchBytes(const void* base, int64_t b0, int64_t b1) {
  const char* p = static_cast<const char*>(base);
  for (int64_t b = b0 & ~int64_t{63}; b < b1; b += 64) Prefetch<kLocality>(p + b);
}

// Prefetches the stored bytes (payload, and NVFP4 group scales) of view rows [r0, r1), columns
// [k0, k1).
template <int kLocality>
void PrefetchRows(const Weight& w, int64_t r0, int64_t r1, int64_t k0, int64_t k1) {
  const int64_t K = w.cols;
  for (int64_t row = w.row_begin + r0; row < w.row_begin + r1; ++row) {
    switch (w.format) {
      case WeightFormat::kF32:
        PrefetchBytes<kLocality>(w.data.raw(), (row * K + k0) * 4, (row * K + k1) * 4);
        break;
      case WeightFormat::kBF16:
        PrefetchBytes<kLocality>(w.data.raw(), (row * K + k0) * 2, (row * K + k1) * 2);
        break;
      case WeightFormat::kFp8Block:
        PrefetchBytes<kLocality>(w.data.raw(), row * K + k0, row * K + k1);
        break;
      case WeightFormat::kNvfp4: {
        const int64_t rb = w.data.size(1), sb = w.scale.size(1);
        PrefetchBytes<kLocality>(w.data.raw(), row * rb + k0 / 2, row * rb + (k1 + 1) / 2);
        PrefetchBytes<kLocality>(w.scale.raw(), row * sb + k0 / 16, row * sb + (k1 + 15) / 16);
        break;
      }
      case WeightFormat::kGgml: {  // the bytes of the blocks that hold columns [k0, k1)
        const int64_t rb = w.data.size(1);
        PrefetchBytes<kLocality>(w.data.raw(), row * rb + k0 * rb / K, row * rb + k1 * rb / K);
        break;
      }
    }
  }
}

const float* E4m3Table() {
  static const std::vector<float> t = [] {
    std::vector<float> a(256);
    for (int i = 0; i < 256; ++i) a[i] = F8E4M3ToF32(static_cast<uint8_t>(i));
    return a;
  }();
  return t.data();
}

// The scale of view row r's FP8 block holding column c (as DequantizeRowSpan finds it).
float Fp8Scale(const Weight& w, int64_t r, int64_t c) {
  const int64_t i = ((w.row_begin + r) / w.block_rows) * w.scale.size(1) + c / w.block_cols;
  if (w.scale.dtype() == DType::kUE8M0) return Ue8m0ToF32(w.scale.data<const uint8_t>()[i]);
  return w.scale.data<const float>()[i];
}

// Panel buffers are pooled: a prefill makes and drops tens of MB of them per layer (each
// expert's x and hidden rows), and fresh pages cost a fault and a clear every time. A buffer
// keeps its capacity in the 64 bytes before it; the pool holds at most kPoolBytes.
constexpr size_t kPoolBytes = size_t{64} << 20;
struct PanelPool {
  std::mutex mu;
  std::vector<float*> free;
  size_t bytes = 0;
};
PanelPool& Pool() {
  static PanelPool* pool = new PanelPool;  // never destroyed: buffers may be returned at exit
  return *pool;
}
size_t& Capacity(float* p) { return *reinterpret_cast<size_t*>(p - 16); }

float* PoolAlloc(int64_t n) {
  PanelPool& pool = Pool();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    float* best = nullptr;
    size_t at = 0;
    for (size_t i = 0; i < pool.free.size(); ++i) {  // the smallest that fits, at most 2n
      const size_t cap = Capacity(pool.free[i]);
      if (cap >= static_cast<size_t>(n) && cap <= 2 * static_cast<size_t>(n) &&
          (!best || cap < Capacity(best)))
        best = pool.free[i], at = i;
    }
    if (best) {
      pool.free.erase(pool.free.begin() + static_cast<std::ptrdiff_t>(at));
      pool.bytes -= Capacity(best) * sizeof(float);
      return best;
    }
  }
  const size_t bytes = ((n + 16) * sizeof(float) + 63) / 64 * 64;  // aligned_alloc's rule
  float* base = static_cast<float*>(std::aligned_alloc(64, bytes));
  LUCID_CHECK(base != nullptr, "out of memory for GEMM panels");
  Capacity(base + 16) = static_cast<size_t>(n);
  return base + 16;
}

void PoolFree(float* p) {
  if (!p) return;
  PanelPool& pool = Pool();
  const size_t bytes = Capacity(p) * sizeof(float);
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (pool.bytes + bytes <= kPoolBytes) {
      pool.free.push_back(p);
      pool.bytes += bytes;
      return;
    }
  }
  std::free(p - 16);
}

}  // namespace

// NVFP4 on int16 x (AVX2, bf16 activations) against the tiles, lucid_gemm_bench BM_Rows isa:2
// fmt:3 act:1, N 512 x K 2048, one thread on the dev box's AVX2 path (GFLOP/s, medians of 3): at
// 4 tokens 43.3 vs 45.7, at 8 58.3 vs 53.9, at 16 78.1 vs 46.4, at 32 87.2 vs 62.7.
constexpr int64_t kQ16MinTokens = 8;

bool GemmQ16(const KernelTable& kt, WeightFormat f, FastActivations act) {
  const GemmKernels* g = KernelsFor(kt.isa);
  return act == FastActivations::kBf16 && f == WeightFormat::kNvfp4 && g && g->tile_q16 &&
         !GemmPairs(kt, f, act);
}

// Measured on the dev box (lucid_gemm_bench BM_GemmLinear, 2 threads, 6144 x 2048, GEMM against
// the dot-product tiles at 16-128 tokens): NVFP4 GEMM is ahead from 32 tokens (341 vs 279
// GFLOP/s), FP8-block from 32 (330 vs 313; 372 vs 315 at 48); bf16 (4 x 6 dp tiles) from 80 (at
// 64 the tiles lead 408 to 372, at 96 the GEMM 416 to 393). f32 weights, which the tiles read in
// place while the GEMM transposes them, from 64.
int64_t GemmMinTokens(const KernelTable& kt, WeightFormat f, FastActivations act) {
  if (KernelsFor(kt.isa) == nullptr) return 0;
  // Packed weights against bf16 activations alone (the hi-only tiles, twice the split tiles'
  // rate): the tiles up to 63 tokens, the bf16-pair GEMM from 64. Against the GEMM from 32: 1g
  // NVFP4 batch 32 56.5 -> 44.4 ms a step, 1g FP8 59.0 -> 50.8 ms. Against the tiles up to 127
  // (1g prefill, whose experts get ~64 tokens each): experts 368-428 -> 436-487 GFLOP/s. bf16
  // weights (tiles up to 79 tokens either way): 64-255 within noise.
  if (act == FastActivations::kBf16 && kt.bf16_split &&
      (f == WeightFormat::kFp8Block || f == WeightFormat::kNvfp4))
    return 2 * kGemmMinTokens;
  if (GemmQ16(kt, f, act)) return kQ16MinTokens;
  // AVX2 (lucid_gemm_bench BM_Rows isa:2 on an AMD EPYC, 1 thread, GEMM against the dot-product
  // tiles in GFLOP/s): bf16 weights at 32 tokens 62-66 vs 66-75, at 64 76-79 vs 67-73; packed
  // formats ahead from 16 (NVFP4 49 vs 31), f32 from 64 (76 vs 63).
  switch (f) {
    case WeightFormat::kF32:
      return 2 * kGemmMinTokens;
    case WeightFormat::kBF16:
      return kt.isa == CpuIsa::kAvx2 ? kGemmMinTokens + kGemmMinTokens / 2
                                     : 2 * kGemmMinTokens + kGemmMinTokens / 2;
    case WeightFormat::kFp8Block:
    case WeightFormat::kNvfp4:
    case WeightFormat::kGgml:  // decoded by DequantSpan (kKc is a multiple of every block size)
      return kGemmMinTokens;
  }
  return 0;
}

bool GemmPairs(const KernelTable& kt, WeightFormat f, FastActivations act) {
  const GemmKernels* g = KernelsFor(kt.isa);
  return act == FastActivations::kBf16 && kt.bf16_split && g && g->tile_pairs &&
         (f == WeightFormat::kBF16 || f == WeightFormat::kNvfp4 || f == WeightFormat::kFp8Block);
}

void GemmPanelsFree::operator()(float* p) const { PoolFree(p); }

bool GemmRoundsX(const KernelTable& kt) {
  const GemmKernels* g = KernelsFor(kt.isa);
  return g && g->pack_x_bf16;
}

namespace {

// 32-bit words of one x panel of `mode` (mr tokens, K columns).
int64_t XPanelWords(GemmX mode, int64_t mr, int64_t K) {
  switch (mode) {
    case GemmX::kBf16Pairs:
      return (K + 1) / 2 * mr;
    case GemmX::kQ16:
      return (K + 15) / 16 * kQ16XGroupFloats;
    default:
      return K * mr;
  }
}

}  // namespace

bool GemmPackX(const KernelTable& kt, const float* x, int64_t ldx, GemmX mode, PackedX* p) {
  const bool pairs = mode == GemmX::kBf16Pairs, q16 = mode == GemmX::kQ16;
  const GemmKernels* g = KernelsFor(kt.isa);
  LUCID_CHECK(!q16 || (g->pack_x_q16 && g->mr == kQ16Mr), "GemmPackX: no int16 x at this level");
  const int64_t T = p->T, K = p->K, mr = g->mr, panels = (T + mr - 1) / mr;
  const int64_t words = XPanelWords(mode, mr, K);
  p->gemm_mr = mr;
  p->gemm_pairs = pairs;
  p->gemm_q16 = q16;
  p->gemm_panels.reset(PoolAlloc(panels * words));
  float* out = p->gemm_panels.get();
  std::atomic<bool> ok{true};
  ParallelFor(panels, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, K)),
              [&](int64_t q0, int64_t q1) {
                for (int64_t q = q0; q < q1; ++q) {
                  const int m = static_cast<int>(std::min(mr, T - q * mr));
                  float* dst = out + q * words;
                  if (pairs)
                    g->pack_x_pairs(x + q * mr * ldx, ldx, m, K, reinterpret_cast<uint32_t*>(dst));
                  else if (q16 && !g->pack_x_q16(x + q * mr * ldx, ldx, m, K, dst))
                    ok.store(false, std::memory_order_relaxed);
                  else if (mode == GemmX::kRoundedToBf16)
                    g->pack_x_bf16(x + q * mr * ldx, ldx, m, K, dst);
                  else if (mode == GemmX::kF32)
                    g->pack_x(x + q * mr * ldx, ldx, m, K, dst);
                }
              });
  if (!ok.load()) {
    p->gemm_panels.reset();
    p->gemm_q16 = false;
    return false;
  }
  return true;
}

namespace {

// One GemmRows call's plan: the weight's format and where its stored rows are, the blocking, and
// pointers into this thread's scratch buffers (valid until the thread's next call).
struct GemmCall {
  const KernelTable* kt;
  const GemmKernels* g;
  const Weight* w;
  int64_t K, mr, nr;
  int64_t xwords;  // 32-bit words of one of PackX's x panels
  int64_t kc;      // k columns per block (packed: whole scale blocks)
  int64_t nb;      // weight rows per L2 block
  bool pairs;      // bf16-pair panels and tile
  bool q16;        // NVFP4 against int16 x: the Q16 panels and tile
  // Where the stored rows are, by format: f32 and bf16 in place; FP8 and NVFP4 decoded inside
  // the transpose (fp8 / nvfp4); anything else through DequantSpan into `rows`.
  const float* wf32;
  const uint16_t* wbf16;
  bool fp8, nvfp4;
  const uint8_t* q8;
  int64_t qstride;  // bytes per stored packed row
  int64_t nscale;   // scale slots per panel row and k block
  int64_t nsub;     // FP8 pairs: scale blocks per k block (one tile call each); else 1
  float s2;         // NVFP4 tensor scale
  float* wp;        // the L2 block's w panels
  float* rows;      // decoded rows of one panel (rstride floats each)
  int64_t rstride;
  float* sbuf;         // scales of one panel's rows
  const float* zeros;  // what rows past the last weight row point at
  // bf16 pairs: the tile's per-output multipliers. FP8: each w panel's rows' block scales per
  // scale block of the k block ([panel][block][nr]); else one constant row (NVFP4's s2, or 1).
  float* lane_scales;
};

GemmCall PlanGemm(const KernelTable& kt, const GemmKernels* g, const Weight& w, GemmX xmode,
                  int64_t xpanels, int64_t rows_in_call, float** xp) {
  GemmCall c{};
  c.kt = &kt;
  c.g = g;
  c.w = &w;
  c.K = w.cols;
  c.mr = g->mr;
  c.nr = g->nr;
  c.pairs = xmode == GemmX::kBf16Pairs;
  c.q16 = xmode == GemmX::kQ16;
  c.xwords = XPanelWords(xmode, c.mr, c.K);
  const bool packed = w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kNvfp4;
  const bool pairs = c.pairs;
  // Packed k blocks start at scale-block boundaries (DequantSpan's rule).
  c.kc = packed ? std::max<int64_t>(1, kKc / w.block_cols) * w.block_cols : kKc;
  c.nb = std::max<int64_t>(c.nr, kNb / c.nr * c.nr);
  const int64_t wpanels = (std::min(c.nb, rows_in_call) + c.nr - 1) / c.nr;
  thread_local std::vector<float> xbuf, wbuf, rbuf, sbuf, zeros, lane_scales;
  if (xp) *xp = Scratch(xbuf, xpanels * c.mr * c.kc);
  c.wp = Scratch(wbuf, wpanels * c.nr * c.kc);
  c.rstride = (c.kc + 16 + 15) / 16 * 16;  // NVFP4 writes whole 16-column groups
  c.rows = Scratch(rbuf, c.nr * c.rstride);
  c.wf32 =
      w.format == WeightFormat::kF32 ? w.data.data<const float>() + w.row_begin * c.K : nullptr;
  c.wbf16 =
      w.format == WeightFormat::kBF16 ? w.data.data<const uint16_t>() + w.row_begin * c.K : nullptr;
  c.fp8 = w.format == WeightFormat::kFp8Block && w.block_cols % 16 == 0 && w.block_rows > 0 &&
          g->pack_w_fp8;
  c.nvfp4 = w.format == WeightFormat::kNvfp4 && w.block_cols == 16 && g->pack_w_nvfp4;
  c.q8 = c.fp8 || c.nvfp4 ? w.data.data<const uint8_t>() : nullptr;
  c.qstride = c.nvfp4 ? w.data.size(1) : c.K;
  c.nscale = c.fp8 ? (c.kc + w.block_cols - 1) / w.block_cols : c.nvfp4 ? c.kc / 16 + 1 : 0;
  if (sbuf.size() < static_cast<size_t>(2 * c.nr * c.nscale)) sbuf.resize(2 * c.nr * c.nscale);
  c.sbuf = sbuf.data();
  if (zeros.size() < static_cast<size_t>(c.kc + 16)) zeros.assign(c.kc + 16, 0.0f);
  c.zeros = zeros.data();
  c.s2 = c.nvfp4 ? *w.scale2.data<const float>() : 0.0f;
  c.nsub = pairs && c.fp8 ? (c.kc + w.block_cols - 1) / w.block_cols : 1;
  if (pairs) {
    lane_scales.resize(std::max<int64_t>(wpanels * c.nsub * c.nr, c.nr));
    if (!c.fp8) std::fill(lane_scales.begin(), lane_scales.begin() + c.nr, c.nvfp4 ? c.s2 : 1.0f);
  }
  c.lane_scales = lane_scales.data();
  return c;
}

// The x panels of tokens [t0, t1), columns [k0, k0 + kk), into xp (when PackX's panels do not
// line up with t0).
void PackXBlock(const GemmCall& c, const PackedX& x, int64_t t0, int64_t t1, int64_t k0, int64_t kk,
                float* xp) {
  const int64_t mr = c.mr, xpanels = (t1 - t0 + mr - 1) / mr;
  const int64_t k0p = c.pairs ? k0 / 2 : k0, kkp = c.pairs ? (kk + 1) / 2 : kk;
  for (int64_t q = 0; q < xpanels; ++q) {
    const int64_t t = t0 + q * mr, m = std::min(mr, t1 - t);
    float* dst = xp + q * mr * c.kc;
    if (!x.f32.empty()) {
      const float* src = x.f32.data() + t * x.Kpad + k0;
      if (c.pairs)
        c.g->pack_x_pairs(src, x.Kpad, static_cast<int>(m), kk, reinterpret_cast<uint32_t*>(dst));
      else
        c.g->pack_x(src, x.Kpad, static_cast<int>(m), kk, dst);
      continue;
    }
    // t0 not on a panel boundary of PackX's panels: gather words (Linear's token split, rarely).
    const float* src = x.gemm_panels.get();
    const int64_t xmr = x.gemm_mr;
    if (c.q16) {  // a token's group: its 8 words of int16 and its scale
      const int64_t g0 = k0 / 16, groups = (kk + 15) / 16;
      for (int64_t gi = 0; gi < groups; ++gi) {
        float* dg = dst + gi * kQ16XGroupFloats;
        for (int64_t i = 0; i < mr; ++i) {
          const float* sg = src + (t + i) / xmr * c.xwords + (g0 + gi) * kQ16XGroupFloats;
          const int64_t r = (t + i) % xmr;
          for (int v = 0; v < 8; ++v) dg[8 * i + v] = i < m ? sg[8 * r + v] : 0.0f;
          dg[8 * mr + i] = i < m ? sg[8 * mr + r] : 0.0f;
        }
        for (int64_t i = mr; i < 8; ++i) dg[8 * mr + i] = 0.0f;
      }
      continue;
    }
    for (int64_t k = 0; k < kkp; ++k)
      for (int64_t i = 0; i < mr; ++i)
        dst[k * mr + i] =
            i < m ? src[(t + i) / xmr * c.xwords + (k0p + k) * xmr + (t + i) % xmr] : 0.0f;
  }
}

// Decodes and transposes w panel p of the L2 block starting at view row b0 (rows up to b1),
// columns [k0, k0 + kk), into c.wp; FP8 pairs also fill the panel's lane scales.
void PackWPanel(const GemmCall& c, int64_t b0, int64_t b1, int64_t p, int64_t k0, int64_t kk) {
  const Weight& w = *c.w;
  const int64_t nr = c.nr;
  const float* rp[64];
  const uint16_t* rp16[64];
  const uint8_t* rp8[64];
  const float* sp[64];
  for (int64_t j = 0; j < nr; ++j) {
    const int64_t n = b0 + p * nr + j;
    rp[j] = c.zeros;
    rp16[j] = reinterpret_cast<const uint16_t*>(c.zeros);
    rp8[j] = reinterpret_cast<const uint8_t*>(c.zeros);
    sp[j] = c.zeros;
    if (n >= b1) continue;
    const int64_t row = w.row_begin + n;
    float* sc = c.sbuf + 2 * j * c.nscale;
    if (c.wf32) {
      rp[j] = c.wf32 + n * c.K + k0;
    } else if (c.wbf16) {
      rp16[j] = c.wbf16 + n * c.K + k0;
    } else if (c.fp8) {
      rp8[j] = c.q8 + row * c.qstride + k0;
      for (int64_t b = 0; b * w.block_cols < kk; ++b) sc[b] = Fp8Scale(w, n, k0 + b * w.block_cols);
      sp[j] = sc;
    } else if (c.nvfp4) {
      rp8[j] = c.q8 + row * c.qstride + k0 / 2;
      const uint8_t* gsrc = w.scale.data<const uint8_t>() + row * w.scale.size(1) + k0 / 16;
      const float* e4m3 = E4m3Table();
      for (int64_t gi = 0; gi * 16 < kk; ++gi) sc[gi] = e4m3[gsrc[gi]];
      sp[j] = sc;
    } else {
      DequantSpan(*c.kt, w, n, k0, k0 + kk, c.rows + j * c.rstride);
      rp[j] = c.rows + j * c.rstride;
    }
  }
  float* panel = c.wp + p * nr * c.kc;
  uint32_t* panel_pairs = reinterpret_cast<uint32_t*>(panel);
  const GemmKernels& g = *c.g;
  if (c.q16) {
    g.pack_w_nvfp4_q16(rp8, sp, (kk + 15) / 16, panel);
  } else if (c.pairs && c.fp8) {
    g.pack_w_fp8_pairs(rp8, kk, panel_pairs);
    for (int64_t b = 0; b * w.block_cols < kk; ++b)
      for (int64_t j = 0; j < nr; ++j) c.lane_scales[(p * c.nsub + b) * nr + j] = sp[j][b];
  } else if (c.pairs && c.wbf16) {
    g.pack_w_bf16_pairs(rp16, kk, panel_pairs);
  } else if (c.pairs) {
    g.pack_w_nvfp4_pairs(rp8, sp, kk, panel_pairs);
  } else if (c.wbf16) {
    g.pack_w_bf16(rp16, kk, panel);
  } else if (c.fp8) {
    g.pack_w_fp8(rp8, sp, w.block_cols, kk, panel);
  } else if (c.nvfp4) {
    g.pack_w_nvfp4(rp8, sp, c.s2, kk, panel);
  } else {
    g.pack_w(rp, kk, panel);
  }
}

// The micro-kernel over x panel xq (m tokens) and w panel p (nn rows) for one k block, adding
// into y (storing when `add` is false).
void MultiplyPanels(const GemmCall& c, const float* xq, int64_t p, int64_t kk, float* y,
                    int64_t ldy, int m, int nn, bool add) {
  const float* wq = c.wp + p * c.nr * c.kc;
  if (c.q16) return c.g->tile_q16(xq, wq, (kk + 15) / 16, c.s2, y, ldy, m, nn, add);
  if (!c.pairs) return c.g->tile(xq, wq, kk, y, ldy, m, nn, add);
  const uint32_t* xw = reinterpret_cast<const uint32_t*>(xq);
  const uint32_t* ww = reinterpret_cast<const uint32_t*>(wq);
  if (!c.fp8) return c.g->tile_pairs(xw, ww, (kk + 1) / 2, y, ldy, m, nn, add, c.lane_scales);
  // One call per scale block (block_cols even: a block starts on a pair).
  const int64_t bc = c.w->block_cols;
  for (int64_t b = 0, c0 = 0; c0 < kk; ++b, c0 += bc)
    c.g->tile_pairs(xw + c0 / 2 * c.mr, ww + c0 / 2 * c.nr, (std::min(bc, kk - c0) + 1) / 2, y, ldy,
                    m, nn, add || b > 0, &c.lane_scales[(p * c.nsub + b) * c.nr]);
}

}  // namespace

bool GemmRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
              int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const GemmKernels* g = KernelsFor(kt.isa);
  const FastActivations act = x.hi_only ? FastActivations::kBf16 : FastActivations::kF32;
  const int64_t min_tokens = GemmMinTokens(kt, w.format, act);
  if (min_tokens == 0 || (t1 - t0 < min_tokens && !x.f32.empty())) return false;
  const bool packed = w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kNvfp4;
  if (packed && w.block_cols <= 0) {  // not a valid packed weight: the reference path's business
    LUCID_CHECK(!x.f32.empty(), "GemmRows: " + w.name + " has no scale block size");
    return false;
  }
  if (n1 <= n0 || t1 <= t0) return true;
  // bf16 pairs: x must come that way (PackX made it for this format) or as f32 rows.
  const bool pairs = GemmPairs(kt, w.format, act);
  LUCID_CHECK(!x.gemm_panels || x.gemm_pairs == pairs,
              "GemmRows: x was packed for another weight format than " + w.name + "'s");
  LUCID_CHECK(!pairs || w.format != WeightFormat::kNvfp4 || w.block_cols == 16,
              "GemmRows: " + w.name + " is NVFP4 without 16-column groups");
  LUCID_CHECK(
      !pairs || w.format != WeightFormat::kFp8Block || (w.block_cols % 16 == 0 && w.block_rows > 0),
      "GemmRows: FP8 weight " + w.name + " has scale blocks of " + std::to_string(w.block_cols) +
          " columns (bf16 pairs need a multiple of 16)");
  // int16 x (PackX made it for NVFP4 at this level; f32 rows or panels take the f32 path).
  const bool q16 = x.gemm_panels && x.gemm_q16;
  LUCID_CHECK(!q16 || (w.format == WeightFormat::kNvfp4 && w.block_cols == 16 && g->tile_q16),
              "GemmRows: x was packed as int16 for NVFP4, not for " + w.name);
  const GemmX xmode = q16 ? GemmX::kQ16 : pairs ? GemmX::kBf16Pairs : GemmX::kF32;
  const int64_t mr = g->mr, nr = g->nr, K = w.cols, xpanels = (t1 - t0 + mr - 1) / mr;
  // x panels: PackX's when they line up with t0, else packed here per k block.
  const bool prepacked = x.gemm_panels && x.gemm_mr == mr && t0 % mr == 0;
  float* xp = nullptr;
  const GemmCall c = PlanGemm(kt, g, w, xmode, xpanels, n1 - n0, prepacked ? nullptr : &xp);
  const int64_t kc = c.kc, nb = c.nb;
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    const int64_t kk = std::min(kc, K - k0);
    if (!prepacked) PackXBlock(c, x, t0, t1, k0, kk, xp);
    // Where block k0 starts in a panel: k0 is even (kc is), so a pair panel's block starts at
    // word k0 / 2; an int16 panel's at its group k0 / 16.
    const int64_t k0w = q16 ? k0 / 16 * kQ16XGroupFloats : pairs ? k0 / 2 * mr : k0 * mr;
    auto xpanel = [&](int64_t q) {
      return prepacked ? x.gemm_panels.get() + (t0 / mr + q) * c.xwords + k0w : xp + q * mr * kc;
    };
    for (int64_t b0 = n0; b0 < n1; b0 += nb) {
      const int64_t b1 = std::min(n1, b0 + nb), bp = (b1 - b0 + nr - 1) / nr;
      for (int64_t p = 0; p < bp; ++p) PackWPanel(c, b0, b1, p, k0, kk);
      // The next block: the next rows of this k block, or the first rows of the next k block;
      // after the last, the first k block of the rows after n1 (a guess: MoE experts walk their
      // matrices in consecutive row chunks, one call each).
      int64_t nk0 = b1 < n1 ? k0 : k0 + kc, nb0 = b1 < n1 ? b1 : n0;
      int64_t nb1 = std::min(n1, nb0 + nb);
      if (nk0 >= K) nk0 = 0, nb0 = n1, nb1 = std::min(w.rows, n1 + std::min(nb, n1 - n0));
      const int64_t nk1 = std::min(K, nk0 + kc);
      // Spread over every tile call of this block (asked for all at once, hundreds of prefetches
      // queue up and stall the thread).
      const int64_t calls = xpanels * bp, slice = (nb1 - nb0 + calls - 1) / calls;
      for (int64_t q = 0; q < xpanels; ++q) {
        const int64_t t = t0 + q * mr;
        const int m = static_cast<int>(std::min(mr, t1 - t));
        for (int64_t p = 0; p < bp; ++p) {
          const int64_t r = nb0 + (q * bp + p) * slice;
          if (r < nb1) PrefetchRows<2>(w, r, std::min(nb1, r + slice), nk0, nk1);
          const int64_t n = b0 + p * nr;
          MultiplyPanels(c, xpanel(q), p, kk, y + t * ldy + n, ldy, m,
                         static_cast<int>(std::min(nr, b1 - n)), k0 > 0);
        }
      }
    }
  }
  return true;
}

}  // namespace lucid::fast
