// CpuFastOps on packed weights (FP8 block, NVFP4) against the reference (DequantizeRowSpan and
// CpuOps): the decode kernels bit for bit on every code, Linear / LinearTransposed / MoeExperts on
// odd shapes (partial scale blocks at both ends, 1 row, many rows, row-range views whose scale rows
// straddle blocks), at every instruction-set level this machine has; and the all-heads MLA ops
// (MlaAbsorbQuery, MlaProjectOutput) against the per-head reference in every weight format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

using testing_util::Random;
using testing_util::RelErr;

const CpuOps kRef;

using testing_util::RandomFp8;
using testing_util::RandomNvfp4;

// kind 0: FP8 f32 scales, 1: FP8 ue8m0 scales, 2: NVFP4. A [rows] view from row `skip` of a
// [skip + rows + 3] parent.
Weight Packed(int kind, int64_t rows, int64_t cols, uint32_t seed, int64_t skip = 0) {
  const int64_t total = skip + rows + 3;
  Weight w = kind == 2 ? RandomNvfp4(total, cols, seed) : RandomFp8(total, cols, seed, kind == 1);
  return w.RowRange(skip, rows);
}

const char* KindName(int kind) { return kind == 0 ? "fp8" : kind == 1 ? "fp8-ue8m0" : "nvfp4"; }

class FastQuantTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuFastOps ops_{GetParam()};
};

// The decode kernels equal DequantizeRowSpan bit for bit, NaN codes included.
TEST_P(FastQuantTest, DecodeKernelsAreExact) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  if (!kt.dequant_fp8) GTEST_SKIP() << "no vector decode at this level";
  Weight w = RandomFp8(3, 300, 5, false, /*nan_codes=*/true);
  for (int64_t r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) w.data.data<uint8_t>()[r * 300 + i] = static_cast<uint8_t>(i);
  for (int64_t r = 0; r < 3; ++r) {
    if (r == 2)  // big scales too (the kernel's overflow-safe path)
      for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<float>()[i] *= 3e6f;
    for (int64_t n : {int64_t{128}, int64_t{37}, int64_t{1}, int64_t{44}}) {
      const int64_t c0 = n == 44 ? 256 : 0;  // a partial last block
      std::vector<float> ref(n), got(n);
      DequantizeRowSpan(w, r, c0, n, ref.data());
      const float s = w.scale.data<float>()[c0 / 128];
      kt.dequant_fp8(w.data.data<uint8_t>() + r * 300 + c0, s, got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(ref[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << i;
        } else {
          EXPECT_EQ(std::memcmp(&ref[i], &got[i], 4), 0)
              << r << " " << i << " " << ref[i] << " " << got[i];
        }
      }
    }
  }
  Weight q = RandomNvfp4(2, 64, 9);
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<float> ref(64), got(64), gs(4);
    DequantizeRowSpan(q, r, 0, 64, ref.data());
    for (int g = 0; g < 4; ++g) gs[g] = F8E4M3ToF32(q.scale.data<uint8_t>()[r * 4 + g]);
    kt.dequant_nvfp4(q.data.data<uint8_t>() + r * 32, gs.data(), *q.scale2.data<float>(),
                     got.data(), 4);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(std::memcmp(&ref[i], &got[i], 4), 0) << i;
  }
}

// The NVFP4 group-scale widening equals F8E4M3ToF32 on every code (NaN to NaN), at every length
// (vector body and masked tail) and every level, the scalar one included.
TEST_P(FastQuantTest, WidenE4m3IsExact) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  std::vector<uint8_t> codes(256 + 40);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 + (i >> 8));
  for (int64_t n : {int64_t{296}, int64_t{256}, int64_t{37}, int64_t{16}, int64_t{1}}) {
    std::vector<float> got(n + 1, -7.0f);
    kt.widen_e4m3(codes.data(), got.data(), n);
    EXPECT_EQ(got[n], -7.0f) << "wrote past n=" << n;
    for (int64_t i = 0; i < n; ++i) {
      const float ref = F8E4M3ToF32(codes[i]);
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(got[i])) << int{codes[i]};
      } else {
        EXPECT_EQ(std::memcmp(&ref, &got[i], 4), 0) << int{codes[i]} << " " << ref << " " << got[i];
      }
    }
  }
}

// The fused tiles' column orders: each a permutation of its block, and the vector permute puts
// value order[p] of every block at position p.
TEST_P(FastQuantTest, FusedXOrderPermutesEveryBlock) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  for (const fast::KernelTable::XOrder* o : {&kt.fp8_x_order, &kt.nvfp4_x_order}) {
    if (!o->permute) continue;  // no fused tiles at this level
    ASSERT_EQ(fast::kFusedPadK % o->block, 0);
    std::vector<int> seen(o->block, 0);
    for (int p = 0; p < o->block; ++p) ++seen.at(o->order[p]);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), o->block) << "not a permutation";
    const int64_t n = 3 * o->block;
    std::vector<uint16_t> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<uint16_t>(i * 37 + 5);
    std::vector<uint16_t> y = x;
    o->permute(y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[i], x[i / o->block * o->block + o->order[i % o->block]]) << "block " << o->block;
  }
}

// The activations' hi/lo bf16 split (the fused tiles' input) equals the scalar definition on
// normal values, infinities and NaN (to NaN), over vector bodies and masked tails; hi + lo carries
// x to about 2^-16 relative.
TEST_P(FastQuantTest, SplitBf16MatchesScalar) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  const fast::KernelTable& ref = fast::ScalarKernels();
  Tensor r = Random({1, 300}, 17);
  std::vector<float> x(r.data<float>(), r.data<float>() + 300);
  for (int i = 0; i < 300; i += 7) x[i] *= 1e20f;
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = -std::numeric_limits<float>::infinity();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = 0.0f;
  x[8] = 3.0f + 1.0f / 128.0f + 1.0f / 256.0f;  // a tie: rounds to even
  x[9] = std::numeric_limits<float>::max();     // rounds to Inf
  x[10] = -3 * std::numeric_limits<float>::denorm_min();
  x[11] = -(1.0f + 1.0f / 256.0f);  // a tie at the other parity
  x[20] = -std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {int64_t{300}, int64_t{37}, int64_t{16}, int64_t{1}}) {
    std::vector<uint16_t> hi(n + 1, 0xABCD), lo(n + 1, 0xABCD), rh(n), rl(n);
    kt.split_bf16(x.data(), hi.data(), lo.data(), n);
    ref.split_bf16(x.data(), rh.data(), rl.data(), n);
    EXPECT_EQ(hi[n], 0xABCD);
    EXPECT_EQ(lo[n], 0xABCD);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(Bf16ToF32(hi[i]))) << i;
        continue;
      }
      EXPECT_EQ(hi[i], rh[i]) << i << " " << x[i];
      if (std::isinf(x[i])) continue;  // lo of an infinity is inf - inf
      EXPECT_EQ(lo[i], rl[i]) << i << " " << x[i];
      if (std::isinf(Bf16ToF32(hi[i]))) continue;  // max float: hi Inf, lo -Inf
      EXPECT_LE(std::fabs(Bf16ToF32(hi[i]) + Bf16ToF32(lo[i]) - x[i]),
                std::fabs(x[i]) * 1.6e-5f + 1e-40f)  // + bf16's subnormal step
          << i;
    }
  }
}

TEST_P(FastQuantTest, LinearMatchesReference) {
  struct Case {
    int64_t T, N, K, skip;
  };
  const int64_t kWide = 128 * fast::kFp8TileBlocks + 300;
  for (int kind : {0, 1, 2}) {
    for (Case c : {Case{1, 13, 37, 0}, Case{1, 300, 1100, 100}, Case{2, 70, 129, 5},
                   Case{3, 33, 2051, 1}, Case{5, 45, 1100, 0}, Case{17, 9, 300, 2},
                   Case{67, 131, 71, 130}, Case{130, 40, 260, 0}, Case{1, 1, 16, 0},
                   // more columns than one FP8 tile call takes (128 * kFp8TileBlocks)
                   Case{1, 9, kWide, 0}, Case{2, 5, kWide, 3}}) {
      SCOPED_TRACE(std::string(KindName(kind)) + " T=" + std::to_string(c.T) +
                   " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                   " skip=" + std::to_string(c.skip));
      Weight w = Packed(kind, c.N, c.K, 7 + c.K, c.skip);
      Tensor x = Random({c.T, c.K}, 3 + c.T);
      Tensor y = Tensor::Zeros(DType::kF32, {c.T, c.N}), r = y.Clone();
      ops_.Linear(x, w, y);
      kRef.Linear(x, w, r);
      EXPECT_LE(RelErr(y, r), 2e-5);
    }
  }
}

TEST_P(FastQuantTest, LinearTransposedMatchesReference) {
  for (int kind : {0, 1, 2}) {
    for (int64_t T : {1, 4}) {
      Weight w = Packed(kind, 150, 301, 11, 7);
      Tensor x = Random({T, 150}, 12);
      Tensor y = Tensor::Zeros(DType::kF32, {T, 301}), r = y.Clone();
      ops_.LinearTransposed(x, w, y);
      kRef.LinearTransposed(x, w, r);
      EXPECT_LE(RelErr(y, r), 2e-5) << KindName(kind) << " T=" << T;
    }
  }
}

TEST_P(FastQuantTest, MoeExpertsMatchReference) {
  const int64_t E = 6, D = 48, I = 40, k = 2;
  for (int kind : {0, 2}) {
    for (int64_t T : {1, 9}) {
      std::vector<ExpertWeights> ex;
      for (int64_t e = 0; e < E; ++e)
        ex.push_back({Packed(kind, I, D, 100 + e), Packed(kind, I, D, 200 + e),
                      Packed(kind, D, I, 300 + e)});
      Tensor x = Random({T, D}, 17);
      std::vector<int32_t> idx;
      std::vector<float> wt;
      testing_util::Top2Routing(T, E, &idx, &wt);  // k == 2
      Tensor out = Random({T, D}, 18), ref = out.Clone();
      ops_.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), out);
      kRef.MoeExperts(x, ex, testing_util::IdxRows(idx, k), testing_util::WtRows(wt, k), ref);
      EXPECT_LE(RelErr(out, ref), 2e-5) << KindName(kind) << " T=" << T;
    }
  }
}

// kind 3: f32, 4: bf16, else Packed(kind).
Weight AnyWeight(int kind, int64_t rows, int64_t cols, uint32_t seed) {
  if (kind < 3) return Packed(kind, rows, cols, seed);
  return testing_util::RandomDense(kind == 4, rows, cols, seed, "kv_b");
}

TEST_P(FastQuantTest, MlaHeadOpsMatchReference) {
  struct Case {
    int64_t T, heads, nope, v, rope, R;
  };
  for (int kind : {0, 1, 2, 3, 4}) {
    // {1, 3, 24, 48, ..}: 3 heads x 2 items of W_uv rows, so with two threads head 1 is split
    // between them (both pack its latent), and each thread's absorption warms a next head.
    for (Case c : {Case{1, 3, 24, 20, 8, 200}, Case{2, 3, 24, 20, 8, 130},
                   Case{5, 4, 32, 48, 16, 130}, Case{1, 2, 5, 7, 3, 16}, Case{1, 3, 24, 48, 8, 512},
                   // 100 tokens: the absorption's GEMM at every level that has one (from 48-80
                   // tokens), 200 latent columns: a 72-column last chunk.
                   Case{100, 3, 24, 20, 8, 200}}) {
      SCOPED_TRACE(std::string("kind=") + std::to_string(kind) + " T=" + std::to_string(c.T) +
                   " R=" + std::to_string(c.R));
      // Whole kv_b matrix as the model passes it (the view starts at row 0 of its parent).
      Weight kv_b = AnyWeight(kind, c.heads * (c.nope + c.v), c.R, 40 + kind);
      kv_b = kv_b.RowRange(0, c.heads * (c.nope + c.v));
      const int64_t dq = c.nope + c.rope;
      Tensor q = Random({c.T, c.heads * dq}, 41);
      Tensor lat = Tensor::Zeros(DType::kF32, {c.T, c.heads * c.R}), lat_ref = lat.Clone();
      ops_.MlaAbsorbQuery(q, c.heads, dq, c.nope, c.v, kv_b, lat);
      kRef.MlaAbsorbQuery(q, c.heads, dq, c.nope, c.v, kv_b, lat_ref);
      EXPECT_LE(RelErr(lat, lat_ref), 2e-5);
      Tensor o = Tensor::Zeros(DType::kF32, {c.T, c.heads * c.v}), o_ref = o.Clone();
      ops_.MlaProjectOutput(lat_ref, c.heads, c.nope, c.v, kv_b, o);
      kRef.MlaProjectOutput(lat_ref, c.heads, c.nope, c.v, kv_b, o_ref);
      EXPECT_LE(RelErr(o, o_ref), 2e-5);
    }
  }
}

// The W_uk absorption against FP8 rows holding NaN codes (the one-token AVX2 kernel sums such a
// row one column at a time): the same NaN outputs as the reference, the finite ones close to it.
TEST_P(FastQuantTest, MlaAbsorbWithNanCodesMatchesReference) {
  const int64_t heads = 3, nope = 24, v = 20, rope = 8, R = 200, dq = nope + rope;
  Weight kv_b = testing_util::RandomFp8(heads * (nope + v), R, 71, false, /*nan_codes=*/true);
  kv_b = kv_b.RowRange(0, heads * (nope + v));
  for (int64_t T : {1, 2, 5}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    Tensor q = Random({T, heads * dq}, 72);
    Tensor lat = Tensor::Zeros(DType::kF32, {T, heads * R}), ref = lat.Clone();
    ops_.MlaAbsorbQuery(q, heads, dq, nope, v, kv_b, lat);
    kRef.MlaAbsorbQuery(q, heads, dq, nope, v, kv_b, ref);
    int64_t nan = 0;
    double err = 0, mag = 1e-30;
    for (int64_t i = 0; i < lat.numel(); ++i) {
      const float g = lat.data<float>()[i], e = ref.data<float>()[i];
      ASSERT_EQ(std::isnan(g), std::isnan(e)) << i << " " << g << " " << e;
      if (std::isnan(e)) {
        ++nan;
        continue;
      }
      err = std::max(err, double(std::abs(g - e)));
      mag = std::max(mag, double(std::abs(e)));
    }
    EXPECT_GT(nan, 0);                // the planted codes reach the output
    EXPECT_LT(nan, lat.numel() / 2);  // and not everything is NaN
    EXPECT_LE(err / mag, 2e-5);
  }
}

// 1 to 9 tokens (the AVX2 f32-activation FP8 tiles take 1 to 8, each its own row group) against
// FP8 rows with NaN codes in some rows, columns not a multiple of 128 (or 32) and NaN / Inf
// activations: the same non-finite entries as the reference and the finite ones close to it.
TEST_P(FastQuantTest, Fp8TokenTilesMatchReferenceWithNonFinite) {
  const fast::KernelTable& kt = fast::Kernels(ops_.isa());
  for (int kind : {0, 1})
    for (int64_t K : {int64_t{1283}, int64_t{256}, int64_t{45}})
      for (int64_t T = 1; T <= 9; ++T) {
        SCOPED_TRACE(std::string(KindName(kind)) + " T=" + std::to_string(T) +
                     " K=" + std::to_string(K));
        const int64_t N = 19;
        Weight w = Packed(kind, N, K, 90 + static_cast<uint32_t>(K), 2);
        w.data = w.data.Clone();
        uint8_t* q = w.data.data<uint8_t>() + 2 * K;  // view row 0
        q[3 * K + K / 2] = 0x7F;                      // rows 3 and 11: NaN codes
        q[11 * K + K - 1] = 0xFF;
        Tensor x = Random({T, K}, 5 + static_cast<uint32_t>(T));
        x.data<float>()[(T - 1) * K + K / 3] = std::numeric_limits<float>::infinity();
        if (T > 2) x.data<float>()[K + 1] = std::numeric_limits<float>::quiet_NaN();
        Tensor y = Tensor::Zeros(DType::kF32, {T, N}), r = y.Clone();
        ops_.Linear(x, w, y);
        kRef.Linear(x, w, r);
        double err = 0.0, mag = 1e-30;
        for (int64_t i = 0; i < T * N; ++i) {
          const float g = y.data<float>()[i], e = r.data<float>()[i];
          ASSERT_EQ(std::isfinite(g), std::isfinite(e)) << i << " " << g << " " << e;
          // Exactly the reference's NaN and signed infinities where x is not split (the hi/lo
          // split of avx512bf16 makes an infinity's lo inf - inf, so its sums are NaN).
          if (!kt.fp8_tiles[0].fn) {
            EXPECT_EQ(std::isnan(g), std::isnan(e)) << i << " " << g << " " << e;
            if (std::isinf(e)) {
              EXPECT_EQ(std::signbit(g), std::signbit(e)) << i;
            }
          }
          if (!std::isfinite(e)) continue;
          err = std::max(err, std::fabs(static_cast<double>(g) - e));
          mag = std::max(mag, std::fabs(static_cast<double>(e)));
        }
        EXPECT_LE(err / mag, 2e-5);
      }
}

// 1 to 9 tokens (the AVX2 f32-activation NVFP4 tiles take 1 to 8) against NVFP4 rows of odd
// group counts (a last 16-column group alone, K not a multiple of 16), a NaN group scale in one
// row and an infinite activation: the reference's non-finite entries, the finite ones close. Then
// one-hot activations, where each output is one decoded weight times the tensor scale: equal to
// the reference bit for bit (e2m1 * group scale is exact, as each tile forms it).
TEST_P(FastQuantTest, Nvfp4TokenTilesMatchReference) {
  for (int64_t K : {int64_t{1283}, int64_t{256}, int64_t{45}, int64_t{16}})
    for (int64_t T = 1; T <= 9; ++T) {
      SCOPED_TRACE("T=" + std::to_string(T) + " K=" + std::to_string(K));
      const int64_t N = 19;
      Weight w = Packed(2, N, K, 60 + static_cast<uint32_t>(K), 2);
      w.scale = w.scale.Clone();
      w.scale.data<uint8_t>()[(2 + 5) * w.scale.size(1) + (K - 1) / 16] = 0x7F;  // row 5: NaN
      Tensor x = Random({T, K}, 9 + static_cast<uint32_t>(T));
      x.data<float>()[(T - 1) * K + K / 3] = std::numeric_limits<float>::infinity();
      Tensor y = Tensor::Zeros(DType::kF32, {T, N}), r = y.Clone();
      ops_.Linear(x, w, y);
      kRef.Linear(x, w, r);
      double err = 0.0, mag = 1e-30;
      for (int64_t i = 0; i < T * N; ++i) {
        const float g = y.data<float>()[i], e = r.data<float>()[i];
        ASSERT_EQ(std::isfinite(g), std::isfinite(e)) << i << " " << g << " " << e;
        if (!std::isfinite(e)) continue;
        err = std::max(err, std::fabs(static_cast<double>(g) - e));
        mag = std::max(mag, std::fabs(static_cast<double>(e)));
      }
      EXPECT_LE(err / mag, 2e-5);
    }
  for (int64_t T : {int64_t{1}, int64_t{8}}) {
    const int64_t N = 11, K = 272;  // 17 groups
    Weight w = Packed(2, N, K, 77, 1);
    std::vector<float> row(K);
    int64_t bad = 0;
    for (int64_t k0 = 0; k0 < K; k0 += T) {
      const int64_t tt = std::min(T, K - k0);
      Tensor x = Tensor::Zeros(DType::kF32, {tt, K});
      for (int64_t t = 0; t < tt; ++t) x.data<float>()[t * K + k0 + t] = 1.0f;
      Tensor y = Tensor::Zeros(DType::kF32, {tt, N});
      ops_.Linear(x, w, y);
      for (int64_t n = 0; n < N; ++n) {
        DequantizeRowSpan(w, n, 0, K, row.data());
        for (int64_t t = 0; t < tt; ++t)
          if (!(row[k0 + t] == y.data<float>()[t * N + n]) && bad++ < 5)
            ADD_FAILURE() << "T=" << T << " n=" << n << " k=" << k0 + t << " " << row[k0 + t]
                          << " vs " << y.data<float>()[t * N + n];
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// The AVX2 FP8 tiles' in-register decode on all 256 codes, bit for bit against F8E4M3ToF32 (the
// two NaN codes stand for the tiles' NaN check, which flags exactly the 32-code runs with one).
TEST(Fp8Avx2DecodeTest, EveryCodeMatchesTheReference) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      !__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "no AVX2 + FMA + F16C";
  for (int run = 0; run < 8; ++run) {
    uint8_t q[32];
    float got[32];
    bool nan = false;
    for (int i = 0; i < 32; ++i) {
      q[i] = static_cast<uint8_t>(32 * run + i);
      nan |= (q[i] & 0x7F) == 0x7F;
    }
    EXPECT_EQ(fast::DecodeE4m3x32Avx2(q, got), nan) << run;
    for (int i = 0; i < 32; ++i) {
      const float want = F8E4M3ToF32(q[i]);
      if ((q[i] & 0x7F) == 0x7F) {
        EXPECT_TRUE(std::isnan(want));
        continue;
      }
      EXPECT_EQ(std::memcmp(&want, &got[i], 4), 0) << int(q[i]) << " " << want << " " << got[i];
    }
  }
  // One NaN code anywhere in a run of zeros is flagged.
  for (int at = 0; at < 32; ++at) {
    uint8_t q[32] = {};
    float got[32];
    q[at] = at % 2 ? 0x7F : 0xFF;
    EXPECT_TRUE(fast::DecodeE4m3x32Avx2(q, got)) << at;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FastQuantTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                           CpuIsa::kAvx512Bf16),
                         [](const auto& info) { return std::string(CpuIsaName(info.param)); });

}  // namespace
}  // namespace lucid
