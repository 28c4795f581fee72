// The reference GqaAttention (Ops' default, which CpuOps uses) against a naive double-precision
// evaluation of the contract in ops/ops.h: per query head, softmax over the attended tokens of
// scale * q . k of its KV head (h / group), times v. Also checks the grouping itself: swapping two
// KV heads' k and v together with their query-head groups swaps exactly those groups' outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"

namespace lucid {
namespace {

struct Problem {
  int64_t T = 3, H = 6, KH = 2, D = 8, ctx = 11, page = 4;
  std::vector<float> q, kv;  // q [T, H, D]; kv [pages * page, 2 * KH * D]
  std::vector<int32_t> table, count, begin;
  PagedRows Rows() const {
    PagedRows r;
    r.base = kv.data();
    r.page_table = table;
    r.page_size = page;
    r.row_floats = 2 * KH * D;
    r.page_stride = page * r.row_floats;
    return r;
  }
};

Problem Make(uint32_t seed) {
  Problem p;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t pages = (p.ctx + p.page - 1) / p.page;
  p.q.resize(p.T * p.H * p.D);
  p.kv.resize(pages * p.page * 2 * p.KH * p.D);
  for (float& x : p.q) x = u(rng);
  for (float& x : p.kv) x = u(rng);
  for (int64_t i = 0; i < pages; ++i) p.table.push_back(static_cast<int32_t>(pages - 1 - i));
  p.count = {9, 0, 11};
  p.begin = {2, 0, 0};
  return p;
}

// The contract evaluated in double: physical row of token u through the page table.
std::vector<double> Naive(const Problem& p, float scale) {
  std::vector<double> out(p.T * p.H * p.D, 0.0);
  const int64_t G = p.H / p.KH, W = p.KH * p.D, R = 2 * W;
  auto row = [&](int64_t u) {
    return p.kv.data() + (p.table[u / p.page] * p.page + u % p.page) * R;
  };
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t kh = h / G;
      std::vector<double> s;
      for (int64_t i = 0; i < p.count[t]; ++i) {
        const float* k = row(p.begin[t] + i) + kh * p.D;
        double dot = 0;
        for (int64_t j = 0; j < p.D; ++j) dot += double(p.q[(t * p.H + h) * p.D + j]) * k[j];
        s.push_back(scale * dot);
      }
      double mx = -INFINITY, sum = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (size_t i = 0; i < s.size(); ++i) {
        const float* v = row(p.begin[t] + i) + W + kh * p.D;
        for (int64_t j = 0; j < p.D; ++j) out[(t * p.H + h) * p.D + j] += s[i] / sum * v[j];
      }
    }
  return out;
}

std::vector<float> RunGqa(const Ops& ops, const Problem& p, float scale) {
  std::vector<float> out(p.T * p.H * p.D, -7.0f);  // every entry must be written
  GqaAttentionArgs a;
  a.q = p.q.data();
  a.tokens = p.T;
  a.heads = p.H;
  a.kv_heads = p.KH;
  a.head_dim = p.D;
  a.scale = scale;
  a.kv = p.Rows();
  a.count = p.count.data();
  a.begin = p.begin.data();
  a.out = out.data();
  ops.GqaAttention(a);
  return out;
}

TEST(CpuGqaAttentionTest, EqualsTheNaiveFormula) {
  const CpuOps ops;
  const Problem p = Make(3);
  const std::vector<float> got = RunGqa(ops, p, 0.7f);
  const std::vector<double> want = Naive(p, 0.7f);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << i;
  // Row 1 attends to nothing: zeros.
  for (int64_t i = 0; i < p.H * p.D; ++i) EXPECT_EQ(got[p.H * p.D + i], 0.0f);
}

TEST(CpuGqaAttentionTest, QueryHeadsReadTheirGroupsKvHead) {
  const CpuOps ops;
  Problem p = Make(4);
  const std::vector<float> before = RunGqa(ops, p, 0.5f);
  // Swap KV heads 0 and 1 (in k and v) and query heads {0,1,2} with {3,4,5}: each output head
  // then reads the same numbers as its swapped partner did.
  const int64_t W = p.KH * p.D, R = 2 * W, G = p.H / p.KH;
  for (size_t r = 0; r * R < p.kv.size(); ++r)
    for (int64_t part = 0; part < 2; ++part)
      for (int64_t j = 0; j < p.D; ++j)
        std::swap(p.kv[r * R + part * W + j], p.kv[r * R + part * W + p.D + j]);
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < p.D; ++j)
        std::swap(p.q[(t * p.H + g) * p.D + j], p.q[(t * p.H + G + g) * p.D + j]);
  const std::vector<float> after = RunGqa(ops, p, 0.5f);
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t j = 0; j < p.D; ++j)
        EXPECT_EQ(after[(t * p.H + h) * p.D + j], before[(t * p.H + (h + G) % p.H) * p.D + j]);
}

}  // namespace
}  // namespace lucid
