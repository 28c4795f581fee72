// CpuFastOps: dense ops (Linear, LinearTransposed, RmsNorm, SwiGlu). Attention, indexer and
// top-k live in cpu_fast_attention.cpp, MoE in cpu_fast_moe.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/dtype.h"
#include "core/parallel.h"

namespace lucid {
namespace {

// "cpu-fast-<isa>", with "-bf16act" for FastActivations::kBf16.
const char* OpsName(CpuIsa isa, FastActivations act) {
  static const char* const kNames[2][4] = {
      {"cpu-fast-scalar", "cpu-fast-avx2", "cpu-fast-avx512", "cpu-fast-avx512bf16"},
      {"cpu-fast-scalar-bf16act", "cpu-fast-avx2-bf16act", "cpu-fast-avx512-bf16act",
       "cpu-fast-avx512bf16-bf16act"}};
  return kNames[act == FastActivations::kBf16 ? 1 : 0][static_cast<int>(isa)];
}

// How Linear splits a call across the threads: the GEMM (from the format's GemmMinTokens) by
// 32-row panels, or by tokens where there are few panels; the tiles by tokens where there are few
// outputs and many tokens, else by weight rows (the path LinearMany can share between weights).
enum class LinearSplit { kGemmPanels, kGemmTokens, kTileTokens, kTileRows };
constexpr int64_t kPanel = 32;

LinearSplit SplitOf(const fast::KernelTable& kt, WeightFormat f, FastActivations act, int64_t T,
                    int64_t N, int64_t threads) {
  if (const int64_t g = fast::GemmMinTokens(kt, f, act); g > 0 && T >= g) {
    const int64_t panels = (N + kPanel - 1) / kPanel;
    return panels < 2 * threads && T >= 2 * fast::kGemmMinTokens ? LinearSplit::kGemmTokens
                                                                 : LinearSplit::kGemmPanels;
  }
  return N < 64 * threads && T >= 8 * threads ? LinearSplit::kTileTokens : LinearSplit::kTileRows;
}

}  // namespace

CpuFastOps::CpuFastOps(CpuIsa max_isa, FastActivations act)
    : isa_(std::min(max_isa, DetectCpuIsa())), act_(act), name_(OpsName(isa_, act)) {}

bool CpuFastOps::FastFormat(WeightFormat f) {
  return f == WeightFormat::kF32 || f == WeightFormat::kBF16 || f == WeightFormat::kFp8Block ||
         f == WeightFormat::kNvfp4 || f == WeightFormat::kGgml;
}

void CpuFastOps::Linear(const Tensor& x, const Weight& w, Tensor& y) const {
  CheckDevices(*this, "Linear", {&x, &w.data, &y});
  const int64_t T = x.size(0), N = w.rows;
  LUCID_CHECK(
      x.size(-1) == w.cols && y.size(-1) == w.rows && y.size(0) == T,
      "Linear shape mismatch for " + w.name + ": x " + x.DebugString() + " y " + y.DebugString());
  const fast::KernelTable& kt = fast::Kernels(isa_);
  fast::PackedX p;
  fast::PackX(kt, x.data<const float>(), w.cols, T, w.cols, w.format, act_, &p);
  float* ys = y.data<float>();
  switch (SplitOf(kt, w.format, act_, T, N, NumThreads())) {
    case LinearSplit::kGemmTokens:  // never below kGemmMinTokens per call (x is packed for it)
      ParallelFor(T, fast::kGemmMinTokens,
                  [&](int64_t b, int64_t e) { fast::MatmulRows(kt, p, b, e, w, 0, N, ys, N); });
      return;
    case LinearSplit::kGemmPanels:  // each thread decodes its panels' weights once
      ParallelFor((N + kPanel - 1) / kPanel, 1, [&](int64_t b, int64_t e) {
        fast::MatmulRows(kt, p, 0, T, w, b * kPanel, std::min(N, e * kPanel), ys, N);
      });
      return;
    case LinearSplit::kTileTokens:
      ParallelFor(T, 4,
                  [&](int64_t b, int64_t e) { fast::MatmulRows(kt, p, b, e, w, 0, N, ys, N); });
      return;
    case LinearSplit::kTileRows:
      ParallelFor(N, 32,
                  [&](int64_t b, int64_t e) { fast::MatmulRows(kt, p, 0, T, w, b, e, ys, N); });
      return;
  }
}

void CpuFastOps::LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                            std::span<Tensor* const> ys) const {
  CheckDevices(*this, "LinearMany", {&x});
  LUCID_CHECK(ws.size() == ys.size(), "LinearMany: as many outputs as weights");
  const int64_t T = x.size(0), threads = NumThreads();
  const fast::KernelTable& kt = fast::Kernels(isa_);
  // One region only where each weight would take Linear's row-split tile path.
  bool together = ws.size() > 1 && threads > 1;
  for (size_t i = 0; i < ws.size() && together; ++i) {
    const Weight& w = *ws[i];
    LUCID_CHECK(x.size(-1) == w.cols && ys[i]->size(-1) == w.rows && ys[i]->size(0) == T,
                "LinearMany shape mismatch for " + w.name + ": x " + x.DebugString() + " y " +
                    ys[i]->DebugString());
    together = FastFormat(w.format) &&
               SplitOf(kt, w.format, act_, T, w.rows, threads) == LinearSplit::kTileRows;
  }
  if (!together) {
    for (size_t i = 0; i < ws.size(); ++i) Linear(x, *ws[i], *ys[i]);
    return;
  }
  // x packed once per weight format (what PackX makes depends on the format alone).
  std::vector<fast::PackedX> packs(ws.size());
  std::vector<size_t> pack_of(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    size_t j = 0;
    while (j < i && ws[j]->format != ws[i]->format) ++j;
    pack_of[i] = j;
    if (j == i)
      fast::PackX(kt, x.data<const float>(), x.size(-1), T, ws[i]->cols, ws[i]->format, act_,
                  &packs[i]);
  }
  // The threads split the weights' bytes evenly: thread c takes the rows that start in its share
  // of the concatenation, so a share runs on from one weight into the next.
  std::vector<double> start(ws.size() + 1, 0.0);
  for (size_t i = 0; i < ws.size(); ++i)
    start[i + 1] = start[i] + static_cast<double>(ws[i]->StoredBytes());
  ParallelFor(threads, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double lo = start.back() * c / threads, hi = start.back() * (c + 1) / threads;
      for (size_t i = 0; i < ws.size(); ++i) {
        const Weight& w = *ws[i];
        const double row = (start[i + 1] - start[i]) / static_cast<double>(w.rows);
        auto first_at = [&](double byte) {  // the first row starting at or after `byte`
          return std::clamp<int64_t>(static_cast<int64_t>(std::ceil((byte - start[i]) / row)), 0,
                                     w.rows);
        };
        const int64_t n0 = c == 0 ? 0 : first_at(lo);
        const int64_t n1 = c == threads - 1 ? w.rows : first_at(hi);
        if (n1 > n0)
          fast::MatmulRows(kt, packs[pack_of[i]], 0, T, w, n0, n1, ys[i]->data<float>(), w.rows);
      }
    }
  });
}

void CpuFastOps::LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const {
  CheckDevices(*this, "LinearTransposed", {&x, &w.data, &y});
  const int64_t T = x.size(0), R = w.rows, C = w.cols;
  LUCID_CHECK(x.size(-1) == R && y.size(-1) == C && y.size(0) == T,
              "LinearTransposed shape mismatch for " + w.name);
  const fast::KernelTable& kt = fast::Kernels(isa_);
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  // Packed rows are decoded from the start of the scale block (GGUF: the block) holding c0.
  const int64_t align = fast::DequantAlign(w);
  ParallelFor(C, 64, [&](int64_t c0, int64_t c1) {
    const int64_t a0 = c0 / align * align, n = c1 - c0;
    std::vector<float> row(c1 - a0 + 16);
    for (int64_t t = 0; t < T; ++t) std::fill(ys + t * C + c0, ys + t * C + c1, 0.0f);
    for (int64_t r = 0; r < R; ++r) {
      const float* src;
      if (w.format == WeightFormat::kF32) {
        src = w.data.data<const float>() + (w.row_begin + r) * C + c0;
      } else {
        fast::DequantSpan(kt, w, r, a0, c1, row.data());
        src = row.data() + (c0 - a0);
      }
      for (int64_t t = 0; t < T; ++t) kt.axpy(xs[t * R + r], src, ys + t * C + c0, n);
    }
  });
}

void CpuFastOps::RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const {
  CheckDevices(*this, "RmsNorm", {&x, &weight, &y});
  const int64_t D = x.size(-1), T = x.numel() / D;
  std::vector<float> w(D);
  VectorToF32(weight, w.data());
  const fast::KernelTable& kt = fast::Kernels(isa_);
  const float* xs = x.data<const float>();
  float* ys = y.data<float>();
  ParallelFor(T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float ss = kt.sum_squares(xs + t * D, D);
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
      kt.scaled_mul(xs + t * D, w.data(), inv, ys + t * D, D);
    }
  });
}

void CpuFastOps::SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const {
  CheckDevices(*this, "SwiGlu", {&gate, &up, &out});
  const int64_t n = gate.numel();
  LUCID_CHECK(up.numel() == n && out.numel() == n, "SwiGlu shape mismatch");
  const fast::KernelTable& kt = fast::Kernels(isa_);
  const float* g = gate.data<const float>();
  const float* u = up.data<const float>();
  float* o = out.data<float>();
  ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) { kt.swiglu(g + b, u + b, o + b, e - b); });
}

}  // namespace lucid
