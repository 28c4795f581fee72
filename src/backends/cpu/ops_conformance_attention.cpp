// The ops conformance suite's cases for the ops over the paged KV cache and the routing: sparse
// MLA attention and the DSA indexer (KV rows stored as f32, bf16 and fp8_e4m3), TopK, MoeRoute
// and MoeExperts (every weight format). The contract is in ops_conformance.h.
#include <algorithm>
#include <random>

#include "backends/cpu/ops_conformance_internal.h"

namespace lucid::conformance {
namespace {

// A paged KV of `tokens` random rows: pages of `page` rows, the page table reversed so pages are
// not in order; stored as f32, bf16 or fp8 (models/kv_cache.h's layouts: `fp8_values` e4m3 values
// with one scale per `fp8_block`, the rest bf16). `plant` goes into row `at`, column `col` before
// the rows are encoded.
struct Paged {
  Tensor store;
  std::vector<uint8_t> bytes;
  std::vector<int32_t> table;
  PagedRows rows;
  Paged(int64_t tokens, int64_t row_floats, uint32_t seed, KvRowKind kind, int64_t fp8_values,
        int64_t fp8_block, int64_t page, Plant plant, int64_t at, int64_t col) {
    const int64_t pages = (tokens + page - 1) / page;
    store = RandomTensor({pages * page, row_floats}, seed);
    PlantAt(store, plant, at, col);
    for (int64_t p = 0; p < pages; ++p) table.push_back(static_cast<int32_t>(pages - 1 - p));
    rows.base = store.data<float>();
    rows.page_table = table;
    rows.page_size = page;
    rows.page_stride = page * row_floats;
    rows.row_floats = row_floats;
    if (kind == KvRowKind::kF32) return;
    rows.kind = kind;
    rows.fp8_values = fp8_values;
    rows.fp8_block = fp8_block;
    rows.row_bytes = KvRowBytes(rows);
    rows.page_bytes = page * rows.row_bytes;
    bytes.resize(pages * rows.page_bytes);
    for (int64_t i = 0; i < pages * page; ++i)
      EncodeKvRow(rows, store.data<float>() + i * row_floats, bytes.data() + i * rows.row_bytes);
    rows.bytes = bytes.data();
    rows.base = nullptr;
  }
};

constexpr KvRowKind kKvKinds[] = {KvRowKind::kF32, KvRowKind::kBF16, KvRowKind::kFp8};
const char* KvName(KvRowKind k) {
  return k == KvRowKind::kF32 ? "kv:f32" : k == KvRowKind::kBF16 ? "kv:bf16" : "kv:fp8_e4m3";
}

// Where a case plants its value: nowhere, the queries, or one KV row.
enum class Site { kNone, kQuery, kKv };
struct Planting {
  Plant plant;
  Site site;
};
constexpr Planting kPlantings[] = {{Plant::kNone, Site::kNone},
                                   {Plant::kNaN, Site::kQuery},
                                   {Plant::kInf, Site::kQuery},
                                   {Plant::kNaN, Site::kKv},
                                   {Plant::kInf, Site::kKv}};
const char* SiteName(Site s) {
  return s == Site::kNone ? "" : s == Site::kQuery ? " in q" : " in kv";
}

// Sparse (an index list per row), dense over every causal token, or dense over a range per row
// (dense_begin: a batched step's rows of several sequences in one pool).
enum class AttnMode { kSparse, kDense, kDenseRanges };

struct AttnCase {
  int64_t T, H, R, P, ctx, max_sel;
  bool exact;  // every row selects max_sel tokens / all its causal ones (else row 1 none)
  AttnMode mode = AttnMode::kSparse;
};

void OneAttention(Suite& s, const AttnCase& c, KvRowKind kind, Planting pl, uint32_t seed) {
  const bool sparse = c.mode == AttnMode::kSparse;
  std::vector<int32_t> sel(sparse ? c.T * c.max_sel : 0), count(c.T), begin(c.T, 0);
  std::mt19937 rng(seed);
  for (int64_t t = 0; t < c.T; ++t) {
    if (sparse) {
      std::vector<int32_t> all(c.ctx);
      for (int64_t u = 0; u < c.ctx; ++u) all[u] = static_cast<int32_t>(u);
      std::shuffle(all.begin(), all.end(), rng);
      count[t] = static_cast<int32_t>(c.exact  ? c.max_sel
                                      : t == 1 ? 0
                                               : std::min<int64_t>(c.max_sel, 1 + rng() % c.ctx));
      std::copy(all.begin(), all.begin() + count[t], sel.begin() + t * c.max_sel);
    } else if (c.mode == AttnMode::kDense) {  // row t is token ctx - T + t: its causal prefix
      count[t] = static_cast<int32_t>(!c.exact && t == 1 ? 0 : c.ctx - (c.T - 1 - t));
    } else {
      begin[t] = static_cast<int32_t>((t * 37) % (c.ctx / 2));
      count[t] = static_cast<int32_t>(!c.exact && t == 1 ? 0 : 1 + rng() % (c.ctx - begin[t]));
    }
  }
  // Planted into the first attended token of row 0, in the latent part (a key and a value).
  Paged kv(c.ctx, c.R + c.P, seed, kind, kind == KvRowKind::kFp8 ? c.R : 0, 128, 5,
           pl.site == Site::kKv ? pl.plant : Plant::kNone, sparse ? sel[0] : begin[0], c.R / 2);
  Tensor ql = RandomTensor({c.T * c.H, c.R}, seed + 1),
         qr = RandomTensor({c.T * c.H, c.P}, seed + 2);
  if (pl.site == Site::kQuery) {
    PlantAt(pl.plant == Plant::kNaN ? ql : qr, pl.plant, 1, 3);  // row 0, head 1
  }
  Tensor out = F32({c.T, c.H, c.R}), ref = F32({c.T, c.H, c.R});
  MlaAttentionArgs a;
  a.q_latent = ql.data<float>();
  a.q_rope = qr.data<float>();
  a.tokens = c.T;
  a.heads = c.H;
  a.latent_dim = c.R;
  a.rope_dim = c.P;
  a.scale = 0.3f;
  a.kv = kv.rows;
  a.selected = sparse ? sel.data() : nullptr;
  a.selected_stride = sparse ? c.max_sel : 0;
  a.selected_count = count.data();
  a.dense_begin = c.mode == AttnMode::kDenseRanges ? begin.data() : nullptr;
  a.out_latent = out.data<float>();
  s.cand().MlaAttention(a);
  a.out_latent = ref.data<float>();
  s.ref().MlaAttention(a);
  const std::string mode = sparse ? " sel=" + std::to_string(c.max_sel)
                           : c.mode == AttnMode::kDense
                               ? " dense ctx=" + std::to_string(c.ctx)
                               : " dense ranges ctx=" + std::to_string(c.ctx);
  s.Add("MlaAttention", KvName(kind),
        Shape3("T", c.T, "H", c.H, "R", c.R) + mode + SiteName(pl.site), pl.plant,
        out.data<float>(), ref.data<float>(), out.numel(), 1e-5);
}

void IndexerOne(Suite& s, int64_t T, int64_t H, int64_t ctx, int64_t page, KvRowKind kind,
                Planting pl) {
  const int64_t D = 33;
  // fp8 keys: one scale per key. Planted into key 10 (kv) or query row 0's head 1 (q), or, for
  // an infinity in q, into the head weights of the last row.
  Paged keys(ctx, D, 9, kind, D, D, page, pl.site == Site::kKv ? pl.plant : Plant::kNone, 10, 4);
  Tensor q = RandomTensor({T * H, D}, 10), w = RandomTensor({T, H}, 11);
  if (pl.site == Site::kQuery) {
    if (pl.plant == Plant::kNaN) {
      PlantAt(q, pl.plant, 1, 7);
    } else {
      PlantAt(w, pl.plant, T - 1, H - 1);
    }
  }
  std::vector<int64_t> causal(T);
  for (int64_t t = 0; t < T; ++t) causal[t] = ctx - (T - 1 - t);
  Tensor sc = F32({T, ctx}), rs = F32({T, ctx});
  IndexerArgs a;
  a.q = q.data<float>();
  a.w = w.data<float>();
  a.tokens = T;
  a.heads = H;
  a.head_dim = D;
  a.keys = keys.rows;
  a.causal_len = causal.data();
  a.scores = sc.data<float>();
  a.score_stride = ctx;
  s.cand().IndexerScores(a);
  a.scores = rs.data<float>();
  s.ref().IndexerScores(a);
  // Only the causal entries are specified.
  std::vector<float> got, want;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t u = 0; u < causal[t]; ++u) {
      got.push_back(sc.data<float>()[t * ctx + u]);
      want.push_back(rs.data<float>()[t * ctx + u]);
    }
  s.Add("IndexerScores", KvName(kind), Shape3("T", T, "H", H, "ctx", ctx) + SiteName(pl.site),
        pl.plant, got.data(), want.data(), static_cast<int64_t>(got.size()), 1e-5);
}

}  // namespace

void AttentionCases(Suite& s) {
  if (!s.Wants("MlaAttention")) return;
  // Decode rows split into ranges past 288 rows and merged; 16 + 4 heads (row 1 selects nothing);
  // the real latent and rope sizes; 129 query rows; dense over the causal prefix (decode, and a
  // prefill chunk whose row 1 attends nothing) and over per-row ranges.
  const AttnCase cases[] = {{1, 3, 37, 11, 300, 300, true},
                            {5, 20, 37, 11, 90, 64, false},
                            {1, 5, 512, 64, 300, 289, true},
                            {129, 2, 37, 11, 150, 40, false},
                            {1, 3, 37, 11, 300, 0, true, AttnMode::kDense},
                            {6, 4, 37, 11, 70, 0, false, AttnMode::kDense},
                            {5, 3, 37, 11, 90, 0, false, AttnMode::kDenseRanges}};
  uint32_t seed = 1;
  for (KvRowKind kind : kKvKinds)
    for (const AttnCase& c : cases)
      for (Planting pl : kPlantings) OneAttention(s, c, kind, pl, seed++);
}

void IndexerCases(Suite& s) {
  if (!s.Wants("IndexerScores")) return;
  // Pages of 5 keys (blocks of 16 keys cross pages), of 32 (a partly filled last page); 20 heads
  // are two groups of 16 in the lanes kernels.
  for (KvRowKind kind : kKvKinds)
    for (Planting pl : kPlantings) {
      IndexerOne(s, 1, 5, 157, 5, kind, pl);
      IndexerOne(s, 7, 20, 157, 32, kind, pl);
      IndexerOne(s, 129, 3, 160, 16, kind, pl);
    }
}

void TopKCases(Suite& s) {
  if (!s.Wants("TopK")) return;
  std::mt19937 rng(5);
  for (int64_t n : {1, 129, 1000, 5000})
    for (Plant p : kPlants) {
      // Many exact ties, negative scores, and -0.0 next to +0.0 (equal: tied by index).
      std::vector<float> v(n);
      for (auto& x : v) {
        const int r = static_cast<int>(rng() % 60);
        x = r >= 50 ? (r % 2 ? -0.0f : 0.0f) : static_cast<float>(r - 25) / 7.0f;
      }
      if (p != Plant::kNone) {
        v[n / 2] = PlantValue(p);
        v[n / 5] = p == Plant::kInf ? -PlantValue(p) : PlantValue(p);
        v[n - 1] = PlantValue(p);
      }
      for (int64_t k : {int64_t{1}, n / 3, n}) {
        if (k == 0) continue;
        std::vector<int32_t> a(k), b(k);
        s.cand().TopK(v.data(), n, k, a.data());
        s.ref().TopK(v.data(), n, k, b.data());
        s.AddExact("TopK", "-", Shape2("n", n, "k", k), p, a == b);
      }
    }
}

namespace {

// [v.size() / k, k] views of routing vectors (which outlive the views).
Tensor Rows(std::vector<int32_t>& v, int64_t k) {
  return Tensor::Borrow(DType::kI32, {static_cast<int64_t>(v.size()) / k, k}, v.data());
}
Tensor Rows(std::vector<float>& v, int64_t k) {
  return Tensor::Borrow(DType::kF32, {static_cast<int64_t>(v.size()) / k, k}, v.data());
}

void MoeRouteCases(Suite& s) {
  if (!s.Wants("MoeRoute")) return;
  const int64_t E = 16, groups = 4, topk_group = 2, k = 4;
  const Tensor bias = RandomTensor({E}, 21, -0.1f, 0.1f);
  for (int64_t T : {1, 129})
    for (Plant p : kPlants) {
      Tensor logits = RandomTensor({T, E}, 22, -4.0f, 4.0f);
      PlantAt(logits, p, T / 2, 3);
      std::vector<int32_t> idx(T * k), ridx(T * k);
      std::vector<float> w(T * k), rw(T * k);
      Tensor it = Rows(idx, k), wt = Rows(w, k), rit = Rows(ridx, k), rwt = Rows(rw, k);
      s.cand().MoeRoute(logits, bias, groups, topk_group, k, true, 2.5f, it, wt);
      s.ref().MoeRoute(logits, bias, groups, topk_group, k, true, 2.5f, rit, rwt);
      const std::string shape = Shape3("T", T, "E", E, "k", k);
      s.AddExact("MoeRoute", "experts", shape, p, idx == ridx);
      s.Add("MoeRoute", "weights", shape, p, w.data(), rw.data(), T * k, 1e-6);
    }
}

// The reference MoeExperts where the candidate's matmuls take other activations (kBf16Act,
// kFp8Act): each matmul's input as Suite::MatmulInput gives it (x for gate and up, the SwiGLU
// output for down), one token and expert at a time from the reference's Linear and SwiGlu.
void RoundedMoeReference(const Suite& s, const Tensor& x, std::span<const ExpertWeights> ex,
                         const std::vector<int32_t>& idx, const std::vector<float>& wt, int64_t k,
                         Tensor& out) {
  const int64_t T = x.size(0), D = x.size(1);
  for (int64_t t = 0; t < T; ++t) {
    Tensor xt = F32({1, D});
    std::copy(x.data<float>() + t * D, x.data<float>() + (t + 1) * D, xt.data<float>());
    for (int64_t j = 0; j < k; ++j) {
      const ExpertWeights& e = ex[idx[t * k + j]];
      Tensor g = F32({1, e.gate.rows}), u = F32({1, e.gate.rows}), h = F32({1, e.gate.rows});
      Tensor o = F32({1, D});
      s.ref().Linear(s.MatmulInput(xt, e.gate), e.gate, g);
      s.ref().Linear(s.MatmulInput(xt, e.up), e.up, u);
      s.ref().SwiGlu(g, u, h);
      s.ref().Linear(s.MatmulInput(h, e.down), e.down, o);
      for (int64_t d = 0; d < D; ++d)
        out.data<float>()[t * D + d] += wt[t * k + j] * o.data<float>()[d];
    }
  }
}

void MoeExpertsCases(Suite& s) {
  if (!s.Wants("MoeExperts")) return;
  const int64_t E = 6, D = 48, I = 40, k = 2;
  for (int kind = 0; kind < kWeightKinds; ++kind) {
    std::vector<ExpertWeights> ex;
    for (int64_t e = 0; e < E; ++e)
      ex.push_back({RandomWeight(kind, I, D, 100 + static_cast<uint32_t>(e)),
                    RandomWeight(kind, I, D, 200 + static_cast<uint32_t>(e)),
                    RandomWeight(kind, D, I, 300 + static_cast<uint32_t>(e))});
    for (int64_t T : {1, 4, 9, 129})  // up to 32: CUDA's device-routed decode path
      for (Plant p : kPlants) {
        // Token t takes experts 3t and 3t + 2 (mod E) with weights 0.7 and 0.4.
        std::vector<int32_t> idx(T * k);
        std::vector<float> wt(T * k);
        for (int64_t t = 0; t < T; ++t) {
          idx[t * k] = static_cast<int32_t>((t * 3) % E);
          idx[t * k + 1] = static_cast<int32_t>((t * 3 + 2) % E);
          wt[t * k] = 0.7f;
          wt[t * k + 1] = 0.4f;
        }
        Tensor x = RandomTensor({T, D}, 17);
        PlantAt(x, p, T / 2, 11);
        Tensor out = RandomTensor({T, D}, 18), ref = out.Clone();  // accumulated into
        s.cand().MoeExperts(x, ex, Rows(idx, k), Rows(wt, k), out);
        if (s.rounds_activations()) {
          RoundedMoeReference(s, x, ex, idx, wt, k, ref);
        } else {
          s.ref().MoeExperts(x, ex, Rows(idx, k), Rows(wt, k), ref);
        }
        // kBf16Act rounds the SwiGLU output, which the candidate computes with its own exp: a
        // value a few ulps from a bf16 rounding boundary may round the other way (one bf16 ulp,
        // 2^-8 of that value, in one product of the down projection). kFp8Act quantizes it to
        // e4m3 for FP8 experts: the same, with one e4m3 ulp (2^-3) of that value.
        const bool fp8 = s.MatmulTolerance(ex[0].down, 0.0) > 0.0;
        s.Add("MoeExperts", WeightKindName(kind), Shape3("T", T, "D", D, "I", I), p,
              out.data<float>(), ref.data<float>(), out.numel(),
              fp8                      ? 1e-2
              : s.rounds_activations() ? 2e-4
                                       : 2e-5);
      }
  }
}

}  // namespace

void MoeCases(Suite& s) {
  MoeRouteCases(s);
  MoeExpertsCases(s);
}

}  // namespace lucid::conformance
