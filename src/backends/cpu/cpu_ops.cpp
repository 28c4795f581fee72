// Reference dense ops: matmul by weight format, embedding, norms, RoPE, SwiGLU.
#include "backends/cpu/cpu_ops.h"

#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace lucid {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void CpuOps::Linear(const Tensor& x, const Weight& w, Tensor& y) const {
  CheckDevices(*this, "Linear", {&x, &w.data, &y});
  if (w.format == WeightFormat::kNvfp4 || w.format == WeightFormat::kFp8Block ||
      w.format == WeightFormat::kGgml)
    return LinearQuantReference(x, w, y);
  const int64_t T = x.size(0);
  LUCID_CHECK(
      x.size(-1) == w.cols && y.size(-1) == w.rows && y.size(0) == T,
      "Linear shape mismatch for " + w.name + ": x " + x.DebugString() + " y " + y.DebugString());
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  ParallelFor(w.rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(w.cols);
    for (int64_t o = begin; o < end; ++o) {
      DequantizeRow(w, o, row.data());
      for (int64_t t = 0; t < T; ++t) ys[t * w.rows + o] = Dot(xs + t * w.cols, row.data(), w.cols);
    }
  });
}

void CpuOps::LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const {
  CheckDevices(*this, "LinearTransposed", {&x, &w.data, &y});
  const int64_t T = x.size(0);
  LUCID_CHECK(x.size(-1) == w.rows && y.size(-1) == w.cols && y.size(0) == T,
              "LinearTransposed shape mismatch for " + w.name);
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  ParallelFor(T, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(w.cols);
    for (int64_t t = begin; t < end; ++t) {
      float* yt = ys + t * w.cols;
      for (int64_t i = 0; i < w.cols; ++i) yt[i] = 0.0f;
      for (int64_t r = 0; r < w.rows; ++r) {
        DequantizeRow(w, r, row.data());
        const float xv = xs[t * w.rows + r];
        for (int64_t i = 0; i < w.cols; ++i) yt[i] += xv * row[i];
      }
    }
  });
}

void CpuOps::Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const {
  CheckDevices(*this, "Embedding", {&table.data, &out});
  LUCID_CHECK(out.size(0) == static_cast<int64_t>(ids.size()) && out.size(-1) == table.cols,
              "Embedding shape mismatch");
  for (size_t i = 0; i < ids.size(); ++i) {
    LUCID_CHECK(ids[i] >= 0 && ids[i] < table.rows, "Embedding id out of range");
    DequantizeRow(table, ids[i], out.data<float>() + i * table.cols);
  }
}

void CpuOps::RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const {
  CheckDevices(*this, "RmsNorm", {&x, &weight, &y});
  const int64_t D = x.size(-1), T = x.numel() / D;
  std::vector<float> w(D);
  VectorToF32(weight, w.data());
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = xs + t * D;
    float ss = 0.0f;
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
    for (int64_t i = 0; i < D; ++i) ys[t * D + i] = w[i] * (xr[i] * inv);
  }
}

void CpuOps::LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                       Tensor& y) const {
  CheckDevices(*this, "LayerNorm", {&x, &weight, &bias, &y});
  const int64_t D = x.size(-1), T = x.numel() / D;
  std::vector<float> w(D), b(D);
  VectorToF32(weight, w.data());
  VectorToF32(bias, b.data());
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = xs + t * D;
    float mean = 0.0f;
    for (int64_t i = 0; i < D; ++i) mean += xr[i];
    mean /= static_cast<float>(D);
    float var = 0.0f;
    for (int64_t i = 0; i < D; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(D);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < D; ++i) ys[t * D + i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

void CpuOps::Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset,
                  const RopeTable& table, std::span<const int64_t> positions,
                  RopeStyle style) const {
  CheckDevices(*this, "Rope", {&x});
  const int64_t T = static_cast<int64_t>(positions.size());
  const int64_t half = table.dim() / 2;
  LUCID_CHECK(x.numel() == T * heads * head_stride && offset + table.dim() <= head_stride,
              "Rope shape mismatch");
  std::vector<float> c(half), s(half);
  float* xs = x.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float f = pos * table.inv_freq[i];
      c[i] = std::cos(f) * table.attention_factor;
      s[i] = std::sin(f) * table.attention_factor;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = xs + (t * heads + h) * head_stride + offset;
      for (int64_t i = 0; i < half; ++i) {
        float* a = style == RopeStyle::kInterleaved ? v + 2 * i : v + i;
        float* b = style == RopeStyle::kInterleaved ? v + 2 * i + 1 : v + i + half;
        const float x0 = *a, x1 = *b;
        *a = x0 * c[i] - x1 * s[i];
        *b = x1 * c[i] + x0 * s[i];
      }
    }
  }
}

void CpuOps::SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const {
  CheckDevices(*this, "SwiGlu", {&gate, &up, &out});
  const int64_t n = gate.numel();
  LUCID_CHECK(up.numel() == n && out.numel() == n, "SwiGlu shape mismatch");
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace lucid
