// The DeepSeek-V3 family's feed-forward blocks (models/deepseek_v3_model.h): the dense MLP, the
// routed MoE with its shared expert, expert parallelism's local share, and the load-time check
// that every block gives finite output for a finite input.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/deepseek_v3_model.h"

namespace lucid::deepseek_v3 {

Tensor DeepseekV3Model::Mlp(const MlpWeights& m, const Tensor& x) {
  const int64_t N = x.size(0);
  Tensor g = F32(N, m.gate.rows), u = F32(N, m.up.rows);
  const Weight* ws[] = {&m.gate, &m.up};
  Tensor* ys[] = {&g, &u};
  ops_.LinearMany(x, ws, ys);
  return MlpDown(m, g, u);
}

Tensor DeepseekV3Model::MlpDown(const MlpWeights& m, Tensor& g, const Tensor& u) {
  ops_.SwiGlu(g, u, g);
  Tensor out = F32(g.size(0), c_.hidden_size);
  ops_.Linear(g, m.down, out);
  return out;
}

Tensor DeepseekV3Model::Moe(const MoeWeights& m, const Tensor& x) {
  const int64_t N = x.size(0), K = c_.num_experts_per_tok;
  // The router and the shared expert's gate and up read x together.
  Tensor router_logits = F32(N, c_.n_routed_experts), g, u;
  if (c_.n_shared_experts > 0) {
    g = F32(N, m.shared.gate.rows);
    u = F32(N, m.shared.up.rows);
    const Weight* ws[] = {&m.router, &m.shared.gate, &m.shared.up};
    Tensor* ys[] = {&router_logits, &g, &u};
    ops_.LinearMany(x, ws, ys);
  } else {
    ops_.Linear(x, m.router, router_logits);
  }
  Tensor idx = Tensor::Empty(DType::kI32, {N, K}, ws_), wts = F32(N, K);
  ops_.MoeRoute(router_logits, m.router_bias, c_.n_group, c_.topk_group, K, c_.norm_topk_prob,
                static_cast<float>(c_.routed_scaling_factor), idx, wts);
  if (check_replicated_) {
    tp_.CheckReplicated(idx, "the router's experts");
    tp_.CheckReplicated(wts, "the router's weights");
  }
  Tensor out = Tensor::Zeros(DType::kF32, {N, c_.hidden_size}, ws_);  // MoeExperts adds into it
  if (expert_parallel_) {
    LocalExperts(m, x, idx, wts, out);
  } else {
    ops_.MoeExperts(x, m.experts, idx, wts, out);
  }
  if (c_.n_shared_experts > 0) ops_.Accumulate(out, MlpDown(m.shared, g, u));
  return out;
}

void DeepseekV3Model::LocalExperts(const MoeWeights& m, const Tensor& x, const Tensor& idx,
                                   const Tensor& wts, Tensor& out) {
  Keep(ops_.Synchronize());  // the host reads the routing (a device backend copies it back)
  const int64_t N = x.size(0), K = idx.size(1), D = x.size(1);
  std::vector<int64_t> rows;  // one pair per (token, selection) of a local expert
  std::vector<int32_t> local;
  std::vector<float> weight;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < K; ++i) {
      const int64_t e = idx.data<const int32_t>()[t * K + i] - expert_begin_;
      if (e < 0 || e >= experts_) continue;
      rows.push_back(t);
      local.push_back(static_cast<int32_t>(e));
      weight.push_back(wts.data<const float>()[t * K + i]);
    }
  const int64_t P = static_cast<int64_t>(rows.size());
  if (P == 0) return;
  Tensor xp = F32(P, D), ip = Tensor::Empty(DType::kI32, {P, 1}, ws_), wp = F32(P, 1);
  std::copy(local.begin(), local.end(), ip.data<int32_t>());
  std::copy(weight.begin(), weight.end(), wp.data<float>());
  ops_.GatherRows(x, rows, xp);
  Tensor op = Tensor::Zeros(DType::kF32, {P, D}, ws_);
  ops_.MoeExperts(xp, std::span<const ExpertWeights>(m.experts).subspan(expert_begin_, experts_),
                  ip, wp, op);
  Keep(ops_.Synchronize());
  // Each pair's output back onto its token's row, in (token, selection) order.
  for (int64_t p = 0; p < P; ++p) {
    float* dst = out.data<float>() + rows[p] * D;
    const float* src = op.data<const float>() + p * D;
    for (int64_t j = 0; j < D; ++j) dst[j] += src[j];
  }
}

// One token (the same finite row for every block: 1/sqrt(D), the scale a normed hidden state has)
// through each feed-forward block; routed experts all in one MoeExperts call, row e to expert e.
// The outputs are scanned by NonFiniteRows (the host reads one flag per row). The inputs are
// made on the host and copied into the backend's memory.
Status DeepseekV3Model::CheckFeedForwardWeights() {
  const int64_t D = c_.hidden_size;
  const float v = 1.0f / std::sqrt(static_cast<float>(D));
  Allocator& mem = backend_->allocator();
  auto first_bad_row = [&](const Tensor& t) -> StatusOr<int64_t> {
    Tensor flags = Tensor::Empty(DType::kI32, {t.size(0)}, mem);
    ops_.NonFiniteRows(t, flags);
    LUCID_ASSIGN_OR_RETURN(Tensor bad, backend_->ReadableOnHost(flags));
    for (int64_t i = 0; i < t.size(0); ++i)
      if (bad.data<const int32_t>()[i] != 0) return i;
    return int64_t{-1};
  };
  // A tensor of the backend's memory holding host values.
  auto filled = [&](DType dtype, Shape shape, const void* host) {
    Tensor t = Tensor::Empty(dtype, std::move(shape), mem);
    ops_.CopyFromHost(host, t.raw(), t.nbytes());
    return t;
  };
  auto refuse = [](int64_t layer, const std::string& what) {
    return InvalidArgument("layer " + std::to_string(layer) + " " + what +
                           ": non-finite output for a finite input (NaN or Inf in its weights); "
                           "the checkpoint is refused");
  };
  const std::vector<float> row(D, v);
  const Tensor one = filled(DType::kF32, {1, D}, row.data());
  for (int64_t l = 0; l < static_cast<int64_t>(w_.layers.size()); ++l) {
    const LayerWeights& lw = w_.layers[l];
    if (!lw.is_moe) {
      LUCID_ASSIGN_OR_RETURN(int64_t bad, first_bad_row(Mlp(lw.dense, one)));
      if (bad >= 0) return refuse(l, "dense MLP");
      continue;
    }
    const int64_t E = experts_;  // this rank's (all of them without expert parallelism)
    const std::span<const ExpertWeights> held =
        std::span<const ExpertWeights>(lw.moe.experts).subspan(expert_begin_, experts_);
    if (E > 0) {
      const std::vector<float> rows(E * D, v), ones(E, 1.0f);
      std::vector<int32_t> experts(E);
      for (int64_t e = 0; e < E; ++e) experts[e] = static_cast<int32_t>(e);
      const Tensor x = filled(DType::kF32, {E, D}, rows.data());
      Tensor out = Tensor::Zeros(DType::kF32, {E, D}, mem);  // MoeExperts adds into it
      const Tensor idx = filled(DType::kI32, {E, 1}, experts.data());
      const Tensor wts = filled(DType::kF32, {E, 1}, ones.data());
      ops_.MoeExperts(x, held, idx, wts, out);
      LUCID_ASSIGN_OR_RETURN(int64_t e, first_bad_row(out));
      if (e >= 0) return refuse(l, "routed expert " + std::to_string(expert_begin_ + e));
    }
    if (c_.n_shared_experts > 0) {
      LUCID_ASSIGN_OR_RETURN(int64_t bad, first_bad_row(Mlp(lw.moe.shared, one)));
      if (bad >= 0) return refuse(l, "shared expert");
    }
  }
  return OkStatus();
}

}  // namespace lucid::deepseek_v3
