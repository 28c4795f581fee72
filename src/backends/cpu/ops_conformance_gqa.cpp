// The ops conformance suite's cases for GqaAttention: grouped-query attention over paged [k | v]
// rows stored as f32, bf16 and fp8_e4m3 (k in e4m3 with a scale per 128 values, v in bf16, as
// models/kv_cache.h stores the Llama family's rows), causal prefill, a single decode row over a
// long context, rows that attend to nothing, and NaN / infinity planted in q, k or v.
#include <random>

#include "backends/cpu/ops_conformance_internal.h"

namespace lucid::conformance {
namespace {

// `tokens` random KV rows in pages of `page` (the page table reversed), encoded as `kind`.
struct GqaPaged {
  Tensor store;
  std::vector<uint8_t> bytes;
  std::vector<int32_t> table;
  PagedRows rows;
  GqaPaged(int64_t tokens, int64_t width, KvRowKind kind, int64_t page, uint32_t seed, Plant plant,
           int64_t at, int64_t col) {
    const int64_t pages = (tokens + page - 1) / page, row_floats = 2 * width;
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
    rows.fp8_values = width;
    rows.fp8_block = 128;
    rows.row_bytes = KvRowBytes(rows);
    rows.page_bytes = page * rows.row_bytes;
    bytes.resize(pages * rows.page_bytes);
    for (int64_t i = 0; i < pages * page; ++i)
      EncodeKvRow(rows, store.data<float>() + i * row_floats, bytes.data() + i * rows.row_bytes);
    rows.bytes = bytes.data();
    rows.base = nullptr;
  }
};

struct GqaCase {
  int64_t T, H, KH, D, ctx;
  bool with_begin;  // rows attend from a per-row first token (else from 0), row 1 to nothing
};

// Where a value is planted: nowhere, query row 0 head 1, or key / value of token 2.
enum class GqaSite { kNone, kQuery, kKey, kValue };

void OneGqa(Suite& s, const GqaCase& c, KvRowKind kind, Plant plant, GqaSite site, uint32_t seed) {
  const int64_t width = c.KH * c.D;
  const int64_t col = site == GqaSite::kValue ? width + 3 : 3;
  GqaPaged kv(c.ctx, width, kind, 7, seed,
              site == GqaSite::kKey || site == GqaSite::kValue ? plant : Plant::kNone, 2, col);
  Tensor q = RandomTensor({c.T * c.H, c.D}, seed + 1);
  if (site == GqaSite::kQuery) PlantAt(q, plant, 1, 5);
  std::vector<int32_t> count(c.T), begin(c.T);
  std::mt19937 rng(seed);
  for (int64_t t = 0; t < c.T; ++t) {
    // Causal rows of a chunk that ends at the context's end.
    count[t] = static_cast<int32_t>(c.ctx - (c.T - 1 - t));
    if (c.with_begin) {
      begin[t] = static_cast<int32_t>(rng() % 3);
      count[t] -= begin[t];
      if (t == 1) count[t] = 0;
    }
  }
  Tensor out = F32({c.T, c.H, c.D}), ref = F32({c.T, c.H, c.D});
  GqaAttentionArgs a;
  a.q = q.data<float>();
  a.tokens = c.T;
  a.heads = c.H;
  a.kv_heads = c.KH;
  a.head_dim = c.D;
  a.scale = 0.35f;
  a.kv = kv.rows;
  a.count = count.data();
  a.begin = c.with_begin ? begin.data() : nullptr;
  a.out = out.data<float>();
  s.cand().GqaAttention(a);
  a.out = ref.data<float>();
  s.ref().GqaAttention(a);
  static const char* const kSite[] = {"", " in q", " in k", " in v"};
  const char* kv_name = kind == KvRowKind::kF32    ? "kv:f32"
                        : kind == KvRowKind::kBF16 ? "kv:bf16"
                                                   : "kv:fp8_e4m3";
  s.Add("GqaAttention", kv_name,
        Shape3("T", c.T, "H", c.H, "KH", c.KH) + " D=" + std::to_string(c.D) +
            " ctx=" + std::to_string(c.ctx) + kSite[static_cast<int>(site)],
        plant, out.data<float>(), ref.data<float>(), out.numel(), 1e-5);
}

}  // namespace

void GqaCases(Suite& s) {
  if (!s.Wants("GqaAttention")) return;
  // SmolLM2's heads (9 / 3, D 64) in decode and prefill; MHA (group 1) with an odd head size; a
  // group of 8 with per-row first tokens and a row that attends to nothing.
  const GqaCase cases[] = {{1, 9, 3, 64, 300, false},
                           {33, 9, 3, 64, 40, false},
                           {5, 3, 3, 37, 19, true},
                           {4, 16, 2, 16, 130, true}};
  const std::pair<Plant, GqaSite> plantings[] = {{Plant::kNone, GqaSite::kNone},
                                                 {Plant::kNaN, GqaSite::kQuery},
                                                 {Plant::kInf, GqaSite::kQuery},
                                                 {Plant::kNaN, GqaSite::kKey},
                                                 {Plant::kInf, GqaSite::kValue}};
  uint32_t seed = 100;
  for (KvRowKind kind : {KvRowKind::kF32, KvRowKind::kBF16, KvRowKind::kFp8})
    for (const GqaCase& c : cases)
      for (const auto& [plant, site] : plantings) OneGqa(s, c, kind, plant, site, seed++);
}

}  // namespace lucid::conformance
