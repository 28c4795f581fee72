// Test helper (header only, gtest): one model on a device backend against the same checkpoint on
// the CPU reference, step by step. A batched prefill of two prompts (every row's logits), then
// decode steps fed the reference's greedy tokens (so one near-tie cannot make the runs diverge).
// Every logit must be within `rel` x the step's largest |logit| (at least 1) of the reference's,
// and the device's greedy token must be the reference's wherever the reference's top-2 margin
// exceeds twice that tolerance. Not part of the library.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/step_test_util.h"

namespace lucid::testing_util {

// One comparison case: a tiny fixture (tests/fixtures/models/<fixture>) and the KV cache dtype.
struct ModelCase {
  const char* fixture;
  KvDtype kv;
};
inline std::string ModelCaseName(const ::testing::TestParamInfo<ModelCase>& i) {
  return std::string(i.param.fixture) + "_" + KvDtypeName(i.param.kv);
}

// The bf16-activation comparisons (cuda-bf16act against the CPU's fast-bf16act in
// backends/cuda/cuda_model_test.cpp; the CPU's two instruction-set levels in
// models/device_model_test.cpp): their cases, and the bound on the logits, 1e-2 of the largest
// (2e-2 with FP8 KV), since a different f32 summation order can move a matmul input across a bf16
// rounding boundary (2^-8 of that element).
inline std::vector<ModelCase> Bf16ActCases() {
  return {{"tiny_deepseek_v3", KvDtype::kBF16},
          {"tiny_deepseek_v32", KvDtype::kBF16},
          {"tiny_glm_moe_dsa", KvDtype::kBF16},
          {"tiny_glm_moe_dsa", KvDtype::kFp8E4M3}};
}
inline double Bf16ActBound(KvDtype kv) { return kv == KvDtype::kFp8E4M3 ? 2e-2 : 1e-2; }

struct DeviceComparison {
  int rows = 0;         // logit rows compared
  int margin_rows = 0;  // of them, rows whose greedy token was required to agree
  double worst = 0;     // max |device - reference| / the step's largest |logit|
};

inline int32_t ArgMaxRow(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// The rows of one step's logits; adds to *c.
inline void CompareLogits(const Tensor& want, const Tensor& got, double rel, int step,
                          DeviceComparison* c) {
  ASSERT_EQ(want.shape(), got.shape()) << "step " << step;
  const int64_t R = want.size(0), V = want.size(1);
  const float* w = want.data<const float>();
  const float* g = got.data<const float>();
  float scale = 1.0f;
  for (int64_t i = 0; i < R * V; ++i) scale = std::max(scale, std::fabs(w[i]));
  const double tol = rel * scale;
  for (int64_t r = 0; r < R; ++r) {
    const float* wr = w + r * V;
    const float* gr = g + r * V;
    for (int64_t v = 0; v < V; ++v) {
      const double d = std::fabs(static_cast<double>(wr[v]) - gr[v]);
      c->worst = std::max(c->worst, d / scale);
      EXPECT_LE(d, tol) << "step " << step << " row " << r << " token " << v;
    }
    const int32_t best = ArgMaxRow(wr, V);
    float second = -INFINITY;
    for (int64_t v = 0; v < V; ++v)
      if (v != best) second = std::max(second, wr[v]);
    ++c->rows;
    if (wr[best] - second <= 2 * tol) continue;
    ++c->margin_rows;
    EXPECT_EQ(ArgMaxRow(gr, V), best) << "step " << step << " row " << r;
  }
}

inline DeviceComparison CompareWithReference(Model& ref, Model& dev, KvDtype kv_dtype, double rel,
                                             int decode_steps = 5) {
  DeviceComparison c;
  KvStorage kv_ref(ref.kv_spec(), 8, 64, kv_dtype, ref.kv_allocator());
  KvStorage kv_dev(dev.kv_spec(), 8, 64, kv_dtype, dev.kv_allocator());
  TestPages pages(64);
  SequenceKv a = pages.New(64), b = pages.New(64);
  std::vector<int32_t> ta, tb;
  for (int32_t i = 0; i < 29; ++i) ta.push_back((i * 37 + 5) % 251 + 2);
  for (int32_t i = 0; i < 11; ++i) tb.push_back((i * 37 + 9) % 251 + 2);
  for (int step = 0; step <= decode_steps; ++step) {
    StepInput in;
    const ChunkRows rows = step == 0 ? ChunkRows::kAll : ChunkRows::kLast;
    AddSequence(in, a.page_table, a.length, ta, rows);
    AddSequence(in, b.page_table, b.length, tb, rows);
    StepOutput want, got;
    const Status sr = ref.Forward(in, kv_ref, &want);
    EXPECT_TRUE(sr.ok()) << sr.ToString();
    const Status sd = dev.Forward(in, kv_dev, &got);
    EXPECT_TRUE(sd.ok()) << "step " << step << ": " << sd.ToString();
    if (!sr.ok() || !sd.ok()) return c;
    for (const auto& site : dev.LastNonFiniteSites())
      EXPECT_FALSE(site.has_value()) << "step " << step << ": non-finite at " << site->op;
    CompareLogits(want.logits, got.logits, rel, step, &c);
    a.length += static_cast<int64_t>(ta.size());
    b.length += static_cast<int64_t>(tb.size());
    // Next: each sequence's reference greedy token (the last row of its chunk).
    const int64_t V = want.logits.size(1);
    const int64_t last_a = step == 0 ? static_cast<int64_t>(ta.size()) - 1 : 0;
    const int64_t last_b = step == 0 ? want.logits.size(0) - 1 : 1;
    const float* w = want.logits.data<const float>();
    ta = {ArgMaxRow(w + last_a * V, V)};
    tb = {ArgMaxRow(w + last_b * V, V)};
  }
  return c;
}

}  // namespace lucid::testing_util
