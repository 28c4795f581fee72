// Test support: a small hand-made MLA attention case over f32 KV rows (the split-K and grouped-
// heads emulations' special cases): T query rows of H heads, pages of `page` tokens of R latent and
// P rope values, token values 0.01 x (i mod `period`) for flat index i, queries 0.5 (latent) and
// 0.25 (rope). The vectors may be edited before Args(); Args() points into them.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace lucid::cuda {

struct SmallMlaCase {
  SmallMlaCase(int64_t T, int64_t H, int64_t R, int64_t P, int64_t page, int64_t pages, int period)
      : T(T), H(H), R(R), P(P), page(page) {
    store.resize(static_cast<size_t>(pages * page * (R + P)));
    for (size_t i = 0; i < store.size(); ++i)
      store[i] = 0.01f * static_cast<float>(static_cast<int64_t>(i) % period);
    for (int64_t p = 0; p < pages; ++p) table.push_back(static_cast<int32_t>(p));
    ql.assign(static_cast<size_t>(T * H * R), 0.5f);
    qr.assign(static_cast<size_t>(T * H * P), 0.25f);
    out.assign(static_cast<size_t>(T * H * R), 0.0f);
  }
  // Sparse when `selected` holds T x stride indices, dense otherwise; `count` per row.
  MlaAttentionArgs Args(int64_t stride = 0) {
    MlaAttentionArgs a;
    a.q_latent = ql.data();
    a.q_rope = qr.data();
    a.tokens = T;
    a.heads = H;
    a.latent_dim = R;
    a.rope_dim = P;
    a.scale = 0.3f;
    a.kv.base = store.data();
    a.kv.page_table = table;
    a.kv.page_size = page;
    a.kv.page_stride = page * (R + P);
    a.kv.row_floats = R + P;
    a.selected = selected.empty() ? nullptr : selected.data();
    a.selected_stride = stride;
    a.selected_count = count.data();
    a.out_latent = out.data();
    return a;
  }

  int64_t T, H, R, P, page;
  std::vector<float> store, ql, qr, out;
  std::vector<int32_t> table, count, selected;
};

}  // namespace lucid::cuda
