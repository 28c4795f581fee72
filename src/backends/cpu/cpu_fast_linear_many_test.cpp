// CpuFastOps::LinearMany against Linear: weights of every format on one input, at token counts
// that take each path (one-token and token tiles in one region; the GEMM and the token split call
// Linear per weight), at every instruction-set level this machine has and with both activation
// modes. The results must be Linear's bit for bit: the region only changes which thread computes
// which rows, never how a row is computed.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"

namespace lucid {
namespace {

using testing_util::Random;

// Views from row 3 of their matrices (row_begin != 0), rows not a multiple of a row group, and
// byte sizes far apart, so that the threads' shares start inside a weight.
std::vector<Weight> MixedWeights(int64_t K) {
  return {testing_util::RandomNvfp4(300, K, 5).RowRange(3, 297),
          testing_util::RandomDense(/*bf16=*/true, 40, K, 6).RowRange(3, 37),
          testing_util::RandomFp8(150, K, 7, /*ue8m0=*/false).RowRange(3, 140),
          testing_util::RandomDense(/*bf16=*/false, 20, K, 8).RowRange(3, 9),
          testing_util::RandomNvfp4(70, K, 9).RowRange(3, 61)};
}

class LinearManyTest : public ::testing::TestWithParam<std::tuple<CpuIsa, FastActivations>> {
 protected:
  CpuFastOps ops_{std::get<0>(GetParam()), std::get<1>(GetParam())};
};

TEST_P(LinearManyTest, EqualsLinearBitForBit) {
  for (int64_t K : {int64_t{300}, int64_t{2100}}) {
    const std::vector<Weight> ws = MixedWeights(K);
    std::vector<const Weight*> wp;
    for (const Weight& w : ws) wp.push_back(&w);
    for (int64_t T : {1, 2, 3, 5, 9, 40, 130}) {
      SCOPED_TRACE("K=" + std::to_string(K) + " T=" + std::to_string(T));
      const Tensor x = Random({T, K}, 11 + static_cast<uint32_t>(T));
      std::vector<Tensor> got, want;
      std::vector<Tensor*> gp;
      for (const Weight& w : ws) {
        got.push_back(Tensor::Zeros(DType::kF32, {T, w.rows}));
        want.push_back(Tensor::Zeros(DType::kF32, {T, w.rows}));
      }
      for (Tensor& t : got) gp.push_back(&t);
      ops_.LinearMany(x, wp, gp);
      for (size_t i = 0; i < ws.size(); ++i) {
        ops_.Linear(x, ws[i], want[i]);
        EXPECT_EQ(std::memcmp(got[i].data<float>(), want[i].data<float>(),
                              sizeof(float) * static_cast<size_t>(want[i].numel())),
                  0)
            << ws[i].name << " (weight " << i << ")";
      }
    }
  }
}

TEST_P(LinearManyTest, OneWeightAndNoneAreFine) {
  const std::vector<Weight> ws = MixedWeights(300);
  const Tensor x = Random({1, 300}, 2);
  Tensor got = Tensor::Zeros(DType::kF32, {1, ws[0].rows}), want = got.Clone();
  const Weight* one[] = {&ws[0]};
  Tensor* out[] = {&got};
  ops_.LinearMany(x, one, out);
  ops_.Linear(x, ws[0], want);
  EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), sizeof(float) * 297), 0);
  ops_.LinearMany(x, {}, {});  // nothing to do
}

INSTANTIATE_TEST_SUITE_P(Isa, LinearManyTest,
                         ::testing::Combine(::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2,
                                                              CpuIsa::kAvx512, CpuIsa::kAvx512Bf16),
                                            ::testing::Values(FastActivations::kF32,
                                                              FastActivations::kBf16)),
                         [](const auto& info) {
                           return std::string(CpuIsaName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == FastActivations::kBf16 ? "_bf16act"
                                                                                     : "_f32act");
                         });

}  // namespace
}  // namespace lucid
