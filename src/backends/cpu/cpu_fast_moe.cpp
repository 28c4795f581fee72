// CpuFastOps::MoeExperts: the step's rows grouped by expert, every touched expert read once.
//
// Phase 1 runs the gate and up projections of every touched expert as one parallel list of
// (expert, matrix, row chunk) items, so small experts still keep every thread busy and no expert
// matrix is read twice; phase 2 applies SwiGLU and packs each expert's hidden rows; phase 3 runs
// all down projections the same way; phase 4 adds weight * output into each token's row, split by
// columns across threads. The order of the sum over a row's experts is expert order (as CpuOps).
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/parallel.h"

namespace lucid {
namespace {

constexpr int64_t kChunk = 64;  // weight rows per work item

// Buffers of one MoeExperts call, kept per calling thread so that the next call reuses their
// pages (each allocation's pages are faulted in and cleared). Kept only while a call's expert
// outputs fit in kKeepScratchBytes (every decode step); larger calls (long prefill chunks) release
// them at the end. Only the first E / S entries of a call are used.
struct MoeScratch {
  std::vector<std::vector<std::pair<int64_t, float>>> rows;  // per expert: (token, weight)
  std::vector<fast::PackedX> xin, hid;
  std::vector<std::vector<float>> gate, up, down;
};

constexpr int64_t kKeepScratchBytes = int64_t{64} << 20;

struct MoeItem {
  int64_t slot;  // index into the touched-expert list
  int which;     // 0 gate, 1 up, 2 down
  int64_t n0, n1;
};

}  // namespace

void CpuFastOps::MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts,
                            const Tensor& idx_t, const Tensor& weights_t, Tensor& out) const {
  CheckDevices(*this, "MoeExperts", {&x, &idx_t, &weights_t, &out});
  const int64_t T = x.size(0), D = x.size(1), k = idx_t.size(1);
  CheckRouting("MoeExperts", idx_t, weights_t, T, k);
  const int32_t* idx = idx_t.data<const int32_t>();
  const float* weights = weights_t.data<const float>();
  const int64_t E = static_cast<int64_t>(experts.size());
  const fast::KernelTable& kt = fast::Kernels(isa_);
  thread_local MoeScratch scratch;  // the calling thread's, reused by every call it makes
  auto& rows = scratch.rows;
  if (static_cast<int64_t>(rows.size()) < E) rows.resize(E);
  for (int64_t e = 0; e < E; ++e) rows[e].clear();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < k; ++i) rows[idx[t * k + i]].push_back({t, weights[t * k + i]});
  std::vector<int64_t> touched;
  for (int64_t e = 0; e < E; ++e)
    if (!rows[e].empty()) touched.push_back(e);
  const int64_t S = static_cast<int64_t>(touched.size());
  if (S == 0) return;
  for (auto* v : {&scratch.xin, &scratch.hid})
    if (static_cast<int64_t>(v->size()) < S) v->resize(S);
  for (auto* v : {&scratch.gate, &scratch.up, &scratch.down})
    if (static_cast<int64_t>(v->size()) < S) v->resize(S);
  auto &xin = scratch.xin, &hid = scratch.hid;
  auto &gate = scratch.gate, &up = scratch.up, &down = scratch.down;
  ParallelFor(S, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    for (int64_t s = b; s < e; ++s) {
      const auto& r = rows[touched[s]];
      const int64_t n = static_cast<int64_t>(r.size());
      buf.resize(n * D);
      for (int64_t j = 0; j < n; ++j)
        std::copy_n(x.data<const float>() + r[j].first * D, D, buf.data() + j * D);
      fast::PackX(kt, buf.data(), D, n, D, experts[touched[s]].gate.format, act_, &xin[s]);
    }
  });
  auto run = [&](const std::vector<MoeItem>& items) {
    ParallelFor(static_cast<int64_t>(items.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const MoeItem& it = items[i];
        const ExpertWeights& w = experts[touched[it.slot]];
        const Weight& m = it.which == 0 ? w.gate : it.which == 1 ? w.up : w.down;
        const fast::PackedX& px = it.which == 2 ? hid[it.slot] : xin[it.slot];
        std::vector<float>& y = it.which == 0   ? gate[it.slot]
                                : it.which == 1 ? up[it.slot]
                                                : down[it.slot];
        fast::MatmulRows(kt, px, 0, px.T, m, it.n0, it.n1, y.data(), m.rows);
      }
    });
  };
  std::vector<MoeItem> items;
  for (int64_t s = 0; s < S; ++s) {
    const ExpertWeights& w = experts[touched[s]];
    const int64_t n = static_cast<int64_t>(rows[touched[s]].size());
    gate[s].resize(n * w.gate.rows);
    up[s].resize(n * w.up.rows);
    for (int which = 0; which < 2; ++which) {
      const int64_t N = which == 0 ? w.gate.rows : w.up.rows;
      for (int64_t n0 = 0; n0 < N; n0 += kChunk)
        items.push_back({s, which, n0, std::min(N, n0 + kChunk)});
    }
  }
  run(items);
  ParallelFor(S, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      const ExpertWeights& w = experts[touched[s]];
      const int64_t n = static_cast<int64_t>(rows[touched[s]].size()), I = w.gate.rows;
      kt.swiglu(gate[s].data(), up[s].data(), gate[s].data(), n * I);
      fast::PackX(kt, gate[s].data(), I, n, I, w.down.format, act_, &hid[s]);
      down[s].resize(n * w.down.rows);
    }
  });
  items.clear();
  for (int64_t s = 0; s < S; ++s) {
    const int64_t N = experts[touched[s]].down.rows;
    for (int64_t n0 = 0; n0 < N; n0 += kChunk)
      items.push_back({s, 2, n0, std::min(N, n0 + kChunk)});
  }
  run(items);
  float* o = out.data<float>();
  ParallelFor(D, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t s = 0; s < S; ++s) {
      const auto& r = rows[touched[s]];
      for (size_t j = 0; j < r.size(); ++j)
        kt.axpy(r[j].second, down[s].data() + j * D + c0, o + r[j].first * D + c0, c1 - c0);
    }
  });
  // Keep decode-sized buffers between calls, give prefill-sized ones back: a long prefill chunk's
  // expert outputs (tokens x top-k x hidden floats) would otherwise stay resident for good.
  if (T * k * D * static_cast<int64_t>(sizeof(float)) > kKeepScratchBytes) scratch = MoeScratch();
}

}  // namespace lucid
