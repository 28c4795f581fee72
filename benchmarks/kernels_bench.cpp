// Micro-benchmarks of the fast CPU kernels beside the CpuOps reference: matmul by format and
// token count, MLA decode over the latent cache, the DSA indexer. Counters: bytes/s of weights or
// KV read, FLOP/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/quant_test_util.h"
#include "bench/machine_probe.h"
#include "core/dtype.h"

namespace lucid {
namespace {

const CpuOps kRef;
const CpuFastOps kFast;
const CpuFastOps kFastBf16Act(CpuIsa::kAvx512Bf16, FastActivations::kBf16);
// The fast ops for an `act` argument: 0 f32 activations (the default), 1 bf16 (fast-bf16act).
const CpuFastOps& FastFor(int64_t act) { return act ? kFastBf16Act : kFast; }

const Ops& Pick(int64_t which) { return which ? static_cast<const Ops&>(kFast) : kRef; }

Weight MakeWeight(WeightFormat f, int64_t n, int64_t k) {
  Weight w;
  w.format = f;
  w.name = "w";
  w.rows = n;
  w.cols = k;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  w.data = Tensor::Empty(f == WeightFormat::kF32 ? DType::kF32 : DType::kBF16, {n, k});
  for (int64_t i = 0; i < n * k; ++i) {
    if (f == WeightFormat::kF32)
      w.data.data<float>()[i] = d(rng);
    else
      w.data.data<uint16_t>()[i] = F32ToBf16(d(rng));
  }
  return w;
}

// Counters of a Linear benchmark: the weight's stored bytes and 2 T N K FLOPs per call.
void SetLinearCounters(benchmark::State& st, const Weight& w, int64_t T) {
  st.counters["weight_GB/s"] =
      benchmark::Counter(double(w.StoredBytes()) * st.iterations(), benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * T * w.rows * w.cols * st.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

// Args: fast?, bf16?, tokens. A 4096 x 4096 weight (32 MB in bf16: beyond the L3 of the dev box).
void BM_Linear(benchmark::State& st) {
  const Ops& ops = Pick(st.range(0));
  const WeightFormat f = st.range(1) ? WeightFormat::kBF16 : WeightFormat::kF32;
  const int64_t T = st.range(2), N = 4096, K = 4096;
  static Weight w16 = MakeWeight(WeightFormat::kBF16, N, K),
                w32 = MakeWeight(WeightFormat::kF32, N, K);
  const Weight& w = f == WeightFormat::kBF16 ? w16 : w32;
  Tensor x = Tensor::Empty(DType::kF32, {T, K}), y = Tensor::Empty(DType::kF32, {T, N});
  for (auto _ : st) ops.Linear(x, w, y);
  SetLinearCounters(st, w, T);
}
BENCHMARK(BM_Linear)
    ->ArgsProduct({{0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{1}, {0, 1}, {8, 32, 512}})
    ->Unit(benchmark::kMillisecond);

// The reference for the weight_GB/s counters: `lucid bench`'s read-bandwidth probe over 512 MB
// with every thread (median of the iterations' passes). This machine's bandwidth moves between
// runs, so compare a kernel with the probe run beside it in the same invocation.
void BM_ReadBandwidth(benchmark::State& st) {
  static BandwidthProbe probe;
  std::vector<double> gbs;
  for (auto _ : st) gbs.push_back(probe.Measure(1));
  std::sort(gbs.begin(), gbs.end());
  st.counters["read_GB/s"] = gbs.empty() ? 0.0 : gbs[gbs.size() / 2];
}
BENCHMARK(BM_ReadBandwidth)->Iterations(5)->Unit(benchmark::kMillisecond);

// Copies of w (own storage for the payload and scales) spanning at least `bytes` together, so
// that a benchmark cycling through them reads each from memory: the L3 of the dev box is 32 MB,
// and one 16384 x 2048 NVFP4 weight (19 MB) or FP8 one (34 MB) would stay (partly) cached.
std::vector<Weight> CopiesSpanning(const Weight& w, double bytes) {
  std::vector<Weight> copies{w};
  while (static_cast<double>(copies.size() * w.StoredBytes()) < bytes) {
    Weight c = w;
    c.data = w.data.Clone();
    if (w.scale.valid()) c.scale = w.scale.Clone();
    copies.push_back(c);
  }
  return copies;
}

// Args: format (0 bf16, 1 fp8-block, 2 nvfp4), tokens, activations (0 f32, 1 bf16). The real
// models' row length (hidden 2048: one 4 KB page per bf16 row) and 16384 rows (64 MB in bf16),
// each iteration on the next of copies that span 128 MB, four times the dev box's L3.
void BM_LinearBig(benchmark::State& st) {
  const int64_t N = 16384, K = 2048, T = st.range(1);
  const CpuFastOps& fast = FastFor(st.range(2));
  constexpr double kSpan = 128.0 * (1 << 20);
  static const std::vector<Weight> wb =
      CopiesSpanning(MakeWeight(WeightFormat::kBF16, N, K), kSpan);
  static const std::vector<Weight> w8 =
      CopiesSpanning(testing_util::RandomFp8(N, K, 7, /*ue8m0=*/true), kSpan);
  static const std::vector<Weight> w4 = CopiesSpanning(testing_util::RandomNvfp4(N, K, 7), kSpan);
  const std::vector<Weight>& ws = st.range(0) == 0 ? wb : st.range(0) == 1 ? w8 : w4;
  Tensor x = Tensor::Empty(DType::kF32, {T, K}), y = Tensor::Empty(DType::kF32, {T, N});
  for (int64_t i = 0; i < T * K; ++i) x.data<float>()[i] = 0.001f * static_cast<float>(i % 97);
  size_t next = 0;
  for (auto _ : st) fast.Linear(x, ws[next++ % ws.size()], y);
  SetLinearCounters(st, ws[0], T);
}
BENCHMARK(BM_LinearBig)
    ->ArgsProduct({{0, 1, 2}, {1, 2, 3, 4, 5, 6, 8, 16, 32}, {0}})
    ->ArgsProduct({{0, 1, 2}, {1, 8, 32}, {1}})
    ->Unit(benchmark::kMillisecond);

// One token against N x K weights of `format` (0 bf16, 1 fp8-block, 2 nvfp4) through `ops`, each
// call on the next of copies spanning 128 MB.
void OneTokenOnCopies(benchmark::State& st, const CpuFastOps& ops, int64_t format, int64_t N,
                      int64_t K) {
  constexpr double kSpan = 128.0 * (1 << 20);
  const std::vector<Weight> ws =
      CopiesSpanning(format == 0   ? MakeWeight(WeightFormat::kBF16, N, K)
                     : format == 1 ? testing_util::RandomFp8(N, K, 7, /*ue8m0=*/true)
                                   : testing_util::RandomNvfp4(N, K, 7),
                     kSpan);
  Tensor x = Tensor::Empty(DType::kF32, {1, K}), y = Tensor::Empty(DType::kF32, {1, N});
  for (int64_t i = 0; i < K; ++i) x.data<float>()[i] = 0.001f * static_cast<float>(i % 97);
  size_t next = 0;
  for (auto _ : st) ops.Linear(x, ws[next++ % ws.size()], y);
  SetLinearCounters(st, ws[0], 1);
}

// Args: format (0 bf16, 1 fp8-block, 2 nvfp4), rows, columns. One token with bf16 activations
// against the shapes of the 4g preset's matrices (expert down 3072 x 768, gate/up 768 x 3072,
// q_a 1536 x 3072, kv_a 576 x 3072, o_proj 3072 x 8192): how the row length and the matrix size
// move the one-token tiles' rate.
void BM_LinearShape(benchmark::State& st) {
  OneTokenOnCopies(st, FastFor(1), st.range(0), st.range(1), st.range(2));
}
BENCHMARK(BM_LinearShape)
    ->ArgsProduct({{2}, {3072}, {768, 8192}})
    ->ArgsProduct({{2}, {768, 1536, 576}, {3072}})
    ->Args({2, 16384, 2048})
    ->Unit(benchmark::kMicrosecond);

// Args: format (0 bf16, 1 fp8-block, 2 nvfp4), rows. One token against the short matrices of a
// decode step (512-2048 rows of 2048 columns: 0.6-8 MB in bf16, 0.3-2 MB packed): what a short
// op's start (a parallel region, cold streams) costs next to BM_LinearBig's long one.
void BM_LinearShort(benchmark::State& st) {
  OneTokenOnCopies(st, kFast, st.range(0), st.range(1), 2048);
}
BENCHMARK(BM_LinearShort)->ArgsProduct({{0, 1, 2}, {512, 2048}})->Unit(benchmark::kMicrosecond);

// Args: format (0 bf16, 1 fp8-block, 2 nvfp4), tokens, activations (0 f32, 1 bf16). The same
// N x 2048 weight every call.
void LinearOnOneWeight(benchmark::State& st, int64_t N) {
  const int64_t K = 2048, T = st.range(1);
  const CpuFastOps& fast = FastFor(st.range(2));
  const Weight w = st.range(0) == 0   ? MakeWeight(WeightFormat::kBF16, N, K)
                   : st.range(0) == 1 ? testing_util::RandomFp8(N, K, 7, /*ue8m0=*/true)
                                      : testing_util::RandomNvfp4(N, K, 7);
  Tensor x = Tensor::Empty(DType::kF32, {T, K}), y = Tensor::Empty(DType::kF32, {T, N});
  for (int64_t i = 0; i < T * K; ++i) x.data<float>()[i] = 0.001f * static_cast<float>(i % 97);
  for (auto _ : st) fast.Linear(x, w, y);
  SetLinearCounters(st, w, T);
}

// 2048 x 2048, which stays in the L3 (8 MB in bf16, 4 MB FP8, 2 MB NVFP4): the tiles' compute
// ceiling, which BM_LinearBig reaches only when memory is faster than it.
void BM_LinearHot(benchmark::State& st) { LinearOnOneWeight(st, 2048); }
BENCHMARK(BM_LinearHot)
    ->ArgsProduct({{0, 1, 2}, {1, 2, 4, 8, 16, 32}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// 256 x 2048 (1 MB in bf16, 512 KB FP8, 256 KB NVFP4: within the dev box's 1 MB L2 per core):
// the tiles' arithmetic alone, with one thread (OMP_NUM_THREADS=1) the rate a core's share of a
// larger matmul can reach at best.
void BM_LinearL2(benchmark::State& st) { LinearOnOneWeight(st, 256); }
BENCHMARK(BM_LinearL2)->ArgsProduct({{0, 1, 2}, {1, 2, 4, 8}, {1}})->Unit(benchmark::kMicrosecond);

// Args: format (0 bf16, 1 fp8-block, 2 nvfp4), tokens. The MLA head ops of one decode step at the
// 1g preset's shapes (16 heads, nope 192, v 256, latent 512): W_uk absorption of the query and
// W_uv projection of the attention output, both over kv_b_proj [16 x 448, 512]; one set of
// weights per layer of a 64-layer stack, so each call reads its kv_b from memory.
void BM_MlaHeadOps(benchmark::State& st) {
  constexpr int64_t H = 16, nope = 192, v = 256, R = 512, L = 64;
  const int64_t T = st.range(1);
  static std::vector<Weight> w[3];
  std::vector<Weight>& ws = w[st.range(0)];
  if (ws.empty())
    for (int64_t l = 0; l < L; ++l) {
      const uint32_t seed = static_cast<uint32_t>(l + 1);
      ws.push_back(st.range(0) == 0   ? MakeWeight(WeightFormat::kBF16, H * (nope + v), R)
                   : st.range(0) == 1 ? testing_util::RandomFp8(H * (nope + v), R, seed, true)
                                      : testing_util::RandomNvfp4(H * (nope + v), R, seed));
    }
  Tensor q = Tensor::Empty(DType::kF32, {T, H * nope}), ql = Tensor::Empty(DType::kF32, {T, H * R});
  Tensor out = Tensor::Empty(DType::kF32, {T, H * v});
  for (int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] = 0.01f * static_cast<float>(i % 89);
  // Arg 2: both ops (0), the absorption alone (1) or the projection alone (2); the bytes are
  // the W_uk rows, the W_uv rows or both.
  const int64_t which = st.range(2);
  const double share = which == 0   ? 1.0
                       : which == 1 ? double(nope) / (nope + v)
                                    : double(v) / (nope + v);
  int64_t l = 0;
  double bytes = 0;
  for (auto _ : st) {
    const Weight& kv = ws[l++ % L];
    if (which != 2) kFast.MlaAbsorbQuery(q, H, nope, nope, v, kv, ql);
    if (which != 1) kFast.MlaProjectOutput(ql, H, nope, v, kv, out);
    bytes += share * static_cast<double>(kv.StoredBytes());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MlaHeadOps)
    ->ArgsProduct({{0, 1, 2}, {1, 8, 32}, {0}})
    ->Args({0, 1, 1})
    ->Args({0, 1, 2})
    ->Args({1, 1, 1})
    ->Args({1, 1, 2})
    ->Args({2, 1, 1})
    ->Args({2, 1, 2})
    ->Args({0, 512, 1})  // a 512-token prefill's absorption and projection
    ->Args({0, 512, 2})
    ->Unit(benchmark::kMicrosecond);

// MLA attention of `tokens` query rows of `heads` heads (ql: [.., R], qr: [.., P], out like ql)
// over the f32 latent rows of kv ([rows, R + P], one row per page of `table`); query t attends to
// the counts[t] rows listed from sel + t * stride.
MlaAttentionArgs DecodeArgs(Tensor& ql, Tensor& qr, Tensor& out, int64_t tokens, int64_t heads,
                            Tensor& kv, const std::vector<int32_t>& table, const int32_t* sel,
                            int64_t stride, const int32_t* counts) {
  const int64_t R = ql.size(-1), P = qr.size(-1);
  MlaAttentionArgs a;
  a.q_latent = ql.data<float>();
  a.q_rope = qr.data<float>();
  a.tokens = tokens;
  a.heads = heads;
  a.latent_dim = R;
  a.rope_dim = P;
  a.kv = {kv.data<float>(), table, 1, R + P, R + P};
  a.selected = sel;
  a.selected_stride = stride;
  a.selected_count = counts;
  a.out_latent = out.data<float>();
  return a;
}

// Args: fast?, selected tokens. One decode query, 16 heads, the real 512 + 64 latent row.
void BM_MlaDecode(benchmark::State& st) {
  const Ops& ops = Pick(st.range(0));
  const int64_t n = st.range(1), H = 16, R = 512, P = 64;
  Tensor kv = Tensor::Empty(DType::kF32, {n, R + P});
  Tensor ql = Tensor::Empty(DType::kF32, {H, R}), qr = Tensor::Empty(DType::kF32, {H, P});
  Tensor out = Tensor::Empty(DType::kF32, {H, R});
  std::vector<int32_t> table(n), sel(n);
  for (int64_t i = 0; i < n; ++i)
    table[i] = static_cast<int32_t>(i), sel[i] = static_cast<int32_t>(i);
  int32_t count = static_cast<int32_t>(n);
  const MlaAttentionArgs a = DecodeArgs(ql, qr, out, 1, H, kv, table, sel.data(), n, &count);
  for (auto _ : st) ops.MlaAttention(a);
  st.counters["kv_GB/s"] =
      benchmark::Counter(double(n) * (R + P) * 4 * st.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MlaDecode)->ArgsProduct({{0, 1}, {512, 2048, 32768}})->Unit(benchmark::kMillisecond);

// MLA decode attention of B sequences of 16 heads, each query attending to its own 512 f32 latent
// rows, each call on the next of `copies` copies of the batch's KV.
void RunBatchDecode(benchmark::State& st, const Ops& ops, int64_t B, int64_t copies) {
  const int64_t n = 512, H = 16, R = 512, P = 64;
  std::vector<Tensor> kvs;
  for (int64_t c = 0; c < copies; ++c) {
    kvs.push_back(Tensor::Empty(DType::kF32, {B * n, R + P}));
    for (int64_t i = 0; i < kvs.back().numel(); ++i)
      kvs.back().data<float>()[i] = 0.001f * static_cast<float>((i + c) % 89);
  }
  Tensor ql = Tensor::Empty(DType::kF32, {B, H, R}), qr = Tensor::Empty(DType::kF32, {B, H, P});
  for (int64_t i = 0; i < ql.numel(); ++i) ql.data<float>()[i] = 0.01f * static_cast<float>(i % 7);
  for (int64_t i = 0; i < qr.numel(); ++i) qr.data<float>()[i] = 0.01f * static_cast<float>(i % 5);
  Tensor out = Tensor::Empty(DType::kF32, {B, H, R});
  std::vector<int32_t> table(B * n), sel(B * n), count(B, static_cast<int32_t>(n));
  for (int64_t i = 0; i < B * n; ++i)
    table[i] = static_cast<int32_t>(i), sel[i] = static_cast<int32_t>(i);
  std::vector<MlaAttentionArgs> args;
  for (Tensor& kv : kvs)
    args.push_back(DecodeArgs(ql, qr, out, B, H, kv, table, sel.data(), n, count.data()));
  size_t next = 0;
  for (auto _ : st) ops.MlaAttention(args[next++ % args.size()]);
  st.counters["GFLOP/s"] = benchmark::Counter(
      double(B * n * H) * 2.0 * (R + P + R) * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Batched decode as lucid bench runs it: 32 sequences (37.7 MB of f32 KV for the batch: more than
// the last-level cache, so rows come from DRAM).
void BM_MlaBatchDecode(benchmark::State& st) { RunBatchDecode(st, Pick(st.range(0)), 32, 1); }
BENCHMARK(BM_MlaBatchDecode)->Arg(1)->Unit(benchmark::kMillisecond);

// Args: fast?, sequences. Batched decode with the KV rows cold, as in a model step (the layers'
// weights stream through the caches between two attention calls): each call on the next of
// copies of the batch's KV that span 256 MB, eight times the dev box's L3.
void BM_MlaColdDecode(benchmark::State& st) {
  const int64_t B = st.range(1), bytes = B * 512 * (512 + 64) * 4;
  RunBatchDecode(st, Pick(st.range(0)), B, std::max<int64_t>(2, (int64_t{256} << 20) / bytes));
}
BENCHMARK(BM_MlaColdDecode)->ArgsProduct({{1}, {1, 8}})->Unit(benchmark::kMillisecond);

// Args: fast?, context. One decode query, 16 indexer heads of 128.
void BM_Indexer(benchmark::State& st) {
  const Ops& ops = Pick(st.range(0));
  const int64_t n = st.range(1), heads = 16, D = 128;
  Tensor keys = Tensor::Empty(DType::kF32, {n, D}), q = Tensor::Empty(DType::kF32, {heads, D});
  Tensor w = Tensor::Empty(DType::kF32, {heads}), s = Tensor::Empty(DType::kF32, {n});
  std::vector<int32_t> table(n);
  for (int64_t i = 0; i < n; ++i) table[i] = static_cast<int32_t>(i);
  int64_t causal = n;
  IndexerArgs a;
  a.q = q.data<float>();
  a.w = w.data<float>();
  a.tokens = 1;
  a.heads = heads;
  a.head_dim = D;
  a.keys = {keys.data<float>(), table, 1, D, D};
  a.causal_len = &causal;
  a.scores = s.data<float>();
  a.score_stride = n;
  for (auto _ : st) ops.IndexerScores(a);
  st.counters["key_GB/s"] =
      benchmark::Counter(double(n) * D * 4 * st.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Indexer)->ArgsProduct({{0, 1}, {32768}})->Unit(benchmark::kMillisecond);

// Args: fast?, scores. The DSA top-k of one query: index_topk 2048 of n indexer scores (random,
// with ties).
void BM_TopK(benchmark::State& st) {
  const Ops& ops = Pick(st.range(0));
  const int64_t n = st.range(1), k = 2048;
  std::mt19937 rng(3);
  std::vector<float> s(n);
  for (auto& v : s) v = static_cast<float>(rng() % 100000) / 7.0f;
  std::vector<int32_t> out(k);
  for (auto _ : st) {
    ops.TopK(s.data(), n, k, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_TopK)->ArgsProduct({{0, 1}, {4096, 32768}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lucid

BENCHMARK_MAIN();
