// Split-K MLA attention (cuda_mla_split.cuh) run on the CPU phase by phase as the kernels'
// barriers order them, over host KV rows read through cuda_kv_rows.cuh: through the ops
// conformance suite's MlaAttention cases (sparse and dense, every KV kind, NaN and infinities in
// q and in the cache, a row attending nothing) against the CPU reference, with splits of 256
// tokens (the kernels') and of 7 (many splits, some of them empty); and the row decoding against
// PagedRows::ReadRow. Runs without a GPU.
#include "backends/cuda/cuda_mla_split.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_conformance_test_util.h"
#include "backends/cuda/cuda_mla_test_util.h"
#include "backends/cuda/cuda_phase_test_util.h"
#include "ops/forwarding_ops.h"

namespace lucid::cuda {
namespace {

class MlaSplitEmulation final : public ForwardingOps {
 public:
  explicit MlaSplitEmulation(int64_t len, ThreadOrder order = ThreadOrder::kForward)
      : ForwardingOps(ref_), len_(len), order_(order) {}
  void MlaAttention(const MlaAttentionArgs& a) const override {
    const DeviceRows kv = ToDevice(a.kv);
    const int64_t rows = a.selected ? a.selected_stride
                                    : static_cast<int64_t>(a.kv.page_table.size()) * a.kv.page_size;
    const int64_t splits = std::max<int64_t>(1, (rows + len_ - 1) / len_);
    const int64_t stride = MlaPartFloats(a.latent_dim);
    std::vector<float> parts(static_cast<size_t>(a.tokens * a.heads * splits * stride));
    for (int64_t th = 0; th < a.tokens * a.heads; ++th) {
      for (int64_t s = 0; s < splits; ++s) {
        MlaSplitState st{};
        MlaSplitPhases(st, a, kv, th, s, len_, parts.data() + (th * splits + s) * stride,
                       EveryThread<kMlaSplitThreads>(order_));
      }
      MlaCombineState cs{};
      MlaCombinePhases(cs, a, th, splits, parts.data() + th * splits * stride,
                       EveryThread<kMlaSplitThreads>(order_));
    }
  }

 private:
  const CpuOps ref_;
  int64_t len_;
  ThreadOrder order_;
};

TEST(CudaMlaSplitTest, SplitKPassesTheAttentionCases) {
  for (ThreadOrder order : kThreadOrders)
    for (int64_t len : {int64_t{kMlaSplitThreads}, int64_t{7}}) {
      SCOPED_TRACE(OrderName(order) + ", splits of " + std::to_string(len));
      const MlaSplitEmulation ops(len, order);
      EXPECT_GT(ExpectConformance(ops, ConformancePrecision::kF32, {"MlaAttention"}).size(), 50u);
    }
}

// A NaN score alone in the last split (257 tokens in splits of 256, the newest key NaN) makes the
// row NaN as in the reference: its split is not taken for an empty one.
TEST(CudaMlaSplitTest, ANanScoreAloneInASplitPoisonsTheRow) {
  const int64_t n = 257, R = 8, P = 2;
  SmallMlaCase c(1, 1, R, P, 64, 5, 97);
  c.store[(n - 1) * (R + P) + 1] = std::numeric_limits<float>::quiet_NaN();
  c.count = {static_cast<int32_t>(n)};
  MlaAttentionArgs a = c.Args();
  MlaSplitEmulation(kMlaSplitThreads).MlaAttention(a);
  std::vector<float> want(R);
  a.out_latent = want.data();
  CpuOps().MlaAttention(a);
  for (int64_t i = 0; i < R; ++i) {
    EXPECT_TRUE(std::isnan(want[i])) << i;
    EXPECT_TRUE(std::isnan(c.out[i])) << i;
  }
}

// A selected index outside the page table (a top-k result an op left unset after a failure the
// step reports) scores NaN, so its row comes out NaN, and reads token 0's row rather than memory
// past the pool; the other rows are untouched.
TEST(CudaMlaSplitTest, ASelectedIndexOutsideThePageTablePoisonsItsRowOnly) {
  const int64_t R = 8, k = 3;
  SmallMlaCase c(2, 1, R, 2, 4, 2, 31);
  c.table = {1, 0};
  c.count = {k, k};
  c.selected = {0, 5, 7, 2, 1 << 30, -7};  // row 1: out of range both ways
  MlaAttentionArgs a = c.Args(k);
  MlaSplitEmulation(kMlaSplitThreads).MlaAttention(a);
  // The reference on row 0 alone (its indices are valid).
  std::vector<float> want(R);
  a.tokens = 1;
  a.out_latent = want.data();
  CpuOps().MlaAttention(a);
  for (int64_t i = 0; i < R; ++i) {
    EXPECT_NEAR(c.out[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-7f) << i;
    EXPECT_TRUE(std::isnan(c.out[R + i])) << i;
  }
}

TEST(CudaMlaSplitTest, RowsDecodeAsReadRowDoes) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (KvRowKind kind : {KvRowKind::kF32, KvRowKind::kBF16, KvRowKind::kFp8}) {
    // 4 pages of 5 rows of 37 values; FP8: 24 e4m3 values in blocks of 16, then a bf16 tail.
    const int64_t page = 5, pages = 4, width = 37;
    std::vector<float> store(static_cast<size_t>(pages * page * width));
    for (float& v : store) v = u(rng);
    std::vector<int32_t> table = {2, 0, 3, 1};
    PagedRows r;
    r.base = store.data();
    r.page_table = table;
    r.page_size = page;
    r.page_stride = page * width;
    r.row_floats = width;
    std::vector<uint8_t> bytes;
    if (kind != KvRowKind::kF32) {
      r.kind = kind;
      r.fp8_values = kind == KvRowKind::kFp8 ? 24 : 0;
      r.fp8_block = kind == KvRowKind::kFp8 ? 16 : 0;
      r.row_bytes = KvRowBytes(r);
      r.page_bytes = page * r.row_bytes;
      bytes.resize(static_cast<size_t>(pages * r.page_bytes));
      for (int64_t i = 0; i < pages * page; ++i)
        EncodeKvRow(r, store.data() + i * width, bytes.data() + i * r.row_bytes);
      r.bytes = bytes.data();
      r.base = nullptr;
    }
    const DeviceRows d = ToDevice(r);
    std::vector<float> want(static_cast<size_t>(width));
    for (int64_t tok = 0; tok < pages * page; ++tok) {
      r.ReadRow(tok, want.data());
      for (int64_t i = 0; i < width; ++i)
        ASSERT_EQ(RowValue(d, tok, i), want[i]) << static_cast<int>(kind) << " " << tok << " " << i;
    }
  }
}

}  // namespace
}  // namespace lucid::cuda
