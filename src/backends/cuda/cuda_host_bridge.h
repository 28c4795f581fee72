// HostBridgeOps: the ops of a CUDA backend presented over host tensors, for the ops conformance
// suite (backends/cpu/ops_conformance.h) and `lucid backends --self-test`: each call copies its
// host inputs (and weights) to the device, runs the device op, waits, and copies the outputs back
// into the caller's host tensors. Slow by design (a copy per call); never used to serve.
// Every op is bridged (the raw arrays of the attention ops and TopK are copied too). A device error
// aborts with its Status message: the suite has no other way to report it, and the self-test runs
// in its own process. Ownership: borrows the backend, which must outlive the bridge. Thread-safety:
// one thread at a time.
#pragma once

#include "backends/cuda/cuda_backend.h"
#include "ops/ops.h"

namespace lucid::cuda {

class HostBridgeOps final : public Ops {
 public:
  explicit HostBridgeOps(CudaBackend& backend) : b_(backend) {}
  const char* name() const override { return b_.ops().name(); }
  Device device() const override { return Device::kCpu; }

  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override;
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override;
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override;
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 Tensor& y) const override;
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override;
  void Accumulate(Tensor& x, const Tensor& y) const override;
  void Scale(Tensor& x, float s) const override;
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override;
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override;
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override;
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override;
  void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const override;

  void Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset, const RopeTable& table,
            std::span<const int64_t> positions, RopeStyle style) const override;
  void MlaAttention(const MlaAttentionArgs& a) const override;
  void IndexerScores(const IndexerArgs&) const override;
  void GqaAttention(const GqaAttentionArgs&) const override;
  void TopK(const float*, int64_t, int64_t, int32_t*) const override;
  void MoeRoute(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, bool, float, Tensor&,
                Tensor&) const override;
  void MoeExperts(const Tensor&, std::span<const ExpertWeights>, const Tensor&, const Tensor&,
                  Tensor&) const override;
  void MlaAbsorbQuery(const Tensor&, int64_t, int64_t, int64_t, int64_t, const Weight&,
                      Tensor&) const override;
  void MlaProjectOutput(const Tensor&, int64_t, int64_t, int64_t, const Weight&,
                        Tensor&) const override;
  void WriteKvRows(std::span<const Tensor* const>, const KvRowsOut&,
                   std::span<const int64_t>) const override;
  void TopKRows(const Tensor&, std::span<const int64_t>, int64_t, int32_t, Tensor&) const override;

 private:
  Tensor Up(const Tensor& host) const;               // device copy (an empty tensor stays empty)
  Weight Up(const Weight& host) const;               // every part of the weight
  void Down(const Tensor& dev, Tensor& host) const;  // waits, then copies into `host`
  CudaBackend& b_;
};

}  // namespace lucid::cuda
