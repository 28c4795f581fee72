// CpuFastOps: sparse MLA attention over the paged latent cache, the DSA indexer, top-k.
//
// MlaAttention work items are (query row t, a range of its attended tokens: the selected ones
// (sparse) or consecutive ones (dense, no index list)); with fewer query rows than threads a row
// is split into a multiple of the threads' ranges, else rows longer than an even share of the
// call's rows are split; a row split into several items has its partial (max, sum, unnormalized
// output) per head merged afterwards, flash-decoding style. An item is computed in ranges of at
// most kMaxItemRows rows, merged as it goes (online softmax), so the buffers of a call are bounded
// by the query rows and threads, never by the context.
// Inside an item: scores for all heads against blocks of 16 key rows (scores16: per group of 16
// heads, q transposed once per item so each k step is one vector of the heads' q times each row's
// value broadcast from memory; else register tiles of heads x rows over the 576-float
// [ckv | k_pe] row), an exact softmax per head over the item, then the
// latent output accumulated over the same blocks (weighted_rows_heads: 64 columns of the block's
// rows at a time, hot in L1 for all heads, 4 heads x 4 vectors of accumulators).
// Each selected row is read from memory once per query row, for all heads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/parallel.h"

namespace lucid {
namespace {

constexpr int64_t kRowBlock = 16;
// Rows per work item at most: the value pass re-reads the item's rows, which must still be in L2
// (288 f32 latent rows are 663 KB of a 1 MB L2), and rows stored in bf16 or fp8 are decoded into
// a buffer of this many rows; longer selections are split and merged like decode splits.
constexpr int64_t kMaxItemRows = 288;
// Partial slots kept between calls at most (MlaAttention).
constexpr int64_t kKeepScratchBytes = int64_t{64} << 20;

// s[h * ld + j] = q_h . row_j over K floats, for h < H and j < nb; q is [H, Kp] zero padded.
void ScoreBlock(const fast::KernelTable& kt, const float* q, int64_t Kp, int64_t H,
                const float* const* rows, int64_t nb, int64_t K, float* s, int64_t ld) {
  const fast::TileKernel& tk = kt.gemm_f32;
  if (!tk.fn) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < nb; ++j) s[h * ld + j] = kt.dot(q + h * Kp, rows[j], K);
    return;
  }
  const int64_t Kv = kt.vector_k(K);
  const void* xp[16];
  const void* wp[16];
  float out[64];
  for (int64_t j = 0; j < nb; j += tk.nr) {
    const int64_t nn = std::min<int64_t>(tk.nr, nb - j);
    for (int c = 0; c < tk.nr; ++c) wp[c] = rows[j + std::min<int64_t>(c, nn - 1)];
    for (int64_t h = 0; h < H; h += tk.mr) {
      const int64_t mm = std::min<int64_t>(tk.mr, H - h);
      for (int i = 0; i < tk.mr; ++i) xp[i] = q + (h + std::min<int64_t>(i, mm - 1)) * Kp;
      if (Kv > 0) {
        tk.fn(xp, nullptr, wp, 0, Kv, K, out);
      } else {
        std::fill(out, out + 64, 0.0f);
      }
      for (int64_t i = 0; i < mm; ++i)
        for (int64_t c = 0; c < nn; ++c) {
          float v = out[i * tk.nr + c];
          for (int64_t k = Kv; k < K; ++k) v += q[(h + i) * Kp + k] * rows[j + c][k];
          s[(h + i) * ld + j + c] = v;
        }
    }
  }
}

struct AttnItem {
  int64_t t, j0, j1;
  int64_t partial;  // index of its partial slot, -1 when the item covers the whole row
};

// Token u's KV row in f32: the cache itself for kF32, else decoded into scratch[row_floats] with
// the vector kernels (bit for bit PagedRows::ReadRow: e4m3 * block scale, bf16 widened).
const float* KvRow(const fast::KernelTable& kt, const PagedRows& kv, int64_t u, float* scratch) {
  if (kv.kind == KvRowKind::kF32) return kv.Row(u);
  const uint8_t* r = kv.RowBytes(u);
  if (kv.kind == KvRowKind::kBF16) {
    kt.widen_bf16(reinterpret_cast<const uint16_t*>(r), scratch, kv.row_floats);
    return scratch;
  }
  if (!kt.dequant_fp8) {
    kv.ReadRow(u, scratch);
    return scratch;
  }
  const int64_t ns = (kv.fp8_values + kv.fp8_block - 1) / kv.fp8_block;
  for (int64_t b = 0; b < ns; ++b) {
    float scale;
    std::memcpy(&scale, r + kv.fp8_values + 4 * b, 4);
    const int64_t b0 = b * kv.fp8_block;
    kt.dequant_fp8(r + b0, scale, scratch + b0, std::min(kv.fp8_block, kv.fp8_values - b0));
  }
  if (kv.row_floats > kv.fp8_values)
    kt.widen_bf16(reinterpret_cast<const uint16_t*>(r + kv.fp8_values + 4 * ns),
                  scratch + kv.fp8_values, kv.row_floats - kv.fp8_values);
  return scratch;
}

// Token u's row as stored in the cache.
const void* StoredRow(const PagedRows& kv, int64_t u) {
  return kv.kind == KvRowKind::kF32 ? static_cast<const void*>(kv.Row(u))
                                    : static_cast<const void*>(kv.RowBytes(u));
}

// The stored rows of the next block, tokens u(0), ..., u(n - 1) (n <= 16, the last repeated up to
// 16), for a kernel to ask for while it computes; null when there is no next block.
template <class TokenAt>
const void* const* NextBlock(const PagedRows& kv, int64_t n, TokenAt u, const void* (&rows)[16]) {
  if (n <= 0) return nullptr;
  for (int64_t r = 0; r < 16; ++r) rows[r] = StoredRow(kv, u(std::min<int64_t>(r, n - 1)));
  return rows;
}

// Asks for the stored rows of tokens [u0, u1) into L2 (they are read by the next block; a row of
// the latent cache is 36 cache lines in f32). Prefetches never fault.
void PrefetchKvRows(const PagedRows& kv, int64_t u0, int64_t u1) {
  const int64_t row_bytes = KvRowBytes(kv);
  for (int64_t u = u0; u < u1; ++u) {
    const char* r = kv.kind == KvRowKind::kF32 ? reinterpret_cast<const char*>(kv.Row(u))
                                               : reinterpret_cast<const char*>(kv.RowBytes(u));
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(r + b, 0, 2);
  }
}

// The tokens query row t attends to, from its j0-th: listed (sparse) or consecutive (dense).
struct RowTokens {
  const int32_t* sel = nullptr;  // null: dense, tokens first, first + 1, ...
  int64_t first = 0;
  RowTokens(const MlaAttentionArgs& a, int64_t t, int64_t j0) {
    if (a.selected) {
      sel = a.selected + t * a.selected_stride + j0;
    } else {
      first = (a.dense_begin ? a.dense_begin[t] : 0) + j0;
    }
  }
  int64_t operator[](int64_t j) const { return sel ? sel[j] : first + j; }
};

// The same for the tokens tok[j0, j1).
void PrefetchSelected(const PagedRows& kv, const RowTokens& tok, int64_t j0, int64_t j1) {
  if (!tok.sel) return PrefetchKvRows(kv, tok[j0], tok[j0] + std::max<int64_t>(0, j1 - j0));
  for (int64_t j = j0; j < j1; ++j) PrefetchKvRows(kv, tok[j], tok[j] + 1);
}

// The work items of one call: each query row's tokens, whole or in ranges (see the file
// comment); rows with nothing attended get zeros here. *partials: how many items need a slot,
// at most tokens * threads (fewer rows than threads) or tokens + 4 * threads.
std::vector<AttnItem> PlanAttnItems(const MlaAttentionArgs& a, int64_t threads, int64_t* partials) {
  const int64_t H = a.heads, R = a.latent_dim;
  std::vector<AttnItem> items;
  *partials = 0;
  int64_t total = 0;
  for (int64_t t = 0; t < a.tokens; ++t) total += a.selected_count[t];
  // Rows per item at most with enough query rows: kMaxItemRows, or an even share of four items
  // per thread when the call has more rows than that (a long dense context).
  const int64_t share = std::max(kMaxItemRows, (total + 4 * threads - 1) / (4 * threads));
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t n = a.selected_count[t];
    if (n == 0) {
      std::fill(a.out_latent + t * H * R, a.out_latent + (t + 1) * H * R, 0.0f);
      continue;
    }
    // The fewest ranges of at most `share` rows, of equal length (blocks of 16 but the
    // last): a selection a few rows past a multiple of 256 (a decode context of 513) makes no
    // range of a few rows, which costs an item's set-up and a partial like a whole one.
    int64_t pieces = (n + share - 1) / share;
    if (a.tokens < threads) {
      // A range per thread at least (not four: each item transposes the query and leaves a
      // partial to merge; BM_MlaDecode 512 rows 74-79 -> 65 us), of 64 rows or more, and a
      // multiple of the threads, so that they get the same rows.
      pieces = std::min(threads, (n + 63) / 64);
      if (pieces > 1) pieces = (pieces + threads - 1) / threads * threads;
    }
    const int64_t chunk = ((n + pieces - 1) / pieces + kRowBlock - 1) / kRowBlock * kRowBlock;
    if (chunk >= n) {
      items.push_back({t, 0, n, -1});
    } else {
      for (int64_t j = 0; j < n; j += chunk)
        items.push_back({t, j, std::min(n, j + chunk), (*partials)++});
    }
  }
  return items;
}

// One thread's buffers for its items.
struct AttnScratch {
  std::vector<float> q;   // [H, Kp]: [q_latent | q_rope | zeros] per head
  std::vector<float> qt;  // scores16: q transposed per group of 16 heads, [g][K][16]
  std::vector<float> s;   // [H, len] scores, then unnormalized probabilities
  std::vector<float> o;   // [H, R] unnormalized output
  std::vector<float> m, l;
  std::vector<float> acc_o, acc_m, acc_l;  // an item of several ranges: merged so far
};

// Scores of every head against the range's rows (w.j0 to w.j1, at most kMaxItemRows), into sc.s;
// rows that are not f32 are decoded once into dec (kMaxItemRows rows; null for f32 rows), where
// the value pass reads them.
void ScoreItem(const fast::KernelTable& kt, const MlaAttentionArgs& a, const AttnItem& w,
               AttnScratch& sc, float* dec) {
  const int64_t R = a.latent_dim, P = a.rope_dim, K = R + P, H = a.heads;
  const int64_t Kp = (K + fast::kPadK - 1) / fast::kPadK * fast::kPadK;
  const int64_t groups = (H + 15) / 16, len = w.j1 - w.j0, t = w.t;
  const RowTokens sel(a, t, w.j0);
  for (int64_t h = 0; h < H; ++h) {
    std::memcpy(&sc.q[h * Kp], a.q_latent + (t * H + h) * R, R * sizeof(float));
    std::memcpy(&sc.q[h * Kp + R], a.q_rope + (t * H + h) * P, P * sizeof(float));
    std::fill(sc.q.begin() + h * Kp + K, sc.q.begin() + (h + 1) * Kp, 0.0f);
  }
  if (kt.scores16) {
    const float* qh[16];
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t n = std::min<int64_t>(16, H - 16 * g);
      for (int64_t i = 0; i < n; ++i) qh[i] = &sc.q[(16 * g + i) * Kp];
      kt.transpose16(qh, n, K, &sc.qt[g * K * 16]);
    }
  }
  sc.s.resize(H * len);
  const float* rows[kRowBlock];
  for (int64_t j = 0; j < len; j += kRowBlock) {
    const int64_t nb = std::min(kRowBlock, len - j);
    // The next block's stored rows: asked for by scores16 as it computes (spread over the
    // FMAs; warm is null for the item's last block), else here in one burst.
    const int64_t nx = std::min(kRowBlock, std::max<int64_t>(0, len - j - kRowBlock));
    const void* next_rows[16];
    const void* const* next = NextBlock(
        a.kv, nx, [&](int64_t r) { return sel[j + kRowBlock + r]; }, next_rows);
    if (!kt.scores16) PrefetchSelected(a.kv, sel, j + kRowBlock, j + kRowBlock + nx);
    for (int64_t r = 0; r < nb; ++r)
      rows[r] = KvRow(kt, a.kv, sel[j + r], dec ? dec + (j + r) * a.kv.row_floats : nullptr);
    if (kt.scores16) {
      for (int64_t g = 0; g < groups; ++g)
        kt.scores16(&sc.qt[g * K * 16], K, rows, nb, std::min<int64_t>(16, H - 16 * g),
                    sc.s.data() + 16 * g * len + j, len, g == 0 ? next : nullptr, KvRowBytes(a.kv));
    } else {
      ScoreBlock(kt, sc.q.data(), Kp, H, rows, nb, K, sc.s.data() + j, len);
    }
  }
}

// One range of at most kMaxItemRows rows: scores, an exact softmax per head over the range, the
// unnormalized latent output, into sc.m, sc.l, sc.o.
void AttendRange(const fast::KernelTable& kt, const MlaAttentionArgs& a, const AttnItem& w,
                 AttnScratch& sc, float* dec) {
  const int64_t R = a.latent_dim, H = a.heads, len = w.j1 - w.j0, t = w.t;
  const RowTokens sel(a, t, w.j0);
  LUCID_CHECK(len <= kMaxItemRows, "MlaAttention: a range of more rows than its buffers hold");
  ScoreItem(kt, a, w, sc, dec);
  for (int64_t h = 0; h < H; ++h) {
    float* sh = sc.s.data() + h * len;
    kt.scale(a.scale, sh, len);
    sc.m[h] = *std::max_element(sh, sh + len);
    sc.l[h] = kt.exp_sum(sh, len, sc.m[h]);
  }
  std::fill(sc.o.begin(), sc.o.end(), 0.0f);
  const float* rows[kRowBlock];
  for (int64_t j = 0; j < len; j += kRowBlock) {
    const int64_t nb = std::min(kRowBlock, len - j);
    for (int64_t r = 0; r < nb; ++r)
      rows[r] =
          a.kv.kind == KvRowKind::kF32 ? a.kv.Row(sel[j + r]) : dec + (j + r) * a.kv.row_floats;
    if (kt.weighted_rows_heads) {
      kt.weighted_rows_heads(rows, sc.s.data() + j, len, H, nb, sc.o.data(), R, R);
    } else {
      for (int64_t h = 0; h < H; ++h)
        kt.weighted_rows(rows, sc.s.data() + h * len + j, nb, &sc.o[h * R], R);
    }
  }
}

// Folds the range just computed (sc.m, sc.l, sc.o) into the item's running result: with M the
// larger max, acc = acc * e^(acc_m - M) + range * e^(m - M), per head.
void MergeRange(const fast::KernelTable& kt, int64_t H, int64_t R, AttnScratch& sc) {
  for (int64_t h = 0; h < H; ++h) {
    const float M = std::max(sc.acc_m[h], sc.m[h]);
    const float fa = std::exp(sc.acc_m[h] - M), fr = std::exp(sc.m[h] - M);
    float* acc = &sc.acc_o[h * R];
    kt.scale(fa, acc, R);
    kt.axpy(fr, &sc.o[h * R], acc, R);
    sc.acc_l[h] = sc.acc_l[h] * fa + sc.l[h] * fr;
    sc.acc_m[h] = M;
  }
}

// One item: its rows in ranges of at most kMaxItemRows (merged as they come), then the latent
// output written to out_latent (whole rows) or to the item's partial slot
// [m (H) | l (H) | o (H * R)].
void AttendItem(const fast::KernelTable& kt, const MlaAttentionArgs& a, const AttnItem& w,
                AttnScratch& sc, float* dec, float* partial) {
  const int64_t R = a.latent_dim, H = a.heads, t = w.t;
  const int64_t ranges = (w.j1 - w.j0 + kMaxItemRows - 1) / kMaxItemRows;
  const int64_t step =
      ((w.j1 - w.j0 + ranges - 1) / ranges + kRowBlock - 1) / kRowBlock * kRowBlock;
  for (int64_t j = w.j0; j < w.j1; j += step) {
    AttendRange(kt, a, {t, j, std::min(w.j1, j + step), w.partial}, sc, dec);
    if (ranges == 1) break;
    if (j == w.j0) {
      sc.acc_o = sc.o;
      sc.acc_m = sc.m;
      sc.acc_l = sc.l;
    } else {
      MergeRange(kt, H, R, sc);
    }
  }
  if (ranges > 1) {
    std::swap(sc.o, sc.acc_o);
    std::swap(sc.m, sc.acc_m);
    std::swap(sc.l, sc.acc_l);
  }
  if (!partial) {
    for (int64_t h = 0; h < H; ++h) {
      float* dst = a.out_latent + (t * H + h) * R;
      std::memcpy(dst, &sc.o[h * R], R * sizeof(float));
      kt.scale(1.0f / sc.l[h], dst, R);
    }
  } else {
    std::copy(sc.m.begin(), sc.m.end(), partial);
    std::copy(sc.l.begin(), sc.l.end(), partial + H);
    std::copy(sc.o.begin(), sc.o.end(), partial + 2 * H);
  }
}

// Merges the split rows' partials: out = sum_i o_i e^(m_i - M) / sum_i l_i e^(m_i - M).
void MergePartials(const fast::KernelTable& kt, const MlaAttentionArgs& a,
                   const std::vector<AttnItem>& items, const float* part, int64_t slot) {
  const int64_t H = a.heads, R = a.latent_dim;
  for (size_t i = 0; i < items.size();) {
    if (items[i].partial < 0) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < items.size() && items[e].t == items[i].t) ++e;
    const int64_t t = items[i].t;
    for (int64_t h = 0; h < H; ++h) {
      float M = -INFINITY, L = 0.0f;
      for (size_t k = i; k < e; ++k) M = std::max(M, part[items[k].partial * slot + h]);
      float* dst = a.out_latent + (t * H + h) * R;
      std::fill(dst, dst + R, 0.0f);
      for (size_t k = i; k < e; ++k) {
        const float* p = &part[items[k].partial * slot];
        const float f = std::exp(p[h] - M);
        L += p[H + h] * f;
        kt.axpy(f, p + 2 * H + h * R, dst, R);
      }
      kt.scale(1.0f / L, dst, R);
    }
    i = e;
  }
}

}  // namespace

void CpuFastOps::MlaAttention(const MlaAttentionArgs& a) const {
  const fast::KernelTable& kt = fast::Kernels(isa_);
  const int64_t R = a.latent_dim, K = R + a.rope_dim, H = a.heads;
  const int64_t Kp = (K + fast::kPadK - 1) / fast::kPadK * fast::kPadK;
  int64_t partials = 0;
  const std::vector<AttnItem> items = PlanAttnItems(a, NumThreads(), &partials);
  const int64_t slot = 2 * H + H * R;
  // The split rows' partial slots and each thread's item buffers are kept by the thread between
  // calls: every slot and buffer is written whole before it is read, and a fresh vector per call
  // cost its allocation and zeroing (at batch 8, 24 slots of 33 KB: mapped and cleared anew,
  // ~100 us a call against ~570 us of attention). A call that needed more than
  // kKeepScratchBytes (a long prefill chunk) gives them back at the end.
  thread_local std::vector<float> part;
  const int64_t part_floats = partials * slot;
  if (static_cast<int64_t>(part.size()) < part_floats) part.resize(part_floats);
  float* const slots = part.data();  // by pointer: in the workers `part` names their own vector
  ParallelFor(static_cast<int64_t>(items.size()), 1, [&](int64_t ib, int64_t ie) {
    thread_local AttnScratch sc;
    sc.q.resize(H * Kp);
    sc.qt.resize(kt.scores16 ? (H + 15) / 16 * K * 16 : 0);
    sc.o.resize(H * R);
    sc.m.resize(H);
    sc.l.resize(H);
    // Stored rows that are not f32 are decoded once, in the scores pass, for the whole item
    // (<= kMaxItemRows rows, L2-sized), and the value pass reads them from here.
    thread_local std::vector<float> dec;
    if (a.kv.kind != KvRowKind::kF32 &&
        dec.size() < static_cast<size_t>(kMaxItemRows * a.kv.row_floats))
      dec.resize(kMaxItemRows * a.kv.row_floats);
    for (int64_t it = ib; it < ie; ++it) {
      const AttnItem& w = items[it];
      AttendItem(kt, a, w, sc, a.kv.kind == KvRowKind::kF32 ? nullptr : dec.data(),
                 w.partial < 0 ? nullptr : slots + w.partial * slot);
    }
  });
  if (partials > 0) MergePartials(kt, a, items, slots, slot);
  if (part_floats * static_cast<int64_t>(sizeof(float)) > kKeepScratchBytes) {
    part.clear();
    part.shrink_to_fit();
  }
}

void CpuFastOps::IndexerScores(const IndexerArgs& a) const {
  const fast::KernelTable& kt = fast::Kernels(isa_);
  const int64_t D = a.head_dim, T = a.tokens, H = a.heads;
  int64_t max_len = 0;
  for (int64_t t = 0; t < T; ++t) max_len = std::max(max_len, a.causal_len[t]);
  if (max_len == 0) return;
  const int64_t threads = NumThreads();
  int64_t range = (max_len + 4 * threads - 1) / (4 * threads);
  range = std::clamp<int64_t>((range + 15) / 16 * 16, 64, 2048);
  const int64_t nranges = (max_len + range - 1) / range;
  // With scores16 and indexer_sum16: each query's heads transposed once per group of 16
  // (qT[t][g][d][16]), then per block of 16 keys the heads' dot products come as in MlaAttention's
  // scores (heads in the lanes, each key's element broadcast: no transpose of the keys), and the
  // relu-weighted sum over heads is taken per key. The sums run in the same order as
  // indexer_block's (over d, then over heads), so the scores are the same bits.
  const int64_t groups = (H + 15) / 16;
  std::vector<float> qT;
  const bool lanes = kt.scores16 && kt.indexer_sum16;
  if (lanes) {
    qT.resize(T * groups * D * 16);
    ParallelFor(T, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t g = 0; g < groups; ++g) {
          const float* qh[16];
          const int64_t n = std::min<int64_t>(16, H - 16 * g);
          for (int64_t i = 0; i < n; ++i) qh[i] = a.q + (t * H + 16 * g + i) * D;
          kt.transpose16(qh, n, D, &qT[(t * groups + g) * D * 16]);
        }
    });
  }
  // A block of 16 keys is read once and scored against every query row that sees it.
  ParallelFor(nranges, 1, [&](int64_t rb, int64_t re) {
    std::vector<float> kt_buf(D * 16), dec(16 * a.keys.row_floats);
    const float* rows[16];
    float out[16], s[16 * 16];
    const int64_t end = std::min(max_len, re * range);
    for (int64_t u0 = rb * range; u0 < end; u0 += 16) {
      const int64_t nk = std::min<int64_t>(16, max_len - u0);
      // The next block's stored keys, asked for by the first kernel call as it computes (spread
      // over its FMAs, as in MlaAttention).
      const int64_t nx = std::min<int64_t>(16, std::max<int64_t>(0, end - u0 - 16));
      const void* next_rows[16];
      const void* const* next = NextBlock(
          a.keys, nx, [&](int64_t r) { return u0 + 16 + r; }, next_rows);
      for (int64_t kk = 0; kk < nk; ++kk)
        rows[kk] = KvRow(kt, a.keys, u0 + kk, &dec[kk * a.keys.row_floats]);
      if (!lanes) kt.transpose16(rows, nk, D, kt_buf.data());
      for (int64_t t = 0; t < T; ++t) {
        if (a.causal_len[t] <= u0) continue;
        const void* const* warm = next;  // the first query row's call asks for them
        next = nullptr;
        std::fill(out, out + 16, 0.0f);
        if (lanes) {
          for (int64_t g = 0; g < groups; ++g) {
            const int64_t n = std::min<int64_t>(16, H - 16 * g);
            kt.scores16(&qT[(t * groups + g) * D * 16], D, rows, nk, n, s, 16,
                        g == 0 ? warm : nullptr, KvRowBytes(a.keys));
            kt.indexer_sum16(s, 16, a.w + t * H + 16 * g, n, out);
          }
        } else {
          kt.indexer_block(a.q + t * H * D, a.w + t * H, H, D, kt_buf.data(), out, warm,
                           KvRowBytes(a.keys));
        }
        const int64_t valid = std::min(nk, a.causal_len[t] - u0);
        std::copy(out, out + valid, a.scores + t * a.score_stride + u0);
      }
    }
  });
}

// TopK: a radix select on order-preserving integer keys (larger score, larger key; -0 as +0, NaN
// above every number, as ops.h says). A histogram of the keys' top 11 bits finds the bucket holding
// the k-th largest; one branch-free pass keeps the (key, index) of every key in that bucket or
// above, in index order; nth_element on the bucket alone gives the exact threshold; the keys above
// it and the ties at it in index order are the k chosen, sorted by (score desc, index asc) as
// 64-bit (inverted key, index) pairs. BM_TopK, n = 32768, k = 2048: 56-58 us, against 617 us for
// the reference's partial_sort and ~250 us for the nth_element over all n used before.
namespace {
inline uint32_t OrderKey(float f) {
  if (f != f) return 0xFFFFFFFFu;
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
}  // namespace

void CpuFastOps::TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const {
  LUCID_CHECK(k <= n, "TopK k > n");
  if (k == 0) return;
  constexpr int kBits = 11, kShift = 32 - kBits;
  thread_local std::vector<uint32_t> keys, bucket;
  thread_local std::vector<uint64_t> cand;
  keys.resize(n);
  cand.resize(n);
  // Two histograms (even and odd i) halve the chains of increments to the same counter.
  std::vector<int32_t> hist(2 << kBits, 0);
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    keys[i] = OrderKey(scores[i]);
    keys[i + 1] = OrderKey(scores[i + 1]);
    ++hist[keys[i] >> kShift];
    ++hist[(1 << kBits) + (keys[i + 1] >> kShift)];
  }
  if (i < n) ++hist[(keys[i] = OrderKey(scores[i])) >> kShift];
  // The bucket b holding the k-th largest key: fewer than k keys lie in the buckets above it.
  int64_t above = 0;
  uint32_t b = (1u << kBits) - 1;
  for (;; --b) {
    const int64_t h = hist[b] + hist[(1 << kBits) + b];
    if (above + h >= k) break;
    above += h;
  }
  // Every key in bucket b or above, with its index, in index order (branch-free).
  int64_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    cand[m] = static_cast<uint64_t>(keys[j]) << 32 | static_cast<uint32_t>(j);
    m += (keys[j] >> kShift) >= b;
  }
  bucket.clear();
  for (int64_t j = 0; j < m; ++j)
    if ((cand[j] >> (32 + kShift)) == b) bucket.push_back(static_cast<uint32_t>(cand[j] >> 32));
  const int64_t r = k - above - 1;  // the threshold is the r-th largest (0-based) in the bucket
  std::nth_element(bucket.begin(), bucket.begin() + r, bucket.end(), std::greater<uint32_t>());
  const uint32_t thr = bucket[r];
  int64_t ties = k - above;
  for (uint32_t key : bucket) ties -= key > thr;  // ties at thr to take, in index order
  int64_t c = 0;
  for (int64_t j = 0; j < m; ++j) {
    const uint32_t key = static_cast<uint32_t>(cand[j] >> 32);
    if (key > thr || (key == thr && ties-- > 0))  // (inverted key, index): score desc, index asc
      cand[c++] = static_cast<uint64_t>(~key) << 32 | (cand[j] & 0xffffffffu);
  }
  std::sort(cand.begin(), cand.begin() + k);
  for (int64_t j = 0; j < k; ++j) out[j] = static_cast<int32_t>(cand[j] & 0xffffffffu);
}

}  // namespace lucid
