// Reference MoE routing (DeepSeek-V3 noaux_tc, sigmoid, group-limited) and expert evaluation.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_ops.h"

namespace lucid {

void CpuOps::MoeRoute(const Tensor& logits, const Tensor& bias_t, int64_t n_group,
                      int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                      Tensor& idx_t, Tensor& weights_t) const {
  CheckDevices(*this, "MoeRoute", {&logits, &bias_t, &idx_t, &weights_t});
  const int64_t T = logits.size(0), E = logits.size(1), per_group = E / n_group;
  CheckRouting("MoeRoute", idx_t, weights_t, T, k);
  LUCID_CHECK(bias_t.raw() == nullptr || (bias_t.dtype() == DType::kF32 && bias_t.numel() == E),
              "MoeRoute: bias must be f32 [E]");
  const float* bias = bias_t.raw() ? bias_t.data<const float>() : nullptr;
  int32_t* idx = idx_t.data<int32_t>();
  float* weights = weights_t.data<float>();
  const float* lg = logits.data<const float>();
  std::vector<float> score(E), choice(E), group_score(n_group);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-lg[t * E + e]));
      choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    if (n_group > 1) {
      for (int64_t g = 0; g < n_group; ++g) {  // group score: sum of its two best choices
        std::vector<float> v(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
        std::partial_sort(v.begin(), v.begin() + 2, v.end(), [](float a, float b) {
          return std::isnan(a) ? !std::isnan(b) : a > b;  // NaN first, as TopK ranks it
        });
        group_score[g] = v[0] + v[1];
      }
      std::vector<int32_t> groups(n_group);
      TopK(group_score.data(), n_group, topk_group, groups.data());
      std::vector<bool> keep(n_group, false);
      for (int64_t i = 0; i < topk_group; ++i) keep[groups[i]] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[e / per_group]) choice[e] = -INFINITY;
    }
    int32_t* ti = idx + t * k;
    float* tw = weights + t * k;
    TopK(choice.data(), E, k, ti);
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) sum += (tw[i] = score[ti[i]]);
    for (int64_t i = 0; i < k; ++i) {
      if (norm_topk_prob) tw[i] /= (sum + 1e-20f);
      tw[i] *= scaling;
    }
  }
}

void CpuOps::MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts,
                        const Tensor& idx_t, const Tensor& weights_t, Tensor& out) const {
  CheckDevices(*this, "MoeExperts", {&x, &idx_t, &weights_t, &out});
  const int64_t T = x.size(0), D = x.size(1), k = idx_t.size(1);
  CheckRouting("MoeExperts", idx_t, weights_t, T, k);
  const int32_t* idx = idx_t.data<const int32_t>();
  const float* weights = weights_t.data<const float>();
  const int64_t E = static_cast<int64_t>(experts.size());
  // Group the step's rows by expert so each touched expert is evaluated once, in expert order.
  std::vector<std::vector<std::pair<int64_t, float>>> rows(E);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < k; ++i) rows[idx[t * k + i]].push_back({t, weights[t * k + i]});
  float* o = out.data<float>();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = static_cast<int64_t>(rows[e].size());
    if (n == 0) continue;
    const ExpertWeights& w = experts[e];
    Tensor xe = Tensor::Empty(DType::kF32, {n, D});
    for (int64_t j = 0; j < n; ++j)
      std::copy_n(x.data<const float>() + rows[e][j].first * D, D, xe.data<float>() + j * D);
    Tensor g = Tensor::Empty(DType::kF32, {n, w.gate.rows});
    Tensor u = Tensor::Empty(DType::kF32, {n, w.up.rows});
    Linear(xe, w.gate, g);
    Linear(xe, w.up, u);
    SwiGlu(g, u, g);
    Tensor d = Tensor::Empty(DType::kF32, {n, D});
    Linear(g, w.down, d);
    for (int64_t j = 0; j < n; ++j) {
      const float wt = rows[e][j].second;
      float* dst = o + rows[e][j].first * D;
      const float* src = d.data<const float>() + j * D;
      for (int64_t i = 0; i < D; ++i) dst[i] += wt * src[i];
    }
  }
}

}  // namespace lucid
