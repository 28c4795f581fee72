// The CUDA matmul paths on one weight of GLM-5's expert shape scaled up (4096 x 6144), at the
// token counts where the choice between them is made (cuda_weight_mma.h's kWeightMmaMaxTokens,
// a guess until this runs on a GPU):
//   Policy/<kind>/T   cuda-bf16act's Linear as CudaMatmul chooses (GEMV up to 8 tokens, the
//                     weight-only WMMA kernel, or the weight dequantized to bf16 for cuBLAS);
//   Wmma/<kind>/T     the weight-only kernel, whatever the policy says;
//   F32/<kind>/T      cuda-reference's Linear (the weight dequantized to f32, SGEMM).
// Kinds: 1 bf16 (cuBLAS in place: the tensor-core reference), 2 FP8 f32 scales, 3 FP8 UE8M0,
// 4 NVFP4. Counter TFLOP/s = 2 T N K per call; each iteration waits for the stream (about 10 us
// of the time at these sizes). Without a CUDA device every benchmark is skipped with the reason.
//   build/benchmarks/lucid_cuda_matmul_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

#include "backends/cpu/ops_conformance_internal.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_weight_mma.cuh"
#include "backends/cuda/cuda_weight_mma.h"

namespace lucid::cuda {
namespace {

constexpr int64_t kN = 4096, kK = 6144;

// One backend per op set, the weights and inputs on it; made on first use.
struct Bench {
  std::unique_ptr<CudaBackend> backend;
  std::string error;
  std::map<int, Weight> weights;
  std::map<int64_t, Tensor> x;
  Tensor y;
};

Bench& Get(bool bf16act) {
  static std::map<bool, Bench> benches;
  Bench& b = benches[bf16act];
  if (b.backend || !b.error.empty()) return b;
  StatusOr<std::unique_ptr<CudaBackend>> made = CudaBackend::Create(
      0, bf16act ? MakeCudaBf16ActOps : MakeCudaReferenceOps, bf16act ? "bf16act" : "reference");
  if (!made.ok()) {
    b.error = "needs a CUDA device: " + made.status().message();
    return b;
  }
  b.backend = std::move(made).value();
  return b;
}

Tensor Upload(CudaBackend& b, const Tensor& host) {
  if (!host.valid()) return host;
  StatusOr<Tensor> d = b.UploadWeight(host);
  LUCID_CHECK(d.ok(), d.status().message());
  return *d;
}

const Weight& WeightOf(Bench& b, int kind) {
  auto it = b.weights.find(kind);
  if (it != b.weights.end()) return it->second;
  Weight w = conformance::RandomWeight(kind, kN, kK, 5);
  w.data = Upload(*b.backend, w.data);
  w.scale = Upload(*b.backend, w.scale);
  w.scale2 = Upload(*b.backend, w.scale2);
  return b.weights.emplace(kind, std::move(w)).first->second;
}

const Tensor& InputOf(Bench& b, int64_t T) {
  auto it = b.x.find(T);
  if (it != b.x.end()) return it->second;
  return b.x.emplace(T, Upload(*b.backend, conformance::RandomTensor({T, kK}, 9))).first->second;
}

enum Path { kPolicy, kWmma, kF32 };

void Run(benchmark::State& state, Path path) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t T = state.range(1);
  Bench& b = Get(path != kF32);
  if (!b.backend) {
    state.SkipWithError(b.error.c_str());
    return;
  }
  const Weight& w = WeightOf(b, kind);
  const Tensor& x = InputOf(b, T);
  if (!b.y.valid() || b.y.numel() < T * kN)
    b.y = Upload(*b.backend, Tensor::Empty(DType::kF32, {1024, kN}));
  Tensor y = Tensor::Borrow(DType::kF32, {T, kN}, b.y.raw(), nullptr, Device::kCuda);
  const DeviceWeight d = DeviceWeightOf(w);
  if (path == kWmma && !WeightMmaEligible(d)) {
    state.SkipWithError("the weight-only kernel does not take this weight");
    return;
  }
  for (auto _ : state) {
    if (path == kWmma)
      LaunchWeightMma(d, x.data<const float>(), T, y.data<float>(), b.backend->stream());
    else
      b.backend->ops().Linear(x, w, y);
    const Status s = b.backend->Synchronize();
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
  }
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(T * kN * kK) * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int kind : {1, 2, 3, 4})
    for (int64_t T : {16, 64, 128, 512, 1024}) b->Args({kind, T});
  b->ArgNames({"kind", "T"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void Policy(benchmark::State& s) { Run(s, kPolicy); }
void Wmma(benchmark::State& s) { Run(s, kWmma); }
void F32(benchmark::State& s) { Run(s, kF32); }
BENCHMARK(Policy)->Apply(Args);
BENCHMARK(Wmma)->Apply(Args);
BENCHMARK(F32)->Apply(Args);

}  // namespace
}  // namespace lucid::cuda

BENCHMARK_MAIN();
