// The model on a backend whose memory the host cannot touch (GuardedDeviceBackend, the stand-in
// for a GPU): every step's metadata reaches the ops in the backend's memory, the host reads only
// what it copies back (logits, hidden states, the numerics flags), and the results are the CPU
// backend's bit for bit. A host access to device memory would end the test with SIGSEGV; host
// memory handed to an op as device memory is a recorded violation.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/guarded_device.h"
#include "models/device_compare_test_util.h"
#include "models/registry.h"
#include "ops/forwarding_ops.h"

namespace lucid {
namespace {

// Every step's host-readable outputs, concatenated: logits then hidden states.
struct StepResults {
  std::vector<float> values;
  std::vector<std::string> sites;  // numerics sites of the last step ("-" for none)
};

void Append(const Tensor& t, std::vector<float>* out) {
  if (t.raw() == nullptr) return;
  out->insert(out->end(), t.data<const float>(), t.data<const float>() + t.numel());
}

// Three steps on a fresh pool: two prompts batched (every row's logits, the last rows' hidden
// states), one decode token each (batched), then one more token of the first alone.
StepResults Steps(Model& m, KvDtype kv_dtype) {
  KvStorage kv(m.kv_spec(), 8, 16, kv_dtype, m.kv_allocator());
  TestPages pages(16);
  SequenceKv a = pages.New(40), b = pages.New(40);
  const std::vector<int32_t> pa = TestTokens(21, 5), pb = TestTokens(12, 9);
  StepResults r;
  auto step = [&](std::vector<std::pair<SequenceKv*, std::vector<int32_t>>> chunks,
                  ChunkRows logits) {
    StepInput in;
    for (auto& [seq, toks] : chunks)
      AddSequence(in, seq->page_table, seq->length, toks, logits, ChunkRows::kLast);
    StepOutput out;
    const Status s = m.Forward(in, kv, &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (auto& [seq, toks] : chunks) seq->length += static_cast<int64_t>(toks.size());
    Append(out.logits, &r.values);
    Append(out.hidden, &r.values);
    r.sites.clear();
    for (const auto& site : m.LastNonFiniteSites()) r.sites.push_back(site ? site->op : "-");
  };
  step({{&a, pa}, {&b, pb}}, ChunkRows::kAll);
  step({{&a, {17}}, {&b, {44}}}, ChunkRows::kLast);
  step({{&a, {3}}}, ChunkRows::kLast);
  return r;
}

using Case = testing_util::ModelCase;

class DeviceModel : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceModel, StepsOnGuardedDeviceMemoryEqualTheCpuBackendsBitForBit) {
  const CpuOps ops;
  CpuBackend cpu(ops);
  GuardedDeviceBackend dev(ops);
  auto on_cpu = LoadModel(TinyFixture(GetParam().fixture), cpu);
  auto on_dev = LoadModel(TinyFixture(GetParam().fixture), dev);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().ToString();
  ASSERT_TRUE(on_dev.ok()) << on_dev.status().ToString();
  ASSERT_TRUE((*on_cpu)->SetNumericsCheck(true));
  ASSERT_TRUE((*on_dev)->SetNumericsCheck(true));
  const StepResults want = Steps(**on_cpu, GetParam().kv);
  const StepResults got = Steps(**on_dev, GetParam().kv);
  ASSERT_EQ(want.values.size(), got.values.size());
  ASSERT_GT(want.values.size(), 0u);
  EXPECT_EQ(std::memcmp(want.values.data(), got.values.data(), want.values.size() * 4), 0);
  EXPECT_EQ(want.sites, got.sites);
  // The load-time check of the feed-forward weights runs on the device too.
  const Status ff = (*on_dev)->CheckFeedForwardWeights();
  EXPECT_TRUE(ff.ok()) << ff.ToString();
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
  // Each layer's activations die with the layer (its workspace scope is given back).
  EXPECT_EQ(dev.workspace().escaped_scopes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, DeviceModel,
                         ::testing::Values(Case{"tiny_deepseek_v3", KvDtype::kF32},
                                           Case{"tiny_deepseek_v32", KvDtype::kF32},
                                           Case{"tiny_glm_moe_dsa", KvDtype::kF32},
                                           Case{"tiny_glm_moe_dsa", KvDtype::kBF16},
                                           Case{"tiny_glm_moe_dsa", KvDtype::kFp8E4M3},
                                           Case{"tiny_deepseek_v32", KvDtype::kFp8E4M3}),
                         testing_util::ModelCaseName);

// An asynchronous backend reports a failed op once, to whichever wait comes first (ops.h's
// Synchronize; CudaOps does so for scratch the device cannot give): this one fails the first wait
// after it is armed, which under the numerics check is a layer's mid-step copy of its flags.
class FailsTheNextWait final : public ForwardingOps {
 public:
  using ForwardingOps::ForwardingOps;
  Status Synchronize() const override {
    if (!armed) return ForwardingOps::Synchronize();
    armed = false;
    return ResourceExhausted("injected: no device memory for attention partials");
  }
  mutable bool armed = false;
};

TEST(DeviceModel, AFailureTheNumericsChecksWaitSawIsTheStepsStatus) {
  const CpuOps ops;
  FailsTheNextWait failing(ops);
  GuardedDeviceBackend dev(failing);
  auto m = LoadModel(TinyFixture("tiny_deepseek_v3"), dev);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->SetNumericsCheck(true));
  KvStorage kv((*m)->kv_spec(), 8, 16, KvDtype::kF32, (*m)->kv_allocator());
  TestPages pages(16);
  SequenceKv a = pages.New(40);
  StepInput in;
  const std::vector<int32_t> prompt = TestTokens(9, 3);
  AddSequence(in, a.page_table, 0, prompt, ChunkRows::kLast);
  StepOutput out;
  failing.armed = true;
  const Status s = (*m)->Forward(in, kv, &out);
  EXPECT_FALSE(failing.armed);  // a wait came
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  // The failure was the step's only: the same step again succeeds.
  StepOutput again;
  const Status ok = (*m)->Forward(in, kv, &again);
  EXPECT_TRUE(ok.ok()) << ok.ToString();
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
}

// `ref_ops` on the CPU against `dev_ops` behind the guard (GuardedDeviceBackend), as the CUDA
// backend's device test compares (backends/cuda/cuda_model_test.cpp): every row compared, most
// with their greedy token, no host access to the guarded memory.
testing_util::DeviceComparison CompareOnGuardedDevice(const Ops& ref_ops, const Ops& dev_ops,
                                                      const Case& c, double rel) {
  CpuBackend cpu(ref_ops);
  GuardedDeviceBackend dev(dev_ops);
  auto ref = LoadModel(TinyFixture(c.fixture), cpu);
  auto on_dev = LoadModel(TinyFixture(c.fixture), dev);
  EXPECT_TRUE(ref.ok() && on_dev.ok());
  if (!ref.ok() || !on_dev.ok()) return {};
  EXPECT_TRUE((*on_dev)->SetNumericsCheck(true));
  const testing_util::DeviceComparison r =
      testing_util::CompareWithReference(**ref, **on_dev, c.kv, rel);
  EXPECT_EQ(r.rows, 40 + 2 * 5);  // the prefill's rows, then two per decode step
  EXPECT_GT(r.margin_rows, r.rows / 2);
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;
  return r;
}

// The harness itself checked where no GPU is: the fast CPU kernels against the reference.
TEST_P(DeviceModel, FastKernelsOnGuardedDeviceMemoryMatchTheReferenceAsTheGpuMust) {
  const CpuOps ref_ops;
  const CpuFastOps fast(CpuIsa::kAvx512Bf16, FastActivations::kF32);
  const double rel = GetParam().kv == KvDtype::kFp8E4M3 ? 1e-2 : 1e-3;
  // The fast kernels do round differently: the comparison is not vacuous.
  EXPECT_GT(CompareOnGuardedDevice(ref_ops, fast, GetParam(), rel).worst, 0.0);
}

// The bound the GPU's cuda-bf16act is held to against the CPU's fast-bf16act (Bf16ActBound), on
// the CPU: fast-bf16act at the AVX2 level behind the guard against fast-bf16act at the machine's
// best level, which sum in other orders and so round some matmul inputs to the neighbouring bf16
// (identical on an AVX2-only machine). Prints the measured worst. The cases are the GPU test's.
class Bf16ActLevels : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16ActLevels, KernelsAtAnotherLevelStayWithinTheGpusBf16Bound) {
  const CpuFastOps best(DetectCpuIsa(), FastActivations::kBf16);
  const CpuFastOps avx2(CpuIsa::kAvx2, FastActivations::kBf16);
  const double rel = testing_util::Bf16ActBound(GetParam().kv);
  const testing_util::DeviceComparison c = CompareOnGuardedDevice(best, avx2, GetParam(), rel);
  std::printf("[ bf16act ] %s kv %s: max |avx2 - best| / max|logit| = %.3g (bound %.0e)\n",
              GetParam().fixture, KvDtypeName(GetParam().kv), c.worst, rel);
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16ActLevels, ::testing::ValuesIn(testing_util::Bf16ActCases()),
                         testing_util::ModelCaseName);

TEST(DeviceModel, TheLlamaFamilyRefusesABackendOtherThanTheCpuByName) {
  // A device backend (CudaBackend's device is cuda) is refused at load; the guarded stand-in
  // reports the cpu device, so the refusal is checked on a backend that names another device.
  class OtherDevice final : public Backend {
   public:
    Device device() const override { return Device::kCuda; }
    std::string name() const override { return "cuda:test"; }
    const Ops& ops() const override { return ops_; }
    Allocator& allocator() override { return HostAllocator(); }
    StatusOr<Tensor> UploadWeight(const Tensor& host) override { return host; }
    Workspace& workspace() override { return ws_; }
    StatusOr<Tensor> ReadableOnHost(const Tensor& t) override { return t; }

   private:
    CpuOps ops_;
    Workspace ws_{HostAllocator()};
  } other;
  auto m = LoadModel(TinyFixture("tiny_llama3"), other);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("runs on the cpu backend only, not on cuda:test"),
            std::string::npos)
      << m.status().ToString();
}

}  // namespace
}  // namespace lucid
