// The per-item bodies of cuda_step_kernels.cu (cuda_step_items.cuh), run on the CPU item by item
// as the grid loops run them: through the ops conformance suite's Rope, MoeRoute and WriteKvRows
// cases (both RoPE layouts; group-limited routing with ties, NaN and infinities; every KV row
// kind with NaN, infinities and values past e4m3's range) against the CPU reference; and the
// bf16 and e4m3 encoders against core/dtype.h's over a sweep of float bit patterns. Runs without
// a GPU.
#include "backends/cuda/cuda_step_items.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "core/dtype.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

// CudaOps' Rope, MoeRoute and WriteKvRows with each kernel's grid loop run on the host.
class StepItemsEmulation final : public ForwardingOps {
 public:
  StepItemsEmulation() : ForwardingOps(ref_) {}
  void Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset, const RopeTable& table,
            std::span<const int64_t> positions, RopeStyle style) const override {
    const int64_t T = static_cast<int64_t>(positions.size()), half = table.dim() / 2;
    const std::vector<float> cs = RopeCosSin(table, positions);
    for (int64_t j = 0; j < T * heads * half; ++j)
      RopeItem(x.data<float>(), heads, head_stride, offset, half, cs.data(),
               style == RopeStyle::kInterleaved, j);
  }
  void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, Tensor& idx,
                Tensor& weights) const override {
    const int64_t T = logits.size(0), E = logits.size(1);
    std::vector<float> scratch(static_cast<size_t>(T * (2 * E + n_group)));
    for (int64_t t = 0; t < T; ++t)
      MoeRouteRow(logits.data<const float>(), E, bias.raw() ? bias.data<const float>() : nullptr,
                  n_group, topk_group, k, norm_topk_prob, scaling, scratch.data(),
                  idx.data<int32_t>(), weights.data<float>(), t);
  }
  void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                   std::span<const int64_t> pool_rows) const override {
    KvParts kp;
    for (const Tensor* p : parts) {
      kp.data[kp.count] = p->data<const float>();
      kp.width[kp.count++] = p->size(1);
    }
    for (size_t t = 0; t < pool_rows.size(); ++t)
      WriteKvRow(kp, static_cast<int64_t>(t), static_cast<int>(out.fmt.kind), out.fmt.row_floats,
                 out.fmt.fp8_values, out.fmt.fp8_block > 0 ? out.fmt.fp8_block : 1,
                 out.bytes + pool_rows[t] * out.fmt.row_bytes);
  }

 private:
  const CpuOps ref_;
};

TEST(CudaStepItemsTest, TheItemBodiesPassTheRopeRoutingAndKvRowCases) {
  const StepItemsEmulation ops;
  const std::vector<ConformanceCase> cases =
      ExpectConformance(ops, ConformancePrecision::kF32, {"Rope", "MoeRoute", "WriteKvRows"});
  for (const char* op : {"Rope", "MoeRoute", "WriteKvRows"}) EXPECT_GT(CasesOf(cases, op), 0) << op;
  EXPECT_GT(cases.size(), 20u);
}

// Every 4099th float bit pattern (all exponents, both signs, NaN payloads) and the edges of each
// encoder's ranges: the device encoders equal core/dtype.h's bit for bit.
TEST(CudaStepItemsTest, TheEncodersEqualTheHostsOverTheFloatBits) {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) bits.push_back(static_cast<uint32_t>(b));
  for (float v : {0.0f, -0.0f, 448.0f, 464.0f, 447.99f, 0.015625f, 0.0156249f, 0.001953125f,
                  0.0009765625f, 0.00146484375f, 240.0f, 248.0f, 1e-30f, 3.0e38f})
    for (float s : {1.0f, -1.0f}) {
      float x = v * s;
      uint32_t u;
      std::memcpy(&u, &x, 4);
      for (int d = -2; d <= 2; ++d) bits.push_back(u + static_cast<uint32_t>(d));
    }
  bits.push_back(0x7F800000u);
  bits.push_back(0xFF800000u);
  int bf16_diff = 0, e4m3_diff = 0;
  for (uint32_t u : bits) {
    float v;
    std::memcpy(&v, &u, 4);
    if (Bf16BitsRne(v) != F32ToBf16(v) && ++bf16_diff < 5)
      ADD_FAILURE() << "bf16 of bits 0x" << std::hex << u;
    if (E4m3SaturateCode(v) != F32ToF8E4M3Saturate(v) && ++e4m3_diff < 5)
      ADD_FAILURE() << "e4m3 of bits 0x" << std::hex << u;
  }
  EXPECT_EQ(bf16_diff, 0);
  EXPECT_EQ(e4m3_diff, 0);
  EXPECT_GT(bits.size(), 1000000u);
}

}  // namespace
}  // namespace lucid::cuda
