#include "bench/device_benchmark.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>

#include "bench/profiling_ops.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

constexpr int64_t kPage = 64;
constexpr int64_t kFillRows = 4096;  // KV rows written per WriteKvRows call

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double Ms(double s) { return s * 1e3; }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(2 + rng() % (vocab - 2));
  return v;
}

// A device copy of `rows` x `width` normal(0, 1) floats.
StatusOr<Tensor> RandomRows(Backend& b, int64_t rows, int64_t width, uint32_t seed) {
  Tensor host = Tensor::Empty(DType::kF32, {rows, width});
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = nd(rng);
  return b.UploadWeight(host);
}

// One layer's rows `pool_rows` of `out` from device rows `src` (>= kFillRows rows): chunks of at
// most kFillRows, the last one from `tail` ([pool_rows.size() % kFillRows rows]).
void WriteRows(const Ops& ops, const Tensor& src, const Tensor& tail, const KvRowsOut& out,
               const std::vector<int64_t>& pool_rows) {
  for (size_t i = 0; i < pool_rows.size(); i += kFillRows) {
    const size_t n = std::min<size_t>(kFillRows, pool_rows.size() - i);
    const Tensor* part[] = {n == static_cast<size_t>(kFillRows) ? &src : &tail};
    ops.WriteKvRows(part, out, std::span<const int64_t>(pool_rows.data() + i, n));
  }
}

// Synthetic KV for slots [0, len) of every sequence, through the backend's WriteKvRows.
Status FillKv(Backend& b, KvStorage& pool, std::vector<SequenceKv>& seqs, int64_t len) {
  std::vector<int64_t> rows;
  for (SequenceKv& s : seqs) {
    for (int64_t u = 0; u < len; ++u) rows.push_back(pool.PoolRow(s.page_table, u));
    s.length = len;
  }
  const int64_t tail_n = std::max<int64_t>(1, static_cast<int64_t>(rows.size()) % kFillRows);
  const KvCacheSpec& spec = pool.spec();
  LUCID_ASSIGN_OR_RETURN(Tensor mla, RandomRows(b, kFillRows, spec.mla_row(), 1));
  LUCID_ASSIGN_OR_RETURN(Tensor mla_tail, RandomRows(b, tail_n, spec.mla_row(), 2));
  Tensor key, key_tail;
  if (spec.indexer_dim > 0) {
    LUCID_ASSIGN_OR_RETURN(key, RandomRows(b, kFillRows, spec.indexer_dim, 3));
    LUCID_ASSIGN_OR_RETURN(key_tail, RandomRows(b, tail_n, spec.indexer_dim, 4));
  }
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    WriteRows(b.ops(), mla, mla_tail, pool.MlaOut(l), rows);
    if (spec.indexer_dim > 0) WriteRows(b.ops(), key, key_tail, pool.IndexerOut(l), rows);
  }
  return b.Synchronize();
}

// One step, timed from its start to its logits in host memory; the next tokens (greedy) in `tok`.
StatusOr<double> TimedStep(Model& m, Backend& b, const StepInput& in, KvStorage& pool,
                           std::vector<int32_t>* tok) {
  StepOutput step;
  const double t0 = Now();
  LUCID_RETURN_IF_ERROR(m.Forward(in, pool, &step));  // its logits come back in host memory
  LUCID_RETURN_IF_ERROR(b.Synchronize());
  const Tensor& logits = step.logits;
  const double dt = Now() - t0;
  const int64_t V = m.config().vocab_size;
  if (tok != nullptr)
    for (size_t r = 0; r < tok->size(); ++r)
      (*tok)[r] = ArgMax(logits.data<const float>() + static_cast<int64_t>(r) * V, V);
  return dt;
}

double Pct(double x, double of) { return of > 0 ? 100 * x / of : 0; }

Status Prefill(Model& m, ProfilingBackend& pb, const DeviceProbes& p, const DeviceBenchOptions& o,
               std::FILE* log, nlohmann::json* out) {
  const int64_t P = o.prompt_len, pages = (P + kPage - 1) / kPage;
  LUCID_ASSIGN_OR_RETURN(KvStorage pool,
                         KvStorage::Make(m.kv_spec(), pages, kPage, o.kv_dtype, m.kv_allocator()));
  std::vector<int32_t> page_table(pages);
  std::iota(page_table.begin(), page_table.end(), 0);
  const std::vector<int32_t> tokens = RandomTokens(P, m.config().vocab_size, 100);
  StepInput in;
  AddSequence(in, page_table, 0, tokens, ChunkRows::kLast);  // lm_head for the sampled row only
  const ProfilingOps& prof = pb.profiling();
  prof.set_read_step_data(true);
  prof.Reset();
  LUCID_RETURN_IF_ERROR(TimedStep(m, pb, in, pool, nullptr).status());
  const double flops = prof.Total().flops;
  const double matmul_flops =
      prof.Get(OpCategory::kMatmul).flops + prof.Get(OpCategory::kExperts).flops;
  prof.set_read_step_data(false);
  std::vector<double> times;
  for (int r = 0; r < o.repeats; ++r) {
    LUCID_ASSIGN_OR_RETURN(double dt, TimedStep(m, pb, in, pool, nullptr));
    times.push_back(dt);
  }
  const double s = Median(times), tflops = flops / s / 1e12;
  std::fprintf(log,
               "prefill %5lld tokens: %9.2f ms %9.1f tok/s | %.2f TFLOP/s (matmuls %.0f%% of the "
               "FLOPs) = %.1f%% of the bf16 tensor peak, %.1f%% of the f32 GEMM rate\n",
               static_cast<long long>(P), Ms(s), P / s, tflops, Pct(matmul_flops, flops),
               Pct(tflops, p.bf16_tflops), Pct(tflops, p.f32_tflops));
  *out = {{"tokens", P},
          {"ms", Ms(s)},
          {"tok_s", P / s},
          {"tflops", tflops},
          {"flops", flops},
          {"matmul_flops", matmul_flops},
          {"pct_bf16_tensor_peak", Pct(tflops, p.bf16_tflops)},
          {"pct_f32_gemm", Pct(tflops, p.f32_tflops)}};
  return OkStatus();
}

StatusOr<nlohmann::json> Decode(Model& m, ProfilingBackend& pb, const DeviceProbes& p, int64_t B,
                                const DeviceBenchOptions& o, std::FILE* log) {
  const int64_t per_seq = (o.context + o.gen_len + 2 + kPage - 1) / kPage;
  LUCID_ASSIGN_OR_RETURN(KvStorage pool, KvStorage::Make(m.kv_spec(), per_seq * B, kPage,
                                                         o.kv_dtype, m.kv_allocator()));
  std::vector<SequenceKv> seqs(B);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t q = 0; q < per_seq; ++q) seqs[b].page_table.push_back(int32_t(b * per_seq + q));
  LUCID_RETURN_IF_ERROR(FillKv(pb, pool, seqs, o.context));
  std::vector<int32_t> tok = RandomTokens(B, m.config().vocab_size, 7);
  const ProfilingOps& prof = pb.profiling();
  double bytes = 0, flops = 0, experts = 0;
  std::vector<double> times;
  for (int64_t i = 0; i <= o.gen_len; ++i) {
    StepInput in;
    for (int64_t b = 0; b < B; ++b)
      AddSequence(in, seqs[b].page_table, seqs[b].length, std::span<const int32_t>(&tok[b], 1),
                  ChunkRows::kLast);
    prof.set_read_step_data(i == 0);  // the first step is counted, the others timed
    prof.Reset();
    LUCID_ASSIGN_OR_RETURN(double dt, TimedStep(m, pb, in, pool, &tok));
    for (SequenceKv& s : seqs) ++s.length;
    if (i == 0) {
      bytes = prof.Total().bytes;
      flops = prof.Total().flops;
      experts = prof.Get(OpCategory::kExperts).units;
    } else {
      times.push_back(dt);
    }
  }
  const double s = Median(times), gbs = bytes / s / 1e9;
  std::fprintf(log,
               "decode batch %4lld ctx %6lld: step %9.3f ms %9.1f tok/s | %8.1f MB/step %7.1f "
               "GB/s = %5.1f%% of the probed bandwidth, %5.1f%% of the theoretical | %.2f "
               "TFLOP/s | experts touched %.0f\n",
               static_cast<long long>(B), static_cast<long long>(o.context), Ms(s), B / s,
               bytes / 1e6, gbs, Pct(gbs, p.read_gbs), Pct(gbs, p.peak_gbs), flops / s / 1e12,
               experts);
  return nlohmann::json{{"batch", B},
                        {"context", o.context},
                        {"step_ms", Ms(s)},
                        {"tok_s", B / s},
                        {"bytes_per_step", bytes},
                        {"gbs", gbs},
                        {"pct_bandwidth_probed", Pct(gbs, p.read_gbs)},
                        {"pct_bandwidth_theoretical", Pct(gbs, p.peak_gbs)},
                        {"tflops", flops / s / 1e12},
                        {"experts_touched", experts}};
}

}  // namespace

std::string DeviceProbes::Line() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s | read %.0f GB/s (theoretical %.0f) | bf16 GEMM %.0f TFLOP/s | f32 GEMM %.1f "
                "TFLOP/s",
                device.c_str(), read_gbs, peak_gbs, bf16_tflops, f32_tflops);
  return buf;
}

StatusOr<nlohmann::json> RunDeviceBench(Backend& backend, const DeviceProbes& probes,
                                        const DeviceBenchOptions& o, std::FILE* log) {
  std::fprintf(log, "%s\n", probes.Line().c_str());
  ProfilingBackend pb(backend);
  const double t0 = Now();
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(o.model_path, pb));
  const double t_load = Now() - t0;
  const ModelConfig& c = model->config();
  std::fprintf(log, "model %s: %s, %lld layers, %.2f GB of weights on %s | kv %s | load %.1f ms\n",
               o.model_path.c_str(), c.model_type.c_str(),
               static_cast<long long>(c.num_hidden_layers), model->weight_bytes() / 1e9,
               backend.name().c_str(), KvDtypeName(o.kv_dtype), Ms(t_load));
  nlohmann::json j;
  j["device"] = {{"line", probes.Line()},
                 {"device", probes.device},
                 {"read_gbs", probes.read_gbs},
                 {"peak_gbs", probes.peak_gbs},
                 {"bf16_tflops", probes.bf16_tflops},
                 {"f32_tflops", probes.f32_tflops}};
  j["model"] = {{"path", o.model_path},
                {"model_type", c.model_type},
                {"weight_bytes", model->weight_bytes()},
                {"backend", backend.name()},
                {"kv_cache_dtype", KvDtypeName(o.kv_dtype)},
                {"load_ms", Ms(t_load)}};
  if (!o.skip_prefill) {
    nlohmann::json p;
    LUCID_RETURN_IF_ERROR(Prefill(*model, pb, probes, o, log, &p));
    j["prefill"] = p;
  }
  j["decode"] = nlohmann::json::array();
  for (int64_t B : o.batches) {
    LUCID_ASSIGN_OR_RETURN(nlohmann::json d, Decode(*model, pb, probes, B, o, log));
    j["decode"].push_back(std::move(d));
  }
  return j;
}

}  // namespace lucid
