// CudaOps, sets "cuda-reference", "cuda-bf16act" and "cuda-fp8act" (see cuda_ops.h): the
// kernels and the op methods.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_attention.h"
#include "backends/cuda/cuda_elementwise_items.cuh"
#include "backends/cuda/cuda_fp8_gemm.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_matmul.h"
#include "backends/cuda/cuda_moe_gemv.h"
#include "backends/cuda/cuda_moe_grouped.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_ops_blocks.cuh"
#include "backends/cuda/cuda_sampling.h"
#include "backends/cuda/cuda_scratch.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_step_kernels.h"
#include "backends/cuda/cuda_topk.h"
#include "backends/cuda/cuda_weight_view.cuh"
#include "core/dtype.h"

namespace lucid::cuda {
namespace {

__global__ void EmbeddingKernel(DeviceWeight w, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t n = n_ids * w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = EmbeddingItem(w, ids, i);
}

// A row per block (cuda_ops_blocks.cuh).
__global__ void RmsNormKernel(const float* x, const void* w, bool w_bf16, float eps, int64_t D,
                              float* y) {
  __shared__ OpsRowState st;
  RmsNormRowPhases(st, x + blockIdx.x * D, w, w_bf16, eps, D, y + blockIdx.x * D, BlockRun{});
}

__global__ void LayerNormKernel(const float* x, const void* w, bool w_bf16, const void* b,
                                bool b_bf16, float eps, int64_t D, float* y) {
  __shared__ OpsRowState st;
  LayerNormRowPhases(st, x + blockIdx.x * D, w, w_bf16, b, b_bf16, eps, D, y + blockIdx.x * D,
                     BlockRun{});
}

__global__ void SwiGluKernel(const float* g, const float* u, int64_t n, float* o) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    o[i] = SwiGluValue(g[i], u[i]);
}

__global__ void AccumulateKernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] += y[i];
}

__global__ void ScaleKernel(float* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] *= s;
}

__global__ void CopyColumnsKernel(const float* x, int64_t x_width, int64_t T, int64_t groups,
                                  int64_t group_stride, int64_t offset, int64_t width, float* out) {
  const int64_t n = T * groups * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = CopyColumnsItem(x, x_width, groups, group_stride, offset, width, i);
}

__global__ void GatherRowsKernel(const float* x, const int64_t* rows, int64_t n_rows, int64_t D,
                                 float* out) {
  const int64_t n = n_rows * D;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = GatherRowsItem(x, rows, D, i);
}

__global__ void NonFiniteRowsKernel(const float* x, int64_t row, int32_t* flags) {
  __shared__ OpsRowState st;
  NonFiniteRowPhases(st, x + blockIdx.x * row, row, flags + blockIdx.x, BlockRun{});
}

class CudaOps final : public Ops {
 public:
  CudaOps(cudaStream_t stream, MatmulInputs inputs)
      : stream_(stream), matmul_(stream, inputs, scratch_) {}
  ~CudaOps() override { cudaStreamSynchronize(stream_); }

  const char* name() const override {
    return matmul_.fp8_act()    ? "cuda-fp8act"
           : matmul_.bf16_act() ? "cuda-bf16act"
                                : "cuda-reference";
  }
  Device device() const override { return Device::kCuda; }

  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    CheckDevices(*this, "Linear", {&x, &w.data, &w.scale, &w.scale2, &y});
    const int64_t K = w.cols, N = w.rows, T = x.numel() / K;
    LUCID_CHECK(x.numel() == T * K && y.numel() == T * N, "Linear shape mismatch for " + w.name);
    if (T > 0) matmul_.Linear(x, w, T, y);
  }
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override {
    CheckDevices(*this, "LinearTransposed", {&x, &w.data, &w.scale, &w.scale2, &y});
    const int64_t R = w.rows, C = w.cols, T = x.numel() / R;
    LUCID_CHECK(x.numel() == T * R && y.numel() == T * C,
                "LinearTransposed shape mismatch for " + w.name);
    if (T > 0) matmul_.LinearTransposed(x, w, T, y);
  }
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override {
    CheckDevices(*this, "Embedding", {&table.data, &table.scale, &table.scale2, &out});
    LUCID_CHECK(out.size(0) == static_cast<int64_t>(ids.size()) && out.size(-1) == table.cols,
                "Embedding shape mismatch");
    for (int32_t id : ids) LUCID_CHECK(id >= 0 && id < table.rows, "Embedding id out of range");
    const int32_t* d_ids = static_cast<const int32_t*>(Upload(ids.data(), ids.size_bytes()));
    if (d_ids == nullptr) return;
    const int64_t n = static_cast<int64_t>(ids.size()) * table.cols;
    EmbeddingKernel<<<Blocks(n), kThreads, 0, stream_>>>(KernelView(table), d_ids, ids.size(),
                                                         out.data<float>());
  }
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override {
    CheckDevices(*this, "RmsNorm", {&x, &weight, &y});
    const int64_t D = x.size(-1), T = x.numel() / D;
    if (T > 0)
      RmsNormKernel<<<T, kOpsRowThreads, 0, stream_>>>(x.data<const float>(), weight.raw(),
                                                       weight.dtype() == DType::kBF16, eps, D,
                                                       y.data<float>());
  }
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 Tensor& y) const override {
    CheckDevices(*this, "LayerNorm", {&x, &weight, &bias, &y});
    const int64_t D = x.size(-1), T = x.numel() / D;
    if (T > 0)
      LayerNormKernel<<<T, kOpsRowThreads, 0, stream_>>>(
          x.data<const float>(), weight.raw(), weight.dtype() == DType::kBF16, bias.raw(),
          bias.dtype() == DType::kBF16, eps, D, y.data<float>());
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override {
    CheckDevices(*this, "SwiGlu", {&gate, &up, &out});
    const int64_t n = gate.numel();
    LUCID_CHECK(up.numel() == n && out.numel() == n, "SwiGlu shape mismatch");
    SwiGluKernel<<<Blocks(n), kThreads, 0, stream_>>>(gate.data<const float>(),
                                                      up.data<const float>(), n, out.data<float>());
  }
  void Accumulate(Tensor& x, const Tensor& y) const override {
    CheckDevices(*this, "Accumulate", {&x, &y});
    LUCID_CHECK(x.numel() == y.numel(), "Accumulate: element counts differ");
    AccumulateKernel<<<Blocks(x.numel()), kThreads, 0, stream_>>>(x.data<float>(),
                                                                  y.data<const float>(), x.numel());
  }
  void Scale(Tensor& x, float s) const override {
    CheckDevices(*this, "Scale", {&x});
    ScaleKernel<<<Blocks(x.numel()), kThreads, 0, stream_>>>(x.data<float>(), s, x.numel());
  }
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override {
    CheckDevices(*this, "CopyColumns", {&x, &out});
    const int64_t T = x.size(0), xw = x.numel() / std::max<int64_t>(T, 1);
    LUCID_CHECK(out.numel() == T * groups * width && groups * group_stride <= xw &&
                    offset + width <= group_stride,
                "CopyColumns shape mismatch");
    CopyColumnsKernel<<<Blocks(out.numel()), kThreads, 0, stream_>>>(
        x.data<const float>(), xw, T, groups, group_stride, offset, width, out.data<float>());
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override {
    CheckDevices(*this, "GatherRows", {&x, &out});
    const int64_t D = x.size(-1);
    for (int64_t r : rows) LUCID_CHECK(r >= 0 && r < x.size(0), "GatherRows: row out of range");
    const int64_t* d_rows = static_cast<const int64_t*>(Upload(rows.data(), rows.size_bytes()));
    if (d_rows == nullptr) return;
    const int64_t n = static_cast<int64_t>(rows.size()) * D;
    GatherRowsKernel<<<Blocks(n), kThreads, 0, stream_>>>(x.data<const float>(), d_rows,
                                                          rows.size(), D, out.data<float>());
  }
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override {
    CheckDevices(*this, "NonFiniteRows", {&x, &flags});
    const int64_t T = x.rank() == 0 ? 1 : x.size(0);
    LUCID_CHECK(x.dtype() == DType::kF32 && flags.dtype() == DType::kI32 && flags.numel() == T,
                "NonFiniteRows: x f32, flags i32 [T]");
    if (T > 0)
      NonFiniteRowsKernel<<<T, kOpsRowThreads, 0, stream_>>>(x.data<const float>(), x.numel() / T,
                                                             flags.data<int32_t>());
  }
  void MlaAttention(const MlaAttentionArgs& a) const override {
    if (a.tokens == 0 || a.heads == 0 || Failed()) return;
    const int64_t per_row = AttentionScratchPerRow(a.kv, a.selected, a.selected_stride);
    float* scratch = Scratch<float>(ScratchPool::Buffer::kAttention,
                                    MlaAttentionScratchFloats(a, per_row) * sizeof(float));
    if (scratch != nullptr) LaunchMlaAttention(a, scratch, per_row, stream_);
  }
  void GqaAttention(const GqaAttentionArgs& a) const override {
    LUCID_CHECK(a.heads > 0 && a.kv_heads > 0 && a.heads % a.kv_heads == 0 && a.head_dim > 0,
                "GqaAttention: heads must be a multiple of kv_heads");
    LUCID_CHECK(a.kv.row_floats == 2 * a.kv_heads * a.head_dim,
                "GqaAttention: KV rows must hold k and v");
    if (a.tokens == 0 || Failed()) return;
    const int64_t per_row = AttentionScratchPerRow(a.kv, nullptr, 0);
    float* scratch = Scratch<float>(ScratchPool::Buffer::kAttention,
                                    GqaAttentionScratchFloats(a, per_row) * sizeof(float));
    if (scratch != nullptr) LaunchGqaAttention(a, scratch, per_row, stream_);
  }
  void IndexerScores(const IndexerArgs& a) const override {
    if (!Failed()) LaunchIndexerScores(a, stream_);
  }
  void Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset, const RopeTable& table,
            std::span<const int64_t> positions, RopeStyle style) const override {
    CheckDevices(*this, "Rope", {&x});
    const int64_t T = static_cast<int64_t>(positions.size()), half = table.dim() / 2;
    LUCID_CHECK(x.numel() == T * heads * head_stride && offset + table.dim() <= head_stride,
                "Rope shape mismatch");
    if (T == 0 || half == 0) return;
    // cos and sin exactly as the reference computes them, on the host, once for the layers of a
    // step (keyed by the positions and the table's values); the device rotates.
    std::vector<uint8_t> key(positions.size_bytes() + (half + 1) * sizeof(float));
    std::memcpy(key.data(), positions.data(), positions.size_bytes());
    std::memcpy(key.data() + positions.size_bytes(), table.inv_freq.data(), half * sizeof(float));
    std::memcpy(key.data() + key.size() - sizeof(float), &table.attention_factor, sizeof(float));
    const float* d_cs =
        static_cast<const float*>(scratch_.Holding(ScratchPool::Buffer::kRope, key));
    if (d_cs == nullptr) {
      const std::vector<float> cs = RopeCosSin(table, positions);
      d_cs = static_cast<const float*>(
          scratch_.Upload(ScratchPool::Buffer::kRope, cs.data(), cs.size() * sizeof(float), key));
      if (d_cs == nullptr) return;
    }
    LaunchRope(x.data<float>(), T, heads, head_stride, offset, half, d_cs,
               style == RopeStyle::kInterleaved, stream_);
  }
  void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, Tensor& idx,
                Tensor& weights) const override {
    CheckDevices(*this, "MoeRoute", {&logits, &bias, &idx, &weights});
    const int64_t T = logits.size(0), E = logits.size(1);
    CheckRouting("MoeRoute", idx, weights, T, k);
    LUCID_CHECK(bias.raw() == nullptr || (bias.dtype() == DType::kF32 && bias.numel() == E),
                "MoeRoute: bias must be f32 [E]");
    LUCID_CHECK(
        n_group >= 1 && n_group <= 64 && E % n_group == 0 && (n_group == 1 || E / n_group >= 2),
        "MoeRoute on cuda: 1 to 64 groups of at least 2 experts");
    LUCID_CHECK(k <= E && (n_group == 1 || (topk_group >= 1 && topk_group <= n_group)),
                "MoeRoute: k > E, or topk_group outside 1..n_group (TopK's k <= n)");
    if (T == 0) return;
    float* scores =
        Scratch<float>(ScratchPool::Buffer::kRouting, T * (2 * E + n_group) * sizeof(float));
    if (scores == nullptr) return;
    LaunchMoeRoute(logits.data<const float>(), T, E,
                   bias.raw() ? bias.data<const float>() : nullptr, n_group, topk_group, k,
                   norm_topk_prob, scaling, scores, idx.data<int32_t>(), weights.data<float>(),
                   stream_);
  }
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override {
    CheckDevices(*this, "MoeExperts", {&x, &idx, &weights, &out});
    const int64_t T = x.size(0), D = x.size(1), k = idx.size(1);
    CheckRouting("MoeExperts", idx, weights, T, k);
    if (T == 0 || k == 0 || Failed()) return;
    if (T <= kMoeDeviceRoutedMaxTokens && MoeExpertsOnDevice(x, experts, idx, weights, out)) return;
    if (T <= kMoeGroupedMaxTokens && MoeExpertsGrouped(x, experts, idx, weights, out)) return;
    // The routing comes to the host (T * k ids and weights) to group rows by expert; each touched
    // expert then runs as three GEMMs on its gathered rows, combined into `out` in expert order.
    std::vector<int32_t> h_idx(static_cast<size_t>(T * k));
    std::vector<float> h_w(static_cast<size_t>(T * k));
    if (!Check(cudaMemcpyAsync(h_idx.data(), idx.raw(), h_idx.size() * 4, cudaMemcpyDeviceToHost,
                               stream_),
               "MoeExperts routing") ||
        !Check(cudaMemcpyAsync(h_w.data(), weights.raw(), h_w.size() * 4, cudaMemcpyDeviceToHost,
                               stream_),
               "MoeExperts routing") ||
        !Check(cudaStreamSynchronize(stream_), "MoeExperts routing"))
      return;
    const int64_t E = static_cast<int64_t>(experts.size());
    std::vector<std::vector<int64_t>> rows(E);
    std::vector<std::vector<float>> wts(E);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < k; ++i) {
        const int32_t e = h_idx[t * k + i];
        if (e < 0 || e >= E) {
          error_ = Internal("MoeExperts: expert id " + std::to_string(e) + " of token " +
                            std::to_string(t) + " outside [0, " + std::to_string(E) + ")");
          return;
        }
        rows[e].push_back(t);
        wts[e].push_back(h_w[t * k + i]);
      }
    // Each touched expert's activations (xe, g, u, d) in turn at the start of one buffer, as
    // large as the largest expert's: the stream runs one expert's kernels after the previous
    // one's, so the next overwrites nothing still to be read (a buffer for all of them at once
    // was T x k x (2 D + 2 I) floats: 4.3 GB for a 8192-token GLM-5 prefill chunk). Their
    // combine metadata is one upload (every row id, then every weight, expert after expert); no
    // synchronisation between experts; combined into `out` in expert order.
    std::vector<int64_t> first_row(E + 1, 0);
    int64_t act_floats = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = static_cast<int64_t>(rows[e].size());
      first_row[e + 1] = first_row[e] + n;
      act_floats = std::max(act_floats, n * (2 * D + experts[e].gate.rows + experts[e].up.rows));
    }
    const int64_t n_all = first_row[E];
    std::vector<uint8_t> meta(static_cast<size_t>(n_all) * 12);
    for (int64_t e = 0; e < E; ++e) {
      std::memcpy(meta.data() + first_row[e] * 8, rows[e].data(), rows[e].size() * 8);
      std::memcpy(meta.data() + n_all * 8 + first_row[e] * 4, wts[e].data(), wts[e].size() * 4);
    }
    uint8_t* d_meta = Scratch<uint8_t>(ScratchPool::Buffer::kMoeMetadata, meta.size());
    float* act = Scratch<float>(ScratchPool::Buffer::kMoeActivations, act_floats * sizeof(float));
    if (d_meta == nullptr || act == nullptr ||
        !Check(cudaMemcpyAsync(d_meta, meta.data(), meta.size(), cudaMemcpyHostToDevice, stream_),
               "MoeExperts routing upload"))
      return;
    const int64_t* d_rows = reinterpret_cast<const int64_t*>(d_meta);
    const float* d_wts = reinterpret_cast<const float*>(d_meta + n_all * 8);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = static_cast<int64_t>(rows[e].size());
      if (n == 0) continue;
      const ExpertWeights& w = experts[e];
      float* base = act;
      Tensor xe = ActTensor(base, {n, D}), g = ActTensor(base + n * D, {n, w.gate.rows}),
             u = ActTensor(base + n * (D + w.gate.rows), {n, w.up.rows}),
             d = ActTensor(base + n * (D + w.gate.rows + w.up.rows), {n, D});
      GatherRowsKernel<<<Blocks(n * D), kThreads, 0, stream_>>>(
          x.data<const float>(), d_rows + first_row[e], n, D, xe.data<float>());
      Linear(xe, w.gate, g);
      Linear(xe, w.up, u);
      SwiGlu(g, u, g);
      Linear(g, w.down, d);
      LaunchScatterAddRows(out.data<float>(), D, d.data<const float>(), d_rows + first_row[e],
                           d_wts + first_row[e], n, stream_);
    }
  }
  void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                   std::span<const int64_t> pool_rows) const override {
    const int64_t T = static_cast<int64_t>(pool_rows.size());
    LUCID_CHECK(parts.size() <= static_cast<size_t>(kMaxKvParts), "WriteKvRows: too many parts");
    KvParts kp;
    int64_t width = 0;
    for (const Tensor* p : parts) {
      CheckDevices(*this, "WriteKvRows", {p});
      LUCID_CHECK(p->dtype() == DType::kF32 && p->rank() == 2 && p->size(0) == T,
                  "WriteKvRows: every part must be f32 [T, w] with T = " + std::to_string(T));
      kp.data[kp.count] = p->data<const float>();
      kp.width[kp.count++] = p->size(1);
      width += p->size(1);
    }
    LUCID_CHECK(width == out.fmt.row_floats, "WriteKvRows: the parts' widths differ from the row");
    LUCID_CHECK(out.fmt.row_bytes == KvRowBytes(out.fmt), "WriteKvRows: row_bytes of the format");
    for (int64_t r : pool_rows)
      LUCID_CHECK(r >= 0 && r < out.rows, "WriteKvRows: pool row out of range");
    if (T == 0) return;
    const int64_t* d_rows = static_cast<const int64_t*>(
        scratch_.Upload(ScratchPool::Buffer::kKvRows, pool_rows.data(), pool_rows.size_bytes()));
    if (d_rows == nullptr) return;
    LaunchWriteKvRows(kp, T, static_cast<int>(out.fmt.kind), out.fmt.row_floats, out.fmt.fp8_values,
                      out.fmt.fp8_block > 0 ? out.fmt.fp8_block : 1, out.fmt.row_bytes, d_rows,
                      out.bytes, stream_);
  }
  void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k, int32_t offset,
                Tensor& out) const override {
    CheckDevices(*this, "TopKRows", {&scores, &out});
    const int64_t T = static_cast<int64_t>(lengths.size());
    LUCID_CHECK(scores.dtype() == DType::kF32 && scores.rank() == 2 && scores.size(0) == T,
                "TopKRows: scores must be f32 [T, S]");
    LUCID_CHECK(out.dtype() == DType::kI32 && out.rank() == 2 && out.size(0) == T &&
                    out.size(1) >= k && k >= 0,
                "TopKRows: out must be i32 [T, >= k]");
    for (int64_t n : lengths)
      LUCID_CHECK(n >= 0 && n <= scores.size(1), "TopKRows: a length past the scores");
    if (T == 0 || Failed()) return;
    const int64_t* d_len = static_cast<const int64_t*>(
        scratch_.Upload(ScratchPool::Buffer::kLengths, lengths.data(), lengths.size_bytes()));
    uint64_t* sort = nullptr;
    if (d_len == nullptr || !TopKScratch(T, k, &sort)) return;
    LaunchTopKRows(scores.data<const float>(), scores.size(1), d_len, T, k, offset,
                   out.data<int32_t>(), out.size(1), sort, stream_);
  }
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override {
    CheckDevices(*this, "SampleRows", {&logits, &scratch, &tokens, &logprobs, &top_ids});
    CheckSampleRows(logits, rows, edits, scratch, tokens, logprobs, top_ids);
    const int64_t R = logits.size(0);
    if (R == 0) return;
    // The rows, then the edits, in one upload (Upload's buffer holds one op's metadata).
    const size_t rb = rows.size_bytes(), eb = edits.size_bytes();
    std::vector<uint8_t> meta(rb + eb);
    std::memcpy(meta.data(), rows.data(), rb);
    if (eb > 0) std::memcpy(meta.data() + rb, edits.data(), eb);
    const uint8_t* d = static_cast<const uint8_t*>(Upload(meta.data(), meta.size()));
    if (d == nullptr) return;
    LaunchSampleRows(
        logits.data<const float>(), R, logits.size(1), reinterpret_cast<const RowSampling*>(d),
        reinterpret_cast<const LogitEdit*>(d + rb), scratch.data<float>(), tokens.data<int32_t>(),
        logprobs.data<float>(), top_ids.numel() > 0 ? top_ids.data<int32_t>() : nullptr,
        top_ids.size(1), stream_);
  }
  void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const override {
    CheckDevices(*this, "ApplyTokenBitmask", {&logits, &bitmask});
    CheckTokenBitmask(logits, bitmask);
    LaunchApplyTokenBitmask(logits.data<float>(), bitmask.data<const int32_t>(), logits.size(0),
                            logits.size(1), stream_);
  }
  void CopyFromHost(const void* src, void* dst, size_t bytes) const override {
    if (bytes == 0) return;
    // From pageable host memory the copy is staged before the call returns: src may be reused.
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyFromHost");
  }
  Status CopyToHost(const void* src, void* dst, size_t bytes) const override {
    if (bytes > 0)
      LUCID_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    return Synchronize();
  }

  // The first failure since the last call: a CUDA error, else scratch the device could not give
  // (ResourceExhausted; the op that asked launched nothing), else a cuBLAS or CUDA call's error.
  Status Synchronize() const override {
    Status cuda = CudaStatus(cudaGetLastError(), "a kernel launch");
    if (cuda.ok()) cuda = CudaStatus(cudaStreamSynchronize(stream_), "the ops' stream");
    Status scratch = scratch_.TakeError(), matmul = matmul_.TakeError();
    Status call = std::move(error_);
    error_ = OkStatus();
    if (!cuda.ok()) return cuda;
    if (!scratch.ok()) return scratch;
    return matmul.ok() ? call : matmul;
  }

  std::optional<int64_t> scratch_held_bytes() const override { return scratch_.held_bytes(); }

  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override {
    LUCID_CHECK(k <= n, "TopK k > n");
    uint64_t* sort = nullptr;
    if (k > 0 && !Failed() && TopKScratch(1, k, &sort))
      LaunchTopK(scores, n, k, out, sort, stream_);
  }
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const override {
    CheckDevices(*this, "MlaAbsorbQuery", {&q, &kv_b.data, &kv_b.scale, &kv_b.scale2, &q_latent});
    const int64_t R = kv_b.cols, T = q.size(0);
    LUCID_CHECK(kv_b.rows == heads * (nope_dim + v_dim) && q.numel() == T * heads * q_stride &&
                    q_latent.numel() == T * heads * R,
                "MlaAbsorbQuery shape mismatch for " + kv_b.name);
    if (T > 0) matmul_.MlaAbsorbQuery(q, heads, q_stride, nope_dim, v_dim, kv_b, T, q_latent);
  }
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, Tensor& out) const override {
    CheckDevices(*this, "MlaProjectOutput", {&latent, &kv_b.data, &kv_b.scale, &kv_b.scale2, &out});
    const int64_t R = kv_b.cols, T = latent.size(0);
    LUCID_CHECK(kv_b.rows == heads * (nope_dim + v_dim) && latent.numel() == T * heads * R &&
                    out.numel() == T * heads * v_dim,
                "MlaProjectOutput shape mismatch for " + kv_b.name);
    if (T > 0) matmul_.MlaProjectOutput(latent, heads, nope_dim, v_dim, kv_b, T, out);
  }

 private:
  // Whether a failure waits for Synchronize. The ops whose inputs may hold device indices made by
  // an earlier op of the step (attention, the indexer, top-k, MoE) then launch nothing: a skipped
  // op leaves its output unset. A mid-step wait (the numerics check's copy) takes the failure and
  // lifts this; the kernels' own range checks cover the rest of the step (an attention index
  // outside the page table scores NaN, cuda_kv_rows.cuh; an expert id outside the experts makes
  // its row NaN, cuda_moe_gemv.h), whose Forward returns the failure.
  bool Failed() const { return !error_.ok() || scratch_.failed() || matmul_.failed(); }
  // Keeps the first failed call for Synchronize; false if `e` is an error.
  bool Check(cudaError_t e, const char* what) const {
    if (e == cudaSuccess) return true;
    if (error_.ok()) error_ = CudaStatus(e, std::string("cuda: ") + what);
    return false;
  }
  template <typename T>
  T* Scratch(ScratchPool::Buffer b, int64_t bytes) const {
    return static_cast<T*>(scratch_.Get(b, static_cast<size_t>(std::max<int64_t>(bytes, 0))));
  }
  // The experts' views in a device table (MoeExpertTables); nullptr when they are not of one
  // format and shape (nothing launched), or when the table could not be made (the failure kept).
  const DeviceWeight* ExpertTable(std::span<const ExpertWeights> experts,
                                  const std::vector<DeviceWeight>& views) const {
    if (views.empty()) return nullptr;
    for (const ExpertWeights& e : experts)
      CheckDevices(*this, "MoeExperts", {&e.gate.data, &e.up.data, &e.down.data});
    StatusOr<const DeviceWeight*> table = moe_tables_.Get(views);
    if (table.ok()) return *table;
    if (error_.ok()) error_ = table.status().WithContext("MoeExperts");
    return nullptr;
  }
  // MoeExperts grouped by expert on the device (cuda_moe_grouped.h) under cuda-bf16act for
  // packed experts the weight-only GEMM takes (not cuda-fp8act's FP8 experts, whose activations
  // are quantized); false (nothing launched) otherwise.
  bool MoeExpertsGrouped(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                         const Tensor& weights, Tensor& out) const {
    const int64_t T = x.size(0), D = x.size(1), k = idx.size(1);
    if (!matmul_.bf16_act()) return false;
    const std::vector<DeviceWeight> views = MoeExpertViews(experts, D);
    if (!MoeGroupedFits(views) ||
        (matmul_.fp8_act() && experts[0].gate.format == WeightFormat::kFp8Block))
      return false;
    const DeviceWeight* table = ExpertTable(experts, views);
    if (table == nullptr) return true;  // failed: nothing launched
    const int64_t E = static_cast<int64_t>(experts.size()), I = experts[0].gate.rows;
    void* scratch = Scratch<void>(ScratchPool::Buffer::kMoeActivations,
                                  static_cast<int64_t>(MoeGroupedScratchBytes(T, k, E, D, I)));
    if (scratch == nullptr) return true;
    MoeGroupedArgs a;
    a.experts = table;
    a.gate = views[0];
    a.down = views[2];
    a.E = E;
    a.T = T;
    a.k = k;
    a.idx = idx.data<const int32_t>();
    a.weights = weights.data<const float>();
    a.x = x.data<const float>();
    a.out = out.data<float>();
    LaunchMoeGrouped(a, scratch, stream_);
    return true;
  }
  // MoeExperts with the routing read on the device (cuda_moe_gemv.h), for experts of one format
  // and shape; false (nothing launched) otherwise.
  bool MoeExpertsOnDevice(const Tensor& x, std::span<const ExpertWeights> experts,
                          const Tensor& idx, const Tensor& weights, Tensor& out) const {
    const int64_t T = x.size(0), D = x.size(1), k = idx.size(1);
    const std::vector<DeviceWeight> views = MoeExpertViews(experts, D);
    if (views.empty()) return false;
    const DeviceWeight* table = ExpertTable(experts, views);
    if (table == nullptr) return true;  // failed: nothing launched
    const WeightFormat format = experts[0].gate.format;
    const int64_t I = experts[0].gate.rows;
    const bool fp8 = matmul_.fp8_act() && format == WeightFormat::kFp8Block;
    MoeGemvArgs a = MoeArgsFor(table, static_cast<int64_t>(experts.size()), D, I, idx, weights,
                               format, matmul_.bf16_act(), matmul_.fp8_act());
    // h [T * k, I], then under cuda-fp8act the quantized x [T, D] and h [T * k, I]
    const int64_t h_floats = T * k * I;
    float* h = Scratch<float>(ScratchPool::Buffer::kMoeActivations,
                              (h_floats + (fp8 ? T * D + h_floats : 0)) * sizeof(float));
    if (h == nullptr) return true;
    float* xq = fp8 ? h + h_floats : nullptr;
    float* hq = fp8 ? h + h_floats + T * D : nullptr;
    const float* x_in = fp8 ? xq : x.data<const float>();
    const float* h_in = fp8 ? hq : h;
    a.vec_gate_up = MoeVectorizable(views, 0, x_in, D) && MoeVectorizable(views, 1, x_in, D);
    a.vec_down = MoeVectorizable(views, 2, h_in, I);
    if (fp8) LaunchQuantizeFp8Act(x.data<const float>(), T, D, nullptr, nullptr, xq, stream_);
    LaunchMoeGateUp(a, x_in, h, stream_);
    if (fp8) LaunchQuantizeFp8Act(h, T * k, I, nullptr, nullptr, hq, stream_);
    LaunchMoeDownCombine(a, h_in, out.data<float>(), stream_);
    return true;
  }
  // The top-k kernels' sort scratch for T rows in *words (null where the sort fits in shared
  // memory); false when it cannot be had.
  bool TopKScratch(int64_t T, int64_t k, uint64_t** words) const {
    const int64_t n = TopKScratchWords(T, k);
    *words = n == 0 ? nullptr : Scratch<uint64_t>(ScratchPool::Buffer::kTopK, n * 8);
    return n == 0 || *words != nullptr;
  }
  // An f32 device tensor over `p` (MoeExperts' buffer of per-expert activations).
  static Tensor ActTensor(float* p, Shape shape) {
    return Tensor::Borrow(DType::kF32, std::move(shape), p, nullptr, Device::kCuda);
  }
  // A device copy of host metadata, in a buffer reused by the next op; nullptr on failure.
  const void* Upload(const void* host, size_t bytes) const {
    return scratch_.Upload(ScratchPool::Buffer::kMetadata, host, bytes);
  }

  cudaStream_t stream_;
  mutable ScratchPool scratch_{CudaScratchMemory(stream_)};
  CudaMatmul matmul_;                            // after scratch_, which it uses
  mutable MoeExpertTables moe_tables_{stream_};  // MoeExpertsOnDevice's expert views
  mutable Status error_;                         // the first failed call since Synchronize
};

}  // namespace

std::vector<std::string> CudaOpNames() { return OpNames(); }  // every op has a kernel

bool CudaImplements(std::string_view op) {
  for (const std::string& o : CudaOpNames())
    if (o == op) return true;
  return false;
}

std::unique_ptr<Ops> MakeCudaReferenceOps(cudaStream_t stream) {
  return std::make_unique<CudaOps>(stream, MatmulInputs::kF32);
}

std::unique_ptr<Ops> MakeCudaBf16ActOps(cudaStream_t stream) {
  return std::make_unique<CudaOps>(stream, MatmulInputs::kBf16);
}

std::unique_ptr<Ops> MakeCudaFp8ActOps(cudaStream_t stream) {
  return std::make_unique<CudaOps>(stream, MatmulInputs::kFp8);
}

const std::vector<CudaOpsSet>& CudaOpsSets() {
  static const std::vector<CudaOpsSet> sets = {
      {"cuda-reference", "reference", ConformancePrecision::kF32, MakeCudaReferenceOps},
      {"cuda-bf16act", "bf16act", ConformancePrecision::kBf16Act, MakeCudaBf16ActOps},
      {"cuda-fp8act", "fp8act", ConformancePrecision::kFp8Act, MakeCudaFp8ActOps}};
  return sets;
}

const CudaOpsSet* FindCudaOpsSet(std::string_view kernel) {
  for (const CudaOpsSet& s : CudaOpsSets())
    if (kernel == s.kernel) return &s;
  return nullptr;
}

}  // namespace lucid::cuda
