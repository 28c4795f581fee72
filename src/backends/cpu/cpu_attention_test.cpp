// Attention, indexer and MoE reference ops against naive double-precision formulations:
// sparse absorbed MLA vs. the expanded (non-absorbed) MLA formula over the selected tokens,
// indexer scores vs. the transformers formula, routing vs. brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/quant_test_util.h"

namespace lucid {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

const CpuOps kOps;

// Pages of size 3 in a shuffled order, so that the page-table indirection is exercised.
struct PagedStore {
  std::vector<float> pool;
  std::vector<int32_t> table;
  int64_t row = 0, page = 3;
  PagedStore(const std::vector<float>& rows, int64_t row_floats, int64_t n) : row(row_floats) {
    const int64_t pages = (n + page - 1) / page;
    pool.assign((pages + 2) * page * row, 0.0f);
    for (int64_t p = 0; p < pages; ++p) table.push_back(static_cast<int32_t>(pages + 1 - p));
    for (int64_t u = 0; u < n; ++u)
      std::copy_n(rows.data() + u * row, row,
                  pool.data() + (table[u / page] * page + u % page) * row);
  }
  PagedRows View() const { return PagedRows{pool.data(), table, page, page * row, row}; }
};

TEST(CpuAttentionTest, SparseAbsorbedMlaEqualsExpandedAttentionOverSelectedTokens) {
  const int64_t H = 3, R = 10, P = 4, dn = 6, dv = 5, ctx = 11, T = 2;
  auto ckv = Random(ctx * R, 1), kpe = Random(ctx * P, 2);
  auto wuk = Random(H * dn * R, 3), wuv = Random(H * dv * R, 4);
  auto qn = Random(T * H * dn, 5), qr = Random(T * H * P, 6);
  std::vector<float> rows(ctx * (R + P));
  for (int64_t u = 0; u < ctx; ++u) {
    std::copy_n(ckv.data() + u * R, R, rows.data() + u * (R + P));
    std::copy_n(kpe.data() + u * P, P, rows.data() + u * (R + P) + R);
  }
  PagedStore store(rows, R + P, ctx);
  // Absorb: q_lat[t,h,r] = sum_i qn[t,h,i] wuk[h,i,r].
  std::vector<float> qlat(T * H * R, 0.0f), out(T * H * R);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < dn; ++i)
        for (int64_t r = 0; r < R; ++r)
          qlat[(t * H + h) * R + r] += qn[(t * H + h) * dn + i] * wuk[(h * dn + i) * R + r];
  const std::vector<int32_t> count = {4, 7};
  std::vector<int32_t> sel = {9, 2, 5, 0, -1, -1, -1, 10, 1, 3, 4, 6, 8, 7};
  MlaAttentionArgs a;
  a.q_latent = qlat.data();
  a.q_rope = qr.data();
  a.tokens = T, a.heads = H, a.latent_dim = R, a.rope_dim = P, a.scale = 0.3f;
  a.kv = store.View();
  a.selected = sel.data(), a.selected_stride = 7, a.selected_count = count.data();
  a.out_latent = out.data();
  kOps.MlaAttention(a);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      // Expanded: K_u = [W_uk ckv_u | kpe_u], V_u = W_uv ckv_u; compare W_uv * out_latent.
      std::vector<double> s(count[t]);
      double mx = -1e300;
      for (int64_t j = 0; j < count[t]; ++j) {
        const int64_t u = sel[t * 7 + j];
        double d = 0;
        for (int64_t i = 0; i < dn; ++i) {
          double k = 0;
          for (int64_t r = 0; r < R; ++r) k += double(wuk[(h * dn + i) * R + r]) * ckv[u * R + r];
          d += double(qn[(t * H + h) * dn + i]) * k;
        }
        for (int64_t i = 0; i < P; ++i) d += double(qr[(t * H + h) * P + i]) * kpe[u * P + i];
        s[j] = 0.3 * d;
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int64_t o = 0; o < dv; ++o) {
        double want = 0, got = 0;
        for (int64_t j = 0; j < count[t]; ++j) {
          const int64_t u = sel[t * 7 + j];
          double v = 0;
          for (int64_t r = 0; r < R; ++r) v += double(wuv[(h * dv + o) * R + r]) * ckv[u * R + r];
          want += s[j] / z * v;
        }
        for (int64_t r = 0; r < R; ++r)
          got += double(wuv[(h * dv + o) * R + r]) * out[(t * H + h) * R + r];
        EXPECT_NEAR(got, want, 1e-4 * (1 + std::abs(want)));
      }
    }
}

TEST(CpuAttentionTest, IndexerScoresMatchFormula) {
  const int64_t T = 3, nI = 4, dI = 9, ctx = 8;
  auto q = Random(T * nI * dI, 7), w = Random(T * nI, 8), k = Random(ctx * dI, 9);
  PagedStore store(k, dI, ctx);
  std::vector<int64_t> causal = {3, 8, 5};
  std::vector<float> scores(T * ctx, 0.0f);
  IndexerArgs a;
  a.q = q.data(), a.w = w.data(), a.tokens = T, a.heads = nI, a.head_dim = dI;
  a.keys = store.View(), a.causal_len = causal.data(), a.scores = scores.data(),
  a.score_stride = ctx;
  kOps.IndexerScores(a);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t u = 0; u < causal[t]; ++u) {
      double want = 0;
      for (int64_t j = 0; j < nI; ++j) {
        double d = 0;
        for (int64_t i = 0; i < dI; ++i) d += double(q[(t * nI + j) * dI + i]) * k[u * dI + i];
        want += w[t * nI + j] * std::max(d, 0.0);
      }
      EXPECT_NEAR(scores[t * ctx + u], want, 1e-5 * (1 + std::abs(want)));
    }
}

TEST(CpuAttentionTest, MoeRouteMatchesBruteForceGroupLimitedSelection) {
  const int64_t T = 20, E = 16, G = 4, TG = 2, K = 3;
  auto logits = Random(T * E, 10, 2.0f), bias = Random(E, 11, 0.3f);
  std::vector<int32_t> idx(T * K);
  std::vector<float> wts(T * K);
  Tensor lt = Tensor::Borrow(DType::kF32, {T, E}, logits.data());
  Tensor bt = Tensor::Borrow(DType::kF32, {E}, bias.data());
  Tensor it = testing_util::IdxRows(idx, K), wt = testing_util::WtRows(wts, K);
  kOps.MoeRoute(lt, bt, G, TG, K, true, 2.5f, it, wt);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> s(E), c(E);
    for (int64_t e = 0; e < E; ++e)
      s[e] = 1 / (1 + std::exp(-double(logits[t * E + e]))), c[e] = s[e] + bias[e];
    // Brute force: best pair of groups by (sum of top-2) then best K experts inside them.
    std::vector<std::pair<double, int>> gs;
    for (int g = 0; g < G; ++g) {
      std::vector<double> v(c.begin() + g * 4, c.begin() + g * 4 + 4);
      std::sort(v.rbegin(), v.rend());
      gs.push_back({v[0] + v[1], g});
    }
    std::sort(gs.rbegin(), gs.rend());
    std::vector<std::pair<double, int>> cand;
    for (int e = 0; e < E; ++e)
      if (e / 4 == gs[0].second || e / 4 == gs[1].second) cand.push_back({c[e], e});
    std::sort(cand.rbegin(), cand.rend());
    double sum = 0;
    for (int i = 0; i < K; ++i) sum += s[cand[i].second];
    for (int i = 0; i < K; ++i) {
      EXPECT_EQ(idx[t * K + i], cand[i].second);
      EXPECT_NEAR(wts[t * K + i], s[cand[i].second] / sum * 2.5, 1e-5);
    }
  }
}

TEST(CpuAttentionTest, MoeExpertsEqualsPerTokenSum) {
  const int64_t T = 5, D = 7, I = 6, E = 4, K = 2;
  std::vector<std::vector<float>> store;
  std::vector<ExpertWeights> experts(E);
  auto mk = [&](int64_t rows, int64_t cols, uint32_t seed) {
    store.push_back(Random(rows * cols, seed));
    Weight w;
    w.rows = rows, w.cols = cols;
    w.data = Tensor::Borrow(DType::kF32, {rows, cols}, store.back().data());
    return w;
  };
  store.reserve(3 * E);
  for (int64_t e = 0; e < E; ++e)
    experts[e] = {mk(I, D, 20 + e), mk(I, D, 30 + e), mk(D, I, 40 + e)};
  auto x = Random(T * D, 12);
  std::vector<int32_t> idx = {0, 3, 3, 1, 2, 0, 1, 2, 3, 0};
  std::vector<float> wts = {0.5f, 1.5f, 1.0f, 2.0f, 0.25f, 0.75f, 1.0f, 1.0f, 3.0f, 0.1f};
  Tensor xt = Tensor::Borrow(DType::kF32, {T, D}, x.data());
  Tensor out = Tensor::Zeros(DType::kF32, {T, D});
  kOps.MoeExperts(xt, experts, testing_util::IdxRows(idx, K), testing_util::WtRows(wts, K), out);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < D; ++o) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k) {
        const ExpertWeights& w = experts[idx[t * K + k]];
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t d = 0; d < D; ++d) {
            g += double(w.gate.data.data<float>()[i * D + d]) * x[t * D + d];
            u += double(w.up.data.data<float>()[i * D + d]) * x[t * D + d];
          }
          want +=
              wts[t * K + k] * w.down.data.data<float>()[o * I + i] * (g / (1 + std::exp(-g)) * u);
        }
      }
      EXPECT_NEAR(out.data<float>()[t * D + o], want, 1e-4 * (1 + std::abs(want)));
    }
}

}  // namespace
}  // namespace lucid
