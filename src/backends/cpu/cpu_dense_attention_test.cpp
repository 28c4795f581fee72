// MlaAttention's dense mode (no index list: each query attends to consecutive tokens) against the
// same problem given as a sparse list, and its memory at a 64k-token context: the bytes the fast
// kernels allocate in a call do not grow with the context.
//
// This binary's operator new counts the bytes allocated while a test asks it to (AllocationCount);
// everything else allocates as usual.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/parallel.h"

// The replaced operator new allocates with malloc and the replaced deletes free with free; GCC
// sees the inlined pair as mismatched and warns, wrongly for a replacement of both.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocated{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocated.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RelErr;

// Bytes allocated through operator new, by every thread, while it lives.
class AllocationCount {
 public:
  AllocationCount() {
    g_allocated = 0;
    g_counting = true;
  }
  ~AllocationCount() { g_counting = false; }
  int64_t bytes() const { return g_allocated.load(); }
};

// A paged f32 KV of `tokens` random rows, pages of `page` rows in reverse order.
struct PagedKv {
  Tensor store;
  std::vector<int32_t> table;
  PagedRows rows;
  PagedKv(int64_t tokens, int64_t row_floats, int64_t page, uint32_t seed) {
    const int64_t pages = (tokens + page - 1) / page;
    store = Random({pages * page, row_floats}, seed);
    for (int64_t p = 0; p < pages; ++p) table.push_back(static_cast<int32_t>(pages - 1 - p));
    rows.base = store.data<float>();
    rows.page_table = table;
    rows.page_size = page;
    rows.page_stride = page * row_floats;
    rows.row_floats = row_floats;
  }
};

struct Problem {
  int64_t T, H, R, P;
  Tensor ql, qr;
  std::vector<int32_t> count, begin;
  MlaAttentionArgs Args(const PagedKv& kv, float* out) const {
    MlaAttentionArgs a;
    a.q_latent = ql.data<float>();
    a.q_rope = qr.data<float>();
    a.tokens = T;
    a.heads = H;
    a.latent_dim = R;
    a.rope_dim = P;
    a.scale = 0.2f;
    a.kv = kv.rows;
    a.selected_count = count.data();
    a.dense_begin = begin.empty() ? nullptr : begin.data();
    a.out_latent = out;
    return a;
  }
};

Problem MakeProblem(int64_t T, int64_t H, int64_t R, int64_t P, uint32_t seed) {
  return {T, H, R, P, Random({T, H, R}, seed), Random({T, H, P}, seed + 1), {}, {}};
}

std::vector<CpuIsa> Isas() {
  return {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16};
}

TEST(DenseAttentionTest, DenseEqualsTheSameTokensListed) {
  const int64_t ctx = 700;
  PagedKv kv(ctx, 37 + 11, 16, 3);
  Problem p = MakeProblem(6, 5, 37, 11, 4);
  // Windows of several lengths, one empty, one past kMaxItemRows, with and without a start.
  p.count = {1, 0, 17, 300, 513, 650};
  p.begin = {0, 0, 40, 5, 100, 50};
  const int64_t stride = 650;
  std::vector<int32_t> sel(p.T * stride);
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t j = 0; j < p.count[t]; ++j) sel[t * stride + j] = p.begin[t] + j;
  const CpuOps ref;
  std::vector<const Ops*> all = {&ref};
  std::vector<CpuFastOps> fast;
  for (CpuIsa isa : Isas()) fast.emplace_back(isa);
  for (const CpuFastOps& f : fast) all.push_back(&f);
  for (const Ops* ops : all) {
    Tensor dense = Tensor::Zeros(DType::kF32, {p.T, p.H, p.R}), listed = dense.Clone();
    MlaAttentionArgs a = p.Args(kv, dense.data<float>());
    ops->MlaAttention(a);
    a.selected = sel.data();
    a.selected_stride = stride;
    a.dense_begin = nullptr;
    a.out_latent = listed.data<float>();
    ops->MlaAttention(a);
    EXPECT_LE(RelErr(dense, listed), 1e-6) << ops->name();
    for (int64_t i = 0; i < p.H * p.R; ++i) ASSERT_EQ(dense.data<float>()[p.H * p.R + i], 0.0f);
  }
}

TEST(DenseAttentionTest, A64kContextAllocatesNoMoreThanAShortOne) {
  // 32 causal query rows at the end of a 64k-token context (a prefill chunk), 4 heads. As an
  // index list the selection alone would be 32 x 65536 ints = 8.4 MB.
  const int64_t ctx = 65536, T = 32, R = 32, P = 16;
  PagedKv kv(ctx, R + P, 64, 5);
  Problem p = MakeProblem(T, 4, R, P, 6);
  for (int64_t t = 0; t < T; ++t) p.count.push_back(static_cast<int32_t>(ctx - T + t + 1));
  // Partial slots are bounded by rows x threads with fewer rows than threads: at most 16 here.
  const int threads = NumThreads();
  SetNumThreads(std::min(threads, 16));
  const CpuOps ref;
  Tensor want = Tensor::Zeros(DType::kF32, {T, p.H, R});
  ref.MlaAttention(p.Args(kv, want.data<float>()));
  // The short context's call first, so that what a call keeps between calls is already there.
  Problem shortp = MakeProblem(T, 4, R, P, 6);
  for (int64_t t = 0; t < T; ++t) shortp.count.push_back(static_cast<int32_t>(1024 - T + t + 1));
  for (CpuIsa isa : Isas()) {
    const CpuFastOps fast(isa);
    Tensor got = want.Clone(), scratch = want.Clone();
    int64_t short_bytes = 0, long_bytes = 0;
    {
      AllocationCount count;
      fast.MlaAttention(shortp.Args(kv, scratch.data<float>()));
      short_bytes = count.bytes();
    }
    {
      AllocationCount count;
      fast.MlaAttention(p.Args(kv, got.data<float>()));
      long_bytes = count.bytes();
    }
    // Sums of 65k f32 terms in different orders (the reference adds them one by one).
    EXPECT_LE(RelErr(got, want), 1e-4) << CpuIsaName(isa);
    // Work items and partial slots are bounded by the rows and threads (a few KB per thread
    // here), never by the context: 64 times the context, at most 256 KB more.
    EXPECT_LE(long_bytes, short_bytes + (int64_t{256} << 10))
        << CpuIsaName(isa) << ": " << short_bytes << " bytes at 1k, " << long_bytes << " at 64k";
    EXPECT_LE(long_bytes, int64_t{2} << 20) << CpuIsaName(isa);
  }
  SetNumThreads(threads);
}

}  // namespace
}  // namespace lucid
