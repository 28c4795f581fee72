// The three tiny fixtures end to end on the CUDA backend: cuda-reference (exact f32) against the
// CPU reference (models/device_compare_test_util.h: batched prefill, decode fed the CPU's greedy
// tokens). Logits must agree within the f32 tolerance of a different summation order (KV f32 /
// bf16: 1e-3 of the largest logit; FP8 KV: 1e-2, since a value next to an e4m3 rounding boundary
// may round the other way), the greedy token must be the CPU's wherever the CPU's top-2 margin
// exceeds twice that. Prints one "[ cuda ]" line per case. The numerics guard on the GPU: a
// request poisoned inside the model (runtime/poison_ops_for_test.h) fails alone, naming layer and
// op, while the engine serves the others. Skips, saying why, without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_ops.h"
#include "models/device_compare_test_util.h"
#include "models/registry.h"
#include "runtime/poison_ops_for_test.h"

namespace lucid::cuda {
namespace {

// The checkout's fixtures: $LUCID_SOURCE_DIR where set (a build brought to another machine, as
// scripts/cuda_check.sh runs it), else the source directory this build was configured from.
std::string Fixture(const std::string& name) {
  const char* env = std::getenv("LUCID_SOURCE_DIR");
  const std::string root = env != nullptr && *env != '\0' ? env : LUCID_SOURCE_DIR;
  return root + "/tests/fixtures/models/" + name;
}

using Case = testing_util::ModelCase;

// The fixture on `gpu` and on the CPU with `cpu_ops`, step by step (CompareWithReference within
// `rel`); prints one "[ <tag> ]" line.
void ExpectGpuMatchesCpu(CudaBackend& gpu, const Ops& cpu_ops, const Case& c, double rel,
                         const char* tag) {
  CpuBackend cpu(cpu_ops);
  auto on_cpu = LoadModel(Fixture(c.fixture), cpu);
  auto on_gpu = LoadModel(Fixture(c.fixture), gpu);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().ToString();
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
  ASSERT_TRUE((*on_gpu)->SetNumericsCheck(true));
  const testing_util::DeviceComparison r =
      testing_util::CompareWithReference(**on_cpu, **on_gpu, c.kv, rel);
  EXPECT_GT(r.margin_rows, 0);
  std::printf(
      "[ %s ] %s kv %s: %d rows, max |gpu - cpu| / max|logit| = %.3g (tolerance %.0e), "
      "greedy token required equal on %d rows\n",
      tag, c.fixture, KvDtypeName(c.kv), r.rows, r.worst, rel, r.margin_rows);
}

class CudaModel : public ::testing::TestWithParam<Case> {};

TEST_P(CudaModel, StepsOnTheGpuMatchTheCpuReference) {
  StatusOr<std::unique_ptr<CudaBackend>> gpu =
      CudaBackend::Create(0, MakeCudaReferenceOps, "reference");
  if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA device: " << gpu.status().message();
  const CpuOps ops;
  ExpectGpuMatchesCpu(**gpu, ops, GetParam(), GetParam().kv == KvDtype::kFp8E4M3 ? 1e-2 : 1e-3,
                      "cuda");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModel,
                         ::testing::Values(Case{"tiny_deepseek_v3", KvDtype::kF32},
                                           Case{"tiny_deepseek_v32", KvDtype::kF32},
                                           Case{"tiny_glm_moe_dsa", KvDtype::kF32},
                                           Case{"tiny_glm_moe_dsa", KvDtype::kBF16},
                                           Case{"tiny_deepseek_v3", KvDtype::kFp8E4M3},
                                           Case{"tiny_glm_moe_dsa", KvDtype::kFp8E4M3}),
                         testing_util::ModelCaseName);

// cuda-bf16act (the set --dtype bfloat16 runs) against the CPU's fast-bf16act, which rounds the
// same matmul inputs to bf16 (CpuFastOps, FastActivations::kBf16), within Bf16ActBound
// (models/device_compare_test_util.h); the CPU's two instruction-set levels, which sum in
// different orders too, are held to the same bound in models/device_model_test.cpp.
class CudaBf16ActModel : public ::testing::TestWithParam<Case> {};

TEST_P(CudaBf16ActModel, StepsOnTheGpuMatchTheCpuBf16ActKernels) {
  StatusOr<std::unique_ptr<CudaBackend>> gpu =
      CudaBackend::Create(0, MakeCudaBf16ActOps, "bf16act");
  if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA device: " << gpu.status().message();
  const CpuFastOps ops(DetectCpuIsa(), FastActivations::kBf16);
  ExpectGpuMatchesCpu(**gpu, ops, GetParam(), testing_util::Bf16ActBound(GetParam().kv),
                      "cuda-bf16act");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBf16ActModel,
                         ::testing::ValuesIn(testing_util::Bf16ActCases()),
                         testing_util::ModelCaseName);

std::unique_ptr<Ops> MakePoisonedReferenceOps(cudaStream_t stream) {
  return std::make_unique<testing_util::PoisonOps>(MakeCudaReferenceOps(stream));
}

class CudaNumerics : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaNumerics, APoisonedRequestFailsAloneNamingTheLayerOnTheGpu) {
  StatusOr<std::unique_ptr<CudaBackend>> poisoned =
      CudaBackend::Create(0, MakePoisonedReferenceOps, "poison");
  if (!poisoned.ok()) GTEST_SKIP() << "needs a CUDA device: " << poisoned.status().message();
  StatusOr<std::unique_ptr<CudaBackend>> clean =
      CudaBackend::Create(0, MakeCudaReferenceOps, "reference");
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  auto bad = LoadModel(Fixture(GetParam()), **poisoned);
  auto good = LoadModel(Fixture(GetParam()), **clean);
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  testing_util::ExpectOnlyThePoisonedRequestFails(
      std::move(bad).value(), **good, EngineOptions::NanCheck::kLayers, "layer 1, op L1.moe",
      testing_util::OthersGive::kAllTheirTokens);
  std::printf("[ cuda ] %s: the poisoned request failed alone naming layer 1, op L1.moe\n",
              GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaNumerics,
                         ::testing::Values("tiny_deepseek_v3", "tiny_deepseek_v32",
                                           "tiny_glm_moe_dsa"));

}  // namespace
}  // namespace lucid::cuda
