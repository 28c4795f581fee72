// CpuFastOps against the CpuOps reference, on random odd shapes, at every instruction-set level
// this machine has (a level the machine lacks runs as the best one below it).
#include "backends/cpu/cpu_fast_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RelErr;

const CpuOps kRef;

// A weight [rows, cols] viewed from row `skip` of a [skip + rows + 3, cols] parent.
Weight MakeWeight(WeightFormat f, int64_t rows, int64_t cols, uint32_t seed, int64_t skip = 0) {
  return testing_util::RandomDense(f == WeightFormat::kBF16, skip + rows + 3, cols, seed)
      .RowRange(skip, rows);
}

class FastOpsTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuFastOps ops_{GetParam()};
};

TEST_P(FastOpsTest, LinearMatchesReference) {
  struct Case {
    int64_t T, N, K, skip;
  };
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16}) {
    for (Case c :
         {Case{1, 13, 37, 0}, Case{2, 70, 129, 5}, Case{3, 33, 2051, 1}, Case{5, 45, 1100, 0},
          Case{17, 9, 300, 2}, Case{67, 131, 71, 0}, Case{70, 5, 3, 0}, Case{1, 300, 4100, 0},
          // Up to 8 tokens take whole bf16 rows; more, 2048-column k blocks (two here). One
          // token at 1024 columns or more (4100) the row-after-row tile, with a tail.
          Case{12, 21, 2100, 3}}) {
      SCOPED_TRACE(std::string(WeightFormatName(f)) + " T=" + std::to_string(c.T) +
                   " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K));
      Weight w = MakeWeight(f, c.N, c.K, 7 + c.K, c.skip);
      Tensor x = Random({c.T, c.K}, 3 + c.T);
      Tensor y = Tensor::Zeros(DType::kF32, {c.T, c.N}), r = y.Clone();
      ops_.Linear(x, w, y);
      kRef.Linear(x, w, r);
      EXPECT_LE(RelErr(y, r), 2e-5);
    }
  }
}

TEST_P(FastOpsTest, LinearTransposedMatchesReference) {
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16}) {
    for (int64_t T : {1, 4}) {
      Weight w = MakeWeight(f, 19, 131, 11, 4);
      Tensor x = Random({T, 19}, 5);
      Tensor y = Tensor::Zeros(DType::kF32, {T, 131}), r = y.Clone();
      ops_.LinearTransposed(x, w, y);
      kRef.LinearTransposed(x, w, r);
      EXPECT_LE(RelErr(y, r), 1e-5) << WeightFormatName(f) << " T=" << T;
    }
  }
}

TEST_P(FastOpsTest, RmsNormAndSwiGluMatchReference) {
  Tensor x = Random({3, 77}, 1), w = Random({77}, 2);
  Tensor y = x.Clone(), r = x.Clone();
  ops_.RmsNorm(x, w, 1e-6f, y);
  kRef.RmsNorm(x, w, 1e-6f, r);
  EXPECT_LE(RelErr(y, r), 1e-6);
  Tensor g = Random({5, 41}, 3, -20.0f, 20.0f), u = Random({5, 41}, 4);
  Tensor o = g.Clone(), ro = g.Clone();
  ops_.SwiGlu(g, u, o);
  kRef.SwiGlu(g, u, ro);
  EXPECT_LE(RelErr(o, ro), 1e-6);
}

// A paged KV of `tokens` random rows: pages of 5 rows, page table reversed so pages are not in
// order; stored as f32, bf16 or fp8 (the fp8 layouts of models/kv_cache.h: `fp8_values` e4m3
// values with one scale per `fp8_block`, the rest bf16).
struct Paged {
  Tensor store;
  std::vector<uint8_t> bytes;
  std::vector<int32_t> table;
  PagedRows rows;
  Paged(int64_t tokens, int64_t row_floats, uint32_t seed, KvRowKind kind = KvRowKind::kF32,
        int64_t fp8_values = 0, int64_t fp8_block = 0, int64_t page = 5) {
    const int64_t pages = (tokens + page - 1) / page;
    store = Random({pages * page, row_floats}, seed);
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

// Each row selects a random count of up to max_sel tokens (row 1 none), or exactly max_sel.
void CheckAttention(const Ops& ops, int64_t T, int64_t H, int64_t R, int64_t P, int64_t ctx,
                    int64_t max_sel, uint32_t seed, KvRowKind kind = KvRowKind::kF32,
                    bool exact = false) {
  Paged kv(ctx, R + P, seed, kind, kind == KvRowKind::kFp8 ? R : 0, 128);
  Tensor ql = Random({T, H, R}, seed + 1), qr = Random({T, H, P}, seed + 2);
  std::vector<int32_t> sel(T * max_sel), count(T);
  std::mt19937 rng(seed);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> all(ctx);
    for (int64_t u = 0; u < ctx; ++u) all[u] = static_cast<int32_t>(u);
    std::shuffle(all.begin(), all.end(), rng);
    count[t] = static_cast<int32_t>(exact    ? max_sel
                                    : t == 1 ? 0
                                             : std::min<int64_t>(max_sel, 1 + rng() % ctx));
    std::copy(all.begin(), all.begin() + count[t], sel.begin() + t * max_sel);
  }
  Tensor out = Tensor::Zeros(DType::kF32, {T, H, R}), ref = out.Clone();
  MlaAttentionArgs a;
  a.q_latent = ql.data<float>();
  a.q_rope = qr.data<float>();
  a.tokens = T;
  a.heads = H;
  a.latent_dim = R;
  a.rope_dim = P;
  a.scale = 0.3f;
  a.kv = kv.rows;
  a.selected = sel.data();
  a.selected_stride = max_sel;
  a.selected_count = count.data();
  a.out_latent = out.data<float>();
  ops.MlaAttention(a);
  a.out_latent = ref.data<float>();
  kRef.MlaAttention(a);
  EXPECT_LE(RelErr(out, ref), 1e-5) << "T=" << T << " H=" << H << " R=" << R << " P=" << P;
}

TEST_P(FastOpsTest, MlaAttentionMatchesReference) {
  CheckAttention(ops_, 1, 3, 37, 11, 300, 300, 1);   // decode: split rows, merged partials
  CheckAttention(ops_, 5, 2, 37, 11, 90, 64, 2);     // several rows (row 1 selects nothing)
  CheckAttention(ops_, 1, 5, 512, 64, 700, 513, 3);  // the real latent and rope sizes
  CheckAttention(ops_, 9, 4, 512, 64, 100, 100, 4);
  CheckAttention(ops_, 1, 16, 64, 8, 100, 100, 7);   // one whole group of 16 heads (scores16)
  CheckAttention(ops_, 3, 20, 37, 11, 200, 150, 8);  // 16 heads, then a group of 4
  for (KvRowKind kind : {KvRowKind::kBF16, KvRowKind::kFp8}) {  // KV stored as bf16 / fp8 rows
    CheckAttention(ops_, 1, 3, 300, 11, 300, 300, 5, kind);     // partial last scale block
    CheckAttention(ops_, 1, 5, 512, 64, 700, 513, 6, kind);     // FlashMLA's 656-byte rows
    CheckAttention(ops_, 4, 2, 512, 64, 90, 64, 7, kind);
    // Selections past a multiple of 256 rows (the items' ranges run up to 288 rows, decoded
    // whole into the thread's buffer): one row and three rows of 513, one of 2048.
    CheckAttention(ops_, 1, 3, 512, 64, 600, 513, 9, kind, /*exact=*/true);
    CheckAttention(ops_, 3, 3, 512, 64, 600, 513, 10, kind, /*exact=*/true);
    CheckAttention(ops_, 1, 2, 512, 64, 2100, 2048, 11, kind, /*exact=*/true);
  }
}

TEST_P(FastOpsTest, IndexerScoresMatchReference) {
  // Pages of 5 keys: the kernel's blocks of 16 keys cross pages; of 32: each block lies in one
  // page, the last page partly filled; the page table is reversed in both.
  for (int64_t page : {5, 32})
    for (KvRowKind kind : {KvRowKind::kF32, KvRowKind::kBF16, KvRowKind::kFp8})
      for (int64_t T : {1, 4})
        for (int64_t heads : {5, 13, 20}) {  // 20: two groups of 16 heads in scores16
          const int64_t D = 33, ctx = 157;
          Paged keys(ctx, D, 9, kind, D, D, page);  // fp8 keys: one scale per key
          Tensor q = Random({T, heads, D}, 10), w = Random({T, heads}, 11);
          std::vector<int64_t> causal(T);
          for (int64_t t = 0; t < T; ++t) causal[t] = ctx - 3 * (T - 1 - t);
          Tensor s = Tensor::Zeros(DType::kF32, {T, ctx}), r = s.Clone();
          IndexerArgs a;
          a.q = q.data<float>();
          a.w = w.data<float>();
          a.tokens = T;
          a.heads = heads;
          a.head_dim = D;
          a.keys = keys.rows;
          a.causal_len = causal.data();
          a.scores = s.data<float>();
          a.score_stride = ctx;
          ops_.IndexerScores(a);
          a.scores = r.data<float>();
          kRef.IndexerScores(a);
          EXPECT_LE(RelErr(s, r), 1e-5) << "T=" << T << " heads=" << heads << " kind=" << int(kind)
                                        << " page=" << page;  // past causal_len: 0 in both
          // Every vector level scores with scores16 (heads in the lanes, 16 of them in one zmm or
          // two ymm) and sums in the same order: the same bits, so the same top-k.
          if (GetParam() >= CpuIsa::kAvx2) {
            a.scores = r.data<float>();
            CpuFastOps(CpuIsa::kAvx2).IndexerScores(a);
            EXPECT_EQ(std::memcmp(s.data<float>(), r.data<float>(), s.nbytes()), 0)
                << "T=" << T << " heads=" << heads << " kind=" << int(kind);
          }
        }
}

TEST_P(FastOpsTest, TopKMatchesReferenceIncludingTies) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {1, 10, 1000, 5000, 40000}) {
    std::vector<float> s(n);
    // Many exact ties; negative scores, and -0.0 next to +0.0 (equal, so tied by index). The
    // 40000 scores are spread out (few ties), the DSA case: index_topk 2048 of a long context.
    for (auto& v : s) {
      const int r = static_cast<int>(rng() % 60);
      v = n == 40000 ? normal(rng)
          : r >= 50  ? (r % 2 ? -0.0f : 0.0f)
                     : static_cast<float>(r - 25) / 7.0f;
    }
    for (int64_t k : {int64_t{1}, n / 2, n / 3, n / 10, n, std::min<int64_t>(n, 2048)}) {
      if (k == 0) continue;
      std::vector<int32_t> a(k), b(k);
      ops_.TopK(s.data(), n, k, a.data());
      kRef.TopK(s.data(), n, k, b.data());
      EXPECT_EQ(a, b) << "n=" << n << " k=" << k;
    }
  }
}

TEST_P(FastOpsTest, MoeExpertsMatchReference) {
  const int64_t E = 7, D = 40, I = 24, k = 2;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16}) {
    for (int64_t T : {1, 9}) {
      std::vector<ExpertWeights> ex;
      for (int64_t e = 0; e < E; ++e)
        ex.push_back({MakeWeight(f, I, D, 100 + e), MakeWeight(f, I, D, 200 + e),
                      MakeWeight(f, D, I, 300 + e)});
      Tensor x = Random({T, D}, 17);
      std::vector<int32_t> idx;
      std::vector<float> wt;
      testing_util::Top2Routing(T, E, &idx, &wt);          // k == 2
      Tensor out = Random({T, D}, 18), ref = out.Clone();  // accumulated into
      ops_.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), out);
      kRef.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), ref);
      EXPECT_LE(RelErr(out, ref), 2e-5) << WeightFormatName(f) << " T=" << T;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FastOpsTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                           CpuIsa::kAvx512Bf16),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace lucid
