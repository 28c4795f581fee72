// Micro-benchmarks of the many-token matmul: the outer-product GEMM (GemmRows) against the
// dot-product tiles it replaces (MatmulRows with the GEMM hidden: a copy of the kernel table whose
// level reads scalar, so GemmRows refuses and the same tiles run), single-threaded, at the AVX2 and
// the best AVX-512 level, on a dense prefill shape and an expert-sized one, in every weight
// format; and CpuFastOps::Linear (all threads, OMP_NUM_THREADS; LUCID_CPU_ISA caps its level) at
// the prefill shape. Counter: GFLOP/s (2 T N K per call).
//   build/benchmarks/lucid_gemm_bench --benchmark_filter=Rows
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "core/dtype.h"

namespace lucid {
namespace {

// Formats: 0 f32, 1 bf16, 2 FP8-block (ue8m0 scales), 3 NVFP4.
Weight MakeWeight(int f, int64_t n, int64_t k) {
  if (f == 2) return testing_util::RandomFp8(n, k, 1, true);
  if (f == 3) return testing_util::RandomNvfp4(n, k, 1);
  Weight w;
  w.format = f == 0 ? WeightFormat::kF32 : WeightFormat::kBF16;
  w.name = "w";
  w.rows = n;
  w.cols = k;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  w.data = Tensor::Empty(f == 0 ? DType::kF32 : DType::kBF16, {n, k});
  for (int64_t i = 0; i < n * k; ++i) {
    if (f == 0)
      w.data.data<float>()[i] = d(rng);
    else
      w.data.data<uint16_t>()[i] = F32ToBf16(d(rng));
  }
  return w;
}

const Weight& CachedWeight(int f, int64_t n, int64_t k) {
  static Weight cache[4][3];
  const int shape = n == 6144 ? 0 : n == 512 ? 1 : 2;
  Weight& w = cache[f][shape];
  if (!w.valid()) w = MakeWeight(f, n, k);
  return w;
}

Tensor RandomX(int64_t T, int64_t K) {
  Tensor x = Tensor::Empty(DType::kF32, {T, K});
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  return x;
}

void SetCounters(benchmark::State& st, int64_t T, int64_t N, int64_t K) {
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * T * N * K * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Args: level (2 AVX2, 5 the machine's best AVX-512 level), path (0 dot-product tiles, 1 GEMM),
// format, T, N, K, activations (0 f32, 1 rounded to bf16: fast-bf16act). One thread, all N rows.
void BM_Rows(benchmark::State& st) {
  const bool avx512 = st.range(0) == 5, gemm = st.range(1) != 0;
  const int f = static_cast<int>(st.range(2));
  const int64_t T = st.range(3), N = st.range(4), K = st.range(5);
  const FastActivations act = st.range(6) ? FastActivations::kBf16 : FastActivations::kF32;
  const CpuIsa best = DetectCpuIsa();
  if (best < (avx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2)) {
    st.SkipWithError(avx512 ? "no AVX-512 on this machine" : "no AVX2 on this machine");
    return;
  }
  fast::KernelTable kt = fast::Kernels(avx512 ? best : CpuIsa::kAvx2);
  if (!gemm) kt.isa = CpuIsa::kScalar;  // GemmRows refuses; the same tiles run
  const Weight& w = CachedWeight(f, N, K);
  Tensor x = RandomX(T, K);
  std::vector<float> y(T * N);
  for (auto _ : st) {
    fast::PackedX p;
    if (gemm) {  // x packed for the GEMM alone at any T (PackX does so from GemmMinTokens)
      p.T = T;
      p.K = K;
      p.Kpad = (K + fast::kPadK - 1) / fast::kPadK * fast::kPadK;
      p.hi_only = act == FastActivations::kBf16;
      const fast::GemmX mode = !p.hi_only                           ? fast::GemmX::kF32
                               : fast::GemmQ16(kt, w.format, act)   ? fast::GemmX::kQ16
                               : fast::GemmPairs(kt, w.format, act) ? fast::GemmX::kBf16Pairs
                               : fast::GemmRoundsX(kt)              ? fast::GemmX::kRoundedToBf16
                                                                    : fast::GemmX::kF32;
      fast::GemmPackX(kt, x.data<const float>(), K, mode, &p);
    } else {
      fast::PackX(kt, x.data<const float>(), K, T, K, w.format, act, &p);
    }
    if (gemm && !fast::GemmRows(kt, p, 0, T, w, 0, N, y.data(), N)) {
      st.SkipWithError("GemmRows refused");
      return;
    }
    if (!gemm) fast::MatmulRows(kt, p, 0, T, w, 0, N, y.data(), N);
    benchmark::DoNotOptimize(y.data());
  }
  SetCounters(st, T, N, K);
}
// Dense prefill (T = 512 x K 2048 x N 6144) and an expert's share at prefill (~64 tokens x the
// 1g preset's 512 x 2048 gate), and the small token counts where the GEMM starts to pay.
BENCHMARK(BM_Rows)
    ->ArgsProduct({{2, 5}, {0, 1}, {0, 1, 2, 3}, {32, 64, 512}, {6144}, {2048}, {0, 1}})
    ->ArgsProduct({{2, 5}, {0, 1}, {1, 2, 3}, {4, 8, 16, 32, 64, 128, 512}, {512}, {2048}, {0, 1}})
    ->ArgNames({"isa", "gemm", "fmt", "T", "N", "K", "act"})
    ->Unit(benchmark::kMillisecond);

// The reference point of "% of peak": fp32 FMAs on 16 independent accumulators (as lucid bench's
// probe), one thread.
__attribute__((target("avx512f"))) void FmaChains(int64_t n, float* out) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t r = 0; r < n; ++r)
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], m, b);
  for (int i = 1; i < 16; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  _mm512_storeu_ps(out, a[0]);
}
void BM_FmaPeak(benchmark::State& st) {
  if (DetectCpuIsa() < CpuIsa::kAvx512) {
    st.SkipWithError("no AVX-512 on this machine");
    return;
  }
  const int64_t n = 1 << 20;
  float out[16];
  for (auto _ : st) {
    FmaChains(n, out);
    benchmark::DoNotOptimize(out);
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 16 * 16 * n * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

// Args: format, T. CpuFastOps::Linear, every thread, N 6144 x K 2048.
void BM_GemmLinear(benchmark::State& st) {
  static const CpuFastOps ops;
  const int f = static_cast<int>(st.range(0));
  const int64_t T = st.range(1), N = 6144, K = 2048;
  const Weight& w = CachedWeight(f, N, K);
  Tensor x = RandomX(T, K), y = Tensor::Empty(DType::kF32, {T, N});
  for (auto _ : st) ops.Linear(x, w, y);
  SetCounters(st, T, N, K);
}
BENCHMARK(BM_GemmLinear)
    ->ArgsProduct({{0, 1, 2, 3}, {8, 16, 32, 48, 64, 96, 128, 512}})
    ->ArgNames({"fmt", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: GGUF type (ggml id: 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K), T, reference (1: CpuOps, the
// scalar decode-per-chunk oracle). Linear, every thread, SmolLM2-135M's MLP shapes (32-element
// blocks: up, N 1536 x K 576; K-quants, whose rows are whole 256-element blocks: down, N 576 x K
// 1536), random codes with f16 block scales in [1e-3, 2e-2).
void BM_GgufLinear(benchmark::State& st) {
  static const CpuFastOps fast;
  static const CpuOps ref;
  const auto t = static_cast<GgmlType>(st.range(0));
  const GgmlTypeTraits info = *GgmlTypeInfo(static_cast<uint32_t>(t));
  const bool k_quant = info.block_elems == 256;
  const int64_t T = st.range(1), N = k_quant ? 576 : 1536, K = k_quant ? 1536 : 576;
  Weight w;
  w.format = WeightFormat::kGgml;
  w.ggml_type = t;
  w.name = info.name;
  w.rows = N;
  w.cols = K;
  const int64_t rb = GgmlRowBytes(t, K), be = info.block_elems;
  w.data = Tensor::Empty(DType::kU8, {N, rb});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> sc(1e-3f, 2e-2f);
  uint8_t* d = w.data.data<uint8_t>();
  for (int64_t i = 0; i < N * rb; ++i) d[i] = rng() & 0xFF;
  const int64_t d_at = t == GgmlType::kQ6_K ? 208 : 0;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t b = 0; b < K / be; ++b) {
      uint8_t* blk = d + r * rb + b * info.block_bytes;
      for (int64_t o : {d_at, t == GgmlType::kQ6_K || t == GgmlType::kQ8_0 ? d_at : d_at + 2}) {
        const uint16_t h = F32ToF16(sc(rng));
        blk[o] = h & 0xFF;
        blk[o + 1] = h >> 8;
      }
    }
  Tensor x = RandomX(T, K), y = Tensor::Empty(DType::kF32, {T, N});
  const Ops& ops = st.range(2) ? static_cast<const Ops&>(ref) : fast;
  for (auto _ : st) ops.Linear(x, w, y);
  SetCounters(st, T, N, K);
  st.counters["weight GB/s"] = benchmark::Counter(
      static_cast<double>(N * rb) * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GgufLinear)
    ->ArgsProduct({{3, 8, 12, 14}, {1, 8, 32, 512}, {0, 1}})
    ->ArgNames({"type", "T", "ref"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: format, tokens. CpuFastOps::MoeExperts at the 1g preset's shapes: 32 experts of
// 512 x 2048 (gate, up) and 2048 x 512 (down), top-4 (random; at T = 512, ~64 tokens per expert;
// at T = 1, one decode step's 4 experts, read from memory: the 32 experts do not fit in cache).
void BM_MoeExperts(benchmark::State& st) {
  static const CpuFastOps ops;
  const int f = static_cast<int>(st.range(0));
  const int64_t T = st.range(1), E = 32, k = 4, D = 2048, I = 512;
  static std::vector<ExpertWeights> cache[4];
  std::vector<ExpertWeights>& ex = cache[f];
  if (ex.empty()) {
    for (int64_t e = 0; e < E; ++e) {
      const uint32_t s = static_cast<uint32_t>(3 * e);
      Weight g = f == 2   ? testing_util::RandomFp8(I, D, s, true)
                 : f == 3 ? testing_util::RandomNvfp4(I, D, s)
                          : MakeWeight(f, I, D);
      Weight u = f == 2   ? testing_util::RandomFp8(I, D, s + 1, true)
                 : f == 3 ? testing_util::RandomNvfp4(I, D, s + 1)
                          : MakeWeight(f, I, D);
      Weight d = f == 2   ? testing_util::RandomFp8(D, I, s + 2, true)
                 : f == 3 ? testing_util::RandomNvfp4(D, I, s + 2)
                          : MakeWeight(f, D, I);
      ex.push_back({g, u, d});
    }
  }
  std::mt19937 rng(5);
  std::vector<int32_t> idx(T * k);
  std::vector<float> wt(T * k, 0.25f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> all(E);
    for (int64_t e = 0; e < E; ++e) all[e] = static_cast<int32_t>(e);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t i = 0; i < k; ++i) idx[t * k + i] = all[i];
  }
  // Decode: a different expert set every iteration (as consecutive steps), so weights come from
  // memory; the counter is the touched experts' stored bytes per second.
  const int64_t sets = T == 1 ? E : 1;
  std::vector<int32_t> idx_sets(sets * T * k);
  for (int64_t s = 0; s < sets; ++s)
    for (int64_t i = 0; i < T * k; ++i)
      idx_sets[s * T * k + i] = T == 1 ? static_cast<int32_t>((s * 5 + i * 8) % E) : idx[i];
  double bytes = 0;
  int64_t it = 0;
  Tensor x = RandomX(T, D), out = Tensor::Zeros(DType::kF32, {T, D});
  Tensor idx_t = Tensor::Empty(DType::kI32, {T, k}), wt_t = Tensor::Empty(DType::kF32, {T, k});
  std::copy(wt.begin(), wt.begin() + T * k, wt_t.data<float>());
  for (auto _ : st) {
    const int32_t* ids = &idx_sets[(it++ % sets) * T * k];
    std::copy(ids, ids + T * k, idx_t.data<int32_t>());
    ops.MoeExperts(x, ex, idx_t, wt_t, out);
    std::vector<bool> seen(E);
    for (int64_t i = 0; i < T * k; ++i)
      if (!seen[ids[i]]) {
        seen[ids[i]] = true;
        const ExpertWeights& w = ex[ids[i]];
        bytes +=
            static_cast<double>(w.gate.StoredBytes() + w.up.StoredBytes() + w.down.StoredBytes());
      }
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * T * k * 3 * I * D * st.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  st.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MoeExperts)
    ->ArgsProduct({{1, 2, 3}, {1, 512}})
    ->ArgNames({"fmt", "T"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace lucid

BENCHMARK_MAIN();
