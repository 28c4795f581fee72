// The per-element bodies of the indexing elementwise kernels (cuda_elementwise_items.cuh), run on
// the CPU element by element as the grid loops run them, through the ops conformance suite's
// Embedding (every weight format), SwiGlu, CopyColumns, GatherRows and ApplyTokenBitmask cases
// (NaN and infinities planted) against the CPU reference. Runs without a GPU.
#include "backends/cuda/cuda_elementwise_items.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

// CudaOps' indexing elementwise ops with each kernel's grid loop run on the host.
class ElementwiseItemsEmulation final : public ForwardingOps {
 public:
  ElementwiseItemsEmulation() : ForwardingOps(ref_) {}
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override {
    const DeviceWeight w = DeviceWeightOf(table);
    const int64_t n = static_cast<int64_t>(ids.size()) * table.cols;
    for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = EmbeddingItem(w, ids.data(), i);
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override {
    for (int64_t i = 0; i < gate.numel(); ++i)
      out.data<float>()[i] = SwiGluValue(gate.data<const float>()[i], up.data<const float>()[i]);
  }
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override {
    const int64_t T = x.size(0), x_width = x.numel() / T;
    for (int64_t i = 0; i < T * groups * width; ++i)
      out.data<float>()[i] =
          CopyColumnsItem(x.data<const float>(), x_width, groups, group_stride, offset, width, i);
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override {
    const int64_t D = x.size(1), n = static_cast<int64_t>(rows.size());
    for (int64_t i = 0; i < n * D; ++i)
      out.data<float>()[i] = GatherRowsItem(x.data<const float>(), rows.data(), D, i);
  }
  void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const override {
    const int64_t V = logits.size(1);
    for (int64_t i = 0; i < logits.numel(); ++i)
      if (!TokenAllowedItem(bitmask.data<const int32_t>(), V, i))
        logits.data<float>()[i] = -INFINITY;
  }

 private:
  const CpuOps ref_;
};

TEST(CudaElementwiseItemsTest, TheItemBodiesPassTheirOpsCases) {
  const ElementwiseItemsEmulation ops;
  const std::vector<std::string> names = {"Embedding", "SwiGlu", "CopyColumns", "GatherRows",
                                          "ApplyTokenBitmask"};
  const std::vector<ConformanceCase> cases =
      ExpectConformance(ops, ConformancePrecision::kF32, names);
  for (const std::string& op : names) EXPECT_GE(CasesOf(cases, op), 6) << op;
}

}  // namespace
}  // namespace lucid::cuda
