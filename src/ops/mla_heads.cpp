// The reference (default) Ops::MlaAbsorbQuery / MlaProjectOutput: one LinearTransposed / Linear
// per head on row ranges of kv_b_proj, exactly what the model did before these ops existed, so
// a backend that does not override them computes the same numbers as before.
#include <cstring>

#include "ops/ops.h"

namespace lucid {

void Ops::MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                         int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const {
  const int64_t T = q.size(0), R = kv_b.cols;
  LUCID_CHECK(q.size(-1) == heads * q_stride && q_latent.size(0) == T &&
                  q_latent.size(-1) == heads * R && kv_b.rows == heads * (nope_dim + v_dim),
              "MlaAbsorbQuery shape mismatch for " + kv_b.name);
  Tensor qh = Tensor::Empty(DType::kF32, {T, nope_dim}), yh = Tensor::Empty(DType::kF32, {T, R});
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(qh.data<float>() + t * nope_dim,
                  q.data<const float>() + t * heads * q_stride + h * q_stride, nope_dim * 4);
    LinearTransposed(qh, kv_b.RowRange(h * (nope_dim + v_dim), nope_dim), yh);
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(q_latent.data<float>() + (t * heads + h) * R, yh.data<const float>() + t * R,
                  R * 4);
  }
}

void Ops::MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                           const Weight& kv_b, Tensor& out) const {
  const int64_t T = latent.size(0), R = kv_b.cols;
  LUCID_CHECK(latent.size(-1) == heads * R && out.size(0) == T && out.size(-1) == heads * v_dim &&
                  kv_b.rows == heads * (nope_dim + v_dim),
              "MlaProjectOutput shape mismatch for " + kv_b.name);
  Tensor lh = Tensor::Empty(DType::kF32, {T, R}), oh = Tensor::Empty(DType::kF32, {T, v_dim});
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(lh.data<float>() + t * R, latent.data<const float>() + (t * heads + h) * R,
                  R * 4);
    Linear(lh, kv_b.RowRange(h * (nope_dim + v_dim) + nope_dim, v_dim), oh);
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(out.data<float>() + t * heads * v_dim + h * v_dim,
                  oh.data<const float>() + t * v_dim, v_dim * 4);
  }
}

}  // namespace lucid
