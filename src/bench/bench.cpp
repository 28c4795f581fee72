#include "bench/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/ops_registry.h"
#include "bench/machine_probe.h"
#include "bench/profiling_ops.h"
#include "formats/align_checkpoint.h"
#include "formats/safetensors.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

// Reads a file once into the page cache (a GGUF model's mapping then faults no disk reads; a dense
// model's first-token run has touched every page of its mapping already).
Status ReadFilePages(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  std::vector<char> buf(size_t{1} << 20);
  while (f.read(buf.data(), static_cast<std::streamsize>(buf.size())) || f.gcount() > 0) {
  }
  return OkStatus();
}

constexpr int64_t kPage = 64;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One timed step: wall time and the per-category tallies of that step.
struct Step {
  double seconds = 0;
  double paired_gbs = 0;  // read bandwidth probed right after the step (0: not probed)
  std::array<OpTally, static_cast<int>(OpCategory::kCount)> cat{};
  OpTally total;
  std::map<std::string, OpTally> by_weight;  // the matmuls per weight (ProfilingOps::ByWeight)
  CollectiveTally comm;  // this rank's collectives in the step (tensor parallelism only)
};

Step MedianStep(std::vector<Step> v) {
  std::sort(v.begin(), v.end(), [](const Step& a, const Step& b) { return a.seconds < b.seconds; });
  return v[v.size() / 2];
}

Step Capture(const ProfilingOps& p, double seconds) {
  Step s;
  s.seconds = seconds;
  for (int c = 0; c < static_cast<int>(OpCategory::kCount); ++c) s.cat[c] = p.Get(OpCategory(c));
  s.total = p.Total();
  s.by_weight = p.ByWeight();
  return s;
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = static_cast<int32_t>(2 + rng() % (vocab - 2));
  return v;
}

// Writes synthetic KV rows for positions [0, len) of every layer and sets seq.length = len.
void FillKv(KvStorage& pool, SequenceKv& seq, int64_t len, uint32_t seed) {
  const KvCacheSpec& s = pool.spec();
  constexpr int kRows = 97;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> ckv(kRows * s.latent_dim), kpe(kRows * s.rope_dim),
      key(kRows * std::max<int64_t>(1, s.indexer_dim));
  for (auto& v : ckv) v = nd(rng);
  for (auto& v : kpe) v = nd(rng);
  for (auto& v : key) v = nd(rng);
  for (int64_t l = 0; l < s.num_layers; ++l)
    for (int64_t u = 0; u < len; ++u) {
      const int64_t r = (u * 31 + l * 7) % kRows;
      pool.WriteMla(l, seq.page_table, u, &ckv[r * s.latent_dim], &kpe[r * s.rope_dim]);
      if (s.indexer_dim > 0) pool.WriteIndexerKey(l, seq.page_table, u, &key[r * s.indexer_dim]);
    }
  seq.length = len;
}

double Ms(double s) { return s * 1e3; }

// Under tensor parallelism: every rank waits for the others here (untimed), then the collective
// tallies start from zero, so a timed step starts on every rank at once. Nothing for one process.
Status StartTogether(TimedCommunicator* tp) {
  if (tp == nullptr) return OkStatus();
  LUCID_RETURN_IF_ERROR(tp->Barrier());
  tp->Reset();
  return OkStatus();
}

bool Leader(const BenchOptions& o) { return o.tp == nullptr || o.tp->rank() == 0; }

// The machine probe, on rank 0 only under tensor parallelism (the others wait in a barrier, so it
// measures one process's threads on an idle machine); the others get the `fallback`.
MachineInfo ProbeOnLeader(const BenchOptions& o, const MachineInfo& fallback, uint64_t bytes,
                          int repeats, Status* status) {
  MachineInfo mi = fallback;
  if (Leader(o)) mi = ProbeMachine(bytes, repeats);
  if (o.tp != nullptr) *status = o.tp->Barrier();
  return mi;
}

// Decodes `steps` timed steps (after one warm-up) of B sequences whose KV holds ctx tokens. With
// a probe, each timed step is followed by one bandwidth pass (Step::paired_gbs).
StatusOr<std::vector<Step>> DecodeSteps(Model& m, const ProfilingOps& prof, int64_t B, int64_t ctx,
                                        int64_t steps, KvDtype kv_dtype, TimedCommunicator* tp,
                                        BandwidthProbe* probe = nullptr) {
  const int64_t V = m.config().vocab_size, total = ctx + steps + 1;
  const int64_t per_seq = (total + kPage - 1) / kPage;
  KvStorage pool(m.kv_spec(), per_seq * B, kPage, kv_dtype, m.kv_allocator());
  std::vector<SequenceKv> seqs(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p = 0; p < per_seq; ++p) seqs[b].page_table.push_back(int32_t(b * per_seq + p));
    FillKv(pool, seqs[b], ctx, static_cast<uint32_t>(b + 1));
  }
  std::vector<int32_t> tok = RandomTokens(B, V, 7);
  std::vector<Step> out;
  for (int64_t i = 0; i <= steps; ++i) {
    StepInput in;
    for (int64_t b = 0; b < B; ++b)
      AddSequence(in, seqs[b].page_table, seqs[b].length, std::span<const int32_t>(&tok[b], 1),
                  ChunkRows::kLast);
    StepOutput step;
    LUCID_RETURN_IF_ERROR(StartTogether(tp));
    prof.Reset();
    const double t0 = Now();
    LUCID_RETURN_IF_ERROR(m.Forward(in, pool, &step));
    const double dt = Now() - t0;
    for (int64_t b = 0; b < B; ++b) {
      tok[b] = ArgMax(step.logits.data<const float>() + b * V, V);
      ++seqs[b].length;
    }
    if (i == 0) continue;
    out.push_back(Capture(prof, dt));
    if (tp != nullptr) out.back().comm = tp->Total();
    if (probe) out.back().paired_gbs = probe->Measure(1);
  }
  return out;
}

const OpTally& Cat(const Step& s, OpCategory c) { return s.cat[static_cast<int>(c)]; }

// Per step, achieved GB/s over the bandwidth probed right after it: the median ratio, and the
// median and range of those probes. On a machine whose bandwidth drifts (a shared VM's moves by
// 2x within minutes) this compares each step with its own moment.
struct Paired {
  double ratio = 0, median_gbs = 0, min_gbs = 0, max_gbs = 0;
};
Paired PairedRatio(const std::vector<Step>& steps) {
  std::vector<double> r, g;
  for (const Step& s : steps)
    if (s.paired_gbs > 0) {
      r.push_back(s.total.bytes / s.seconds / 1e9 / s.paired_gbs);
      g.push_back(s.paired_gbs);
    }
  if (r.empty()) return {};
  std::sort(r.begin(), r.end());
  std::sort(g.begin(), g.end());
  return {r[r.size() / 2], g[g.size() / 2], g.front(), g.back()};
}

// The compute peak the matmuls (dense and experts) are held to: the vdpbf16ps peak when they run
// on bf16 activations (fast-bf16act on an AVX512_BF16 machine), else the fp32 FMA peak (the
// hi/lo split's two vdpbf16ps per pair run at about the FMA rate).
double MatmulPeak(const MachineInfo& mi, const BenchOptions& o) {
  const bool bf16 = !o.reference_ops && o.activations == FastActivations::kBf16;
  return bf16 && mi.dot_bf16_gflops > 0 ? mi.dot_bf16_gflops : mi.fma_gflops;
}

// The step's roofline: for each op kind the larger of its bytes at the probed bandwidth and its
// FLOPs at the probed peak (matmul_gflops for the dense matmuls and the experts, the FMA peak for
// the rest), summed (kinds run one after another). Experts count `expert_bytes` (the uniform
// model's touched experts) instead of the measured bytes.
double RooflineSeconds(const Step& s, const MachineInfo& mi, double matmul_gflops,
                       double expert_bytes) {
  double t = 0;
  for (int c = 0; c < static_cast<int>(OpCategory::kCount); ++c) {
    const OpCategory cat = OpCategory(c);
    const double bytes = cat == OpCategory::kExperts ? expert_bytes : s.cat[c].bytes;
    const double peak =
        cat == OpCategory::kExperts || cat == OpCategory::kMatmul ? matmul_gflops : mi.fma_gflops;
    t += std::max(bytes / (mi.read_gbs * 1e9), s.cat[c].flops / (peak * 1e9));
  }
  return t;
}

nlohmann::json Breakdown(const Step& s) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < static_cast<int>(OpCategory::kCount); ++c)
    j[OpCategoryName(OpCategory(c))] = {
        {"ms", Ms(s.cat[c].seconds)}, {"bytes", s.cat[c].bytes}, {"gflop", s.cat[c].flops / 1e9}};
  return j;
}

Status Prefill(Model& m, const ProfilingOps& prof, const BenchOptions& o, const MachineInfo& mi,
               std::FILE* log, nlohmann::json* out) {
  const int64_t P = o.prompt_len;
  const int64_t pages = (P + kPage - 1) / kPage;
  KvStorage pool(m.kv_spec(), pages, kPage, o.kv_dtype, m.kv_allocator());
  std::vector<int32_t> page_table(pages);
  std::iota(page_table.begin(), page_table.end(), 0);
  std::vector<Step> runs;
  for (int r = 0; r < o.repeats; ++r) {
    // A generation prefill: lm_head for the last row only (what is sampled).
    std::vector<int32_t> tok = RandomTokens(P, m.config().vocab_size, 100 + r);
    StepInput in;
    AddSequence(in, page_table, 0, tok, ChunkRows::kLast);
    StepOutput step;
    LUCID_RETURN_IF_ERROR(StartTogether(o.tp));
    prof.Reset();
    const double t0 = Now();
    LUCID_RETURN_IF_ERROR(m.Forward(in, pool, &step));
    runs.push_back(Capture(prof, Now() - t0));
  }
  const Step s = MedianStep(runs);
  const OpTally& mm = Cat(s, OpCategory::kMatmul);
  const OpTally& ex = Cat(s, OpCategory::kExperts);
  const double mm_gf = (mm.flops + ex.flops) / (mm.seconds + ex.seconds) / 1e9;
  const double dense_gf = mm.flops / mm.seconds / 1e9;
  const double all_gf = s.total.flops / s.seconds / 1e9;
  const double peak = MatmulPeak(mi, o);
  const char* peak_name = peak == mi.fma_gflops ? "peak" : "bf16 dot peak";
  std::fprintf(log,
               "prefill  %5lld tokens: %8.1f ms  %7.1f tok/s | matmuls %.0f GFLOP/s = %.0f%% of "
               "%s (dense %.0f GFLOP/s %.0f%%, experts %.0f GFLOP/s) | whole step %.0f GFLOP/s\n",
               static_cast<long long>(P), Ms(s.seconds), P / s.seconds, mm_gf, 100 * mm_gf / peak,
               peak_name, dense_gf, 100 * dense_gf / peak,
               ex.flops / std::max(ex.seconds, 1e-12) / 1e9, all_gf);
  *out = {{"tokens", P},
          {"ms", Ms(s.seconds)},
          {"tok_s", P / s.seconds},
          {"matmul_gflops", mm_gf},
          {"matmul_peak_gflops", peak},
          {"matmul_pct_peak", 100 * mm_gf / peak},
          {"dense_matmul_gflops", dense_gf},
          {"step_gflops", all_gf},
          {"breakdown", Breakdown(s)}};
  return OkStatus();
}

// The step's matmuls per weight, slowest first: calls, time, bytes, GB/s and its share of
// `gbs_ref` (the bandwidth probed right after the step). Printed to `log` when given.
nlohmann::json ByWeight(const Step& s, double gbs_ref, std::FILE* log) {
  std::vector<std::pair<std::string, OpTally>> v(s.by_weight.begin(), s.by_weight.end());
  std::sort(v.begin(), v.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, t] : v) {
    const double gbs = t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0;
    if (log)
      std::fprintf(log,
                   "                                 %-52s %3lld calls %8.3f ms %8.2f MB %6.1f "
                   "GB/s %4.0f%%\n",
                   name.c_str(), static_cast<long long>(t.calls), Ms(t.seconds), t.bytes / 1e6, gbs,
                   100 * gbs / gbs_ref);
    out.push_back({{"weight", name},
                   {"calls", t.calls},
                   {"ms", Ms(t.seconds)},
                   {"bytes", t.bytes},
                   {"gflop", t.flops / 1e9},
                   {"gbs", gbs},
                   {"pct_bandwidth_paired", 100 * gbs / gbs_ref}});
  }
  return out;
}

// Under tensor parallelism: the median over a configuration's steps of each rank's time in
// collectives (gathered from every rank), with rank 0's calls and bytes per step; printed under
// the configuration's line. `step_seconds` is rank 0's median step.
StatusOr<nlohmann::json> Communication(TimedCommunicator& tp, const std::vector<Step>& steps,
                                       double step_seconds, std::FILE* log) {
  std::vector<double> secs;
  for (const Step& s : steps) secs.push_back(s.comm.seconds);
  std::sort(secs.begin(), secs.end());
  const double mine = secs.empty() ? 0 : secs[secs.size() / 2];
  std::vector<double> by_rank(static_cast<size_t>(tp.size()));
  LUCID_RETURN_IF_ERROR(tp.AllGather(&mine, by_rank.data(), sizeof(double)));
  const CollectiveTally per_step = steps.empty() ? CollectiveTally{} : steps.back().comm;
  std::string ranks;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    char one[64];
    std::snprintf(one, sizeof(one), "%srank %zu %.2f ms", r ? ", " : "", r, Ms(by_rank[r]));
    ranks += one;
  }
  std::fprintf(log,
               "                               communication: %.2f ms of the %.2f ms step (%.0f%%) "
               "on rank 0, %lld collectives, %.1f KB sent per step; median time in collectives "
               "%s (transfer plus waiting for the slower rank)\n",
               Ms(mine), Ms(step_seconds), 100 * mine / step_seconds,
               static_cast<long long>(per_step.calls), per_step.bytes / 1e3, ranks.c_str());
  nlohmann::json ms_by_rank = nlohmann::json::array();
  for (double v : by_rank) ms_by_rank.push_back(Ms(v));
  return nlohmann::json{{"ms", Ms(mine)},
                        {"ms_by_rank", ms_by_rank},
                        {"collectives_per_step", per_step.calls},
                        {"bytes_per_step", per_step.bytes}};
}

Status DecodeBatches(Model& m, const ProfilingOps& prof, const BenchOptions& o,
                     const MachineInfo& run_probe, BandwidthProbe* probe, std::FILE* log,
                     nlohmann::json* out) {
  const ModelConfig& c = m.config();
  int64_t moe_layers = 0;
  for (bool b : c.layer_is_moe) moe_layers += b;
  double per_expert = 0;  // bytes of one expert (gate + up + down), from the first measurement
  *out = nlohmann::json::array();
  for (int64_t B : o.batches) {
    // The memory bandwidth of a shared machine drifts by tens of percent over minutes: probe it
    // again right before each configuration and normalize by the larger of that and the run's
    // first probe (the conservative choice: the higher bandwidth gives the lower percentage).
    MachineInfo mi = run_probe;
    Status probed;
    const MachineInfo now = ProbeOnLeader(o, run_probe, uint64_t{512} << 20, 3, &probed);
    LUCID_RETURN_IF_ERROR(probed);
    mi.read_gbs = std::max(run_probe.read_gbs, now.read_gbs);
    LUCID_ASSIGN_OR_RETURN(std::vector<Step> steps, DecodeSteps(m, prof, B, o.prompt_len, o.gen_len,
                                                                o.kv_dtype, o.tp, probe));
    const Paired paired = PairedRatio(steps);
    const Step s = MedianStep(steps);
    const OpTally& ex = Cat(s, OpCategory::kExperts);
    if (per_expert == 0 && ex.units > 0) per_expert = ex.bytes / ex.units;
    const double E = double(c.n_routed_experts), K = double(c.num_experts_per_tok);
    const double expected =
        moe_layers * E * (1.0 - std::pow(1.0 - K / std::max(E, 1.0), double(B)));
    const double model_bytes = s.total.bytes - ex.bytes + expected * per_expert;
    const double roofline = RooflineSeconds(s, mi, MatmulPeak(mi, o), expected * per_expert);
    const double gbs = s.total.bytes / s.seconds / 1e9, gf = s.total.flops / s.seconds / 1e9;
    std::fprintf(log,
                 "decode   batch %3lld ctx %5lld: step %8.2f ms  %7.1f tok/s | %7.1f MB/step "
                 "(%6.1f MB/token) %5.1f GB/s = %3.0f%% of bandwidth | %5.0f GFLOP/s %3.0f%% | "
                 "experts touched %4.0f (uniform model %5.1f) -> model %7.1f MB/step, %7.2f ms "
                 "(bandwidth probed now %.1f GB/s, used %.1f)\n",
                 static_cast<long long>(B), static_cast<long long>(o.prompt_len), Ms(s.seconds),
                 B / s.seconds, s.total.bytes / 1e6, s.total.bytes / 1e6 / B, gbs,
                 100 * gbs / mi.read_gbs, gf, 100 * gf / mi.fma_gflops, ex.units, expected,
                 model_bytes / 1e6, Ms(model_bytes / (mi.read_gbs * 1e9)), now.read_gbs,
                 mi.read_gbs);
    std::fprintf(log,
                 "                               roofline %7.2f ms (per op kind: max of bytes at "
                 "the probed bandwidth, FLOPs at the probed peak) -> step = %.1fx roofline\n",
                 Ms(roofline), s.seconds / roofline);
    // The bytes model and the roofline again at the paired probes' bandwidth (the same moment).
    MachineInfo mp = mi;
    if (paired.median_gbs > 0) mp.read_gbs = paired.median_gbs;
    const double roofline_p = RooflineSeconds(s, mp, MatmulPeak(mp, o), expected * per_expert);
    const double model_p = model_bytes / (mp.read_gbs * 1e9);
    if (paired.median_gbs > 0)  // not under tensor parallelism (no paired probe)
      std::fprintf(log,
                   "                               paired: %3.0f%% of the bandwidth probed right "
                   "after each step (median over steps; those probes %.1f GB/s, %.1f-%.1f); at "
                   "that bandwidth model %.2f ms, roofline %.2f ms -> step = %.1fx roofline\n",
                   100 * paired.ratio, paired.median_gbs, paired.min_gbs, paired.max_gbs,
                   Ms(model_p), Ms(roofline_p), s.seconds / roofline_p);
    // Where the FLOPs at the peak alone take longer than the bytes model, no kernel on this
    // machine can bring the step down to the bytes model: say so beside it.
    if (roofline_p > 1.02 * model_p)
      std::fprintf(log,
                   "                               the roofline is %.2fx the bytes model: at this "
                   "compute peak the step cannot reach the bytes model (compute-bound)\n",
                   roofline_p / model_p);
    if (o.by_weight)
      std::fprintf(log, "                               matmuls of the median step by weight:\n");
    nlohmann::json by_weight =
        ByWeight(s, s.paired_gbs > 0 ? s.paired_gbs : mi.read_gbs, o.by_weight ? log : nullptr);
    nlohmann::json comm;
    if (o.tp != nullptr) {
      LUCID_ASSIGN_OR_RETURN(comm, Communication(*o.tp, steps, s.seconds, log));
    }
    out->push_back({{"batch", B},
                    {"context", o.prompt_len},
                    {"step_ms", Ms(s.seconds)},
                    {"tok_s", B / s.seconds},
                    {"bytes_per_step", s.total.bytes},
                    {"bytes_per_token", s.total.bytes / B},
                    {"gbs", gbs},
                    {"pct_bandwidth", 100 * gbs / mi.read_gbs},
                    {"bandwidth_probed_now_gbs", now.read_gbs},
                    {"bandwidth_used_gbs", mi.read_gbs},
                    {"pct_bandwidth_paired", 100 * paired.ratio},
                    {"paired_probe_gbs", paired.median_gbs},
                    {"model_step_ms_paired", Ms(model_p)},
                    {"roofline_step_ms_paired", Ms(roofline_p)},
                    {"roofline_over_model_paired", roofline_p / model_p},
                    {"gflops", gf},
                    {"pct_peak", 100 * gf / mi.fma_gflops},
                    {"experts_touched", ex.units},
                    {"experts_expected_uniform", expected},
                    {"model_bytes_per_step", model_bytes},
                    {"model_step_ms", Ms(model_bytes / (mi.read_gbs * 1e9))},
                    {"roofline_step_ms", Ms(roofline)},
                    {"breakdown", Breakdown(s)},
                    {"matmul_by_weight", std::move(by_weight)}});
    if (o.tp != nullptr) out->back()["communication"] = std::move(comm);
  }
  return OkStatus();
}

// ckpt: the safetensors checkpoint the dense-attention copy loads from (null for a GGUF file: its
// sweep has the sparse rows only).
Status ContextSweep(Model& sparse, const ProfilingOps& prof, const Checkpoint* ckpt,
                    const BenchOptions& o, const MachineInfo& mi, std::FILE* log,
                    nlohmann::json* out) {
  std::unique_ptr<Model> dense;
  ModelLoadOptions lo;
  lo.force_dense_attention = true;
  lo.tp = o.tp;
  lo.ep_size = o.ep_size;
  if (sparse.config().has_indexer && ckpt != nullptr) {
    LUCID_ASSIGN_OR_RETURN(dense, LoadModel(*ckpt, prof, lo));
  }
  *out = nlohmann::json::array();
  for (int64_t ctx : o.contexts) {
    for (int mode = 0; mode < 2; ++mode) {
      Model* m = mode == 0 ? &sparse : dense.get();
      if (m == nullptr) continue;
      const char* name = mode == 0 && sparse.config().has_indexer ? "dsa" : "dense";
      LUCID_ASSIGN_OR_RETURN(std::vector<Step> steps,
                             DecodeSteps(*m, prof, 1, ctx, o.gen_len, o.kv_dtype, o.tp));
      const Step s = MedianStep(steps);
      const OpTally& at = Cat(s, OpCategory::kAttention);
      const OpTally& ix = Cat(s, OpCategory::kIndexer);
      const OpTally& tk = Cat(s, OpCategory::kTopK);
      const double ix_gbs = ix.seconds > 0 ? ix.bytes / ix.seconds / 1e9 : 0;
      const double at_gf = at.seconds > 0 ? at.flops / at.seconds / 1e9 : 0;
      const double ix_gf = ix.seconds > 0 ? ix.flops / ix.seconds / 1e9 : 0;
      std::fprintf(log,
                   "context %6lld %-5s: step %8.2f ms | attention %7.2f ms (%5.0f GFLOP/s) | "
                   "indexer %7.2f ms (%5.1f GB/s = %3.0f%% bw, %4.0f GFLOP/s) | top-k %6.2f ms | "
                   "weights %7.2f ms\n",
                   static_cast<long long>(ctx), name, Ms(s.seconds), Ms(at.seconds), at_gf,
                   Ms(ix.seconds), ix_gbs, 100 * ix_gbs / mi.read_gbs, ix_gf, Ms(tk.seconds),
                   Ms(Cat(s, OpCategory::kMatmul).seconds + Cat(s, OpCategory::kExperts).seconds));
      out->push_back({{"context", ctx},
                      {"mode", name},
                      {"step_ms", Ms(s.seconds)},
                      {"attention_ms", Ms(at.seconds)},
                      {"indexer_ms", Ms(ix.seconds)},
                      {"topk_ms", Ms(tk.seconds)},
                      {"indexer_gbs", ix_gbs},
                      {"attention_gflops", at_gf},
                      {"breakdown", Breakdown(s)}});
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<nlohmann::json> RunBench(const BenchOptions& o, std::FILE* log) {
  nlohmann::json j;
  Status probed;
  const MachineInfo mi = ProbeOnLeader(o, MachineInfo{}, uint64_t{512} << 20, 7, &probed);
  LUCID_RETURN_IF_ERROR(probed);
  std::fprintf(log, "%s\n", mi.Line().c_str());
  j["machine"] = {{"line", mi.Line()},
                  {"cpu", mi.cpu},
                  {"isa", mi.isa},
                  {"threads", mi.threads},
                  {"read_gbs", mi.read_gbs},
                  {"read_gbs_best", mi.read_gbs_best},
                  {"fma_gflops", mi.fma_gflops},
                  {"fma_gflops_best", mi.fma_gflops_best},
                  {"dot_bf16_gflops", mi.dot_bf16_gflops}};
  // The set's entry in the backend registry builds the backend (as serve and generate do); the
  // model runs on the host through ProfilingOps around its ops.
  const OpsSetEntry* set = FindOpsSet("cpu", o.kernel_set);
  if (set == nullptr) return InvalidArgument("bench: no cpu kernel set named " + o.kernel_set);
  const std::unique_ptr<Backend> backend = MakeBackend(*set, CpuIsa::kAvx512Bf16);
  ProfilingOps prof(backend->ops());
  const double t0 = Now();
  // A regular file is a GGUF file (LoadModel's rule), else a safetensors checkpoint directory.
  std::error_code ec;
  const bool gguf = std::filesystem::is_regular_file(o.model_path, ec);
  std::optional<Checkpoint> ckpt;
  std::unique_ptr<Model> model;
  ModelLoadOptions lo;
  lo.tp = o.tp;
  lo.ep_size = o.ep_size;
  if (gguf) {
    LUCID_ASSIGN_OR_RETURN(model, LoadModel(o.model_path, prof, lo));
  } else {
    LUCID_ASSIGN_OR_RETURN(ckpt, Checkpoint::Open(o.model_path));
    LUCID_ASSIGN_OR_RETURN(model, LoadModel(*ckpt, prof, lo));
  }
  const double t_load = Now() - t0;
  const std::vector<int32_t> prompt = RandomTokens(16, model->config().vocab_size, 1);
  LUCID_RETURN_IF_ERROR(GreedyGenerate(*model, prompt, 1, nullptr).status());
  const double t_first = Now() - t0;
  const ModelConfig& c = model->config();
  std::fprintf(log,
               "model %s: %s, %lld layers, %.2f GB of weights | ops %s | kv %s | load %.1f ms, "
               "first token (16-token prompt) at %.1f ms\n",
               o.model_path.c_str(), c.model_type.c_str(),
               static_cast<long long>(c.num_hidden_layers), model->weight_bytes() / 1e9,
               backend->ops().name(), KvDtypeName(o.kv_dtype), Ms(t_load), Ms(t_first));
  std::fprintf(log, "cpu kernels: %s (%s)\n", o.kernel_set.c_str(), o.kernel_set_reason.c_str());
  if (o.tp != nullptr)
    std::fprintf(log,
                 "tensor parallel: %d ranks (%s), ep %d; weights above are rank 0's shard; every "
                 "rank runs each step in lock-step after a barrier\n",
                 o.tp->size(), o.tp->kind().c_str(), o.ep_size);
  const uint64_t misaligned = ckpt ? MisalignedWeightBytes(*ckpt) : 0;
  if (misaligned > 0)
    std::fprintf(log, "warning: %s\n", MisalignedWeightsMessage(misaligned).c_str());
  // Timed steps see the weights as a server does after its start-up prefetch (`lucid serve` reads
  // every page first through the model's own mappings): a step whose experts were never touched
  // would otherwise time page faults (or disk reads).
  // A GGUF file's mapping is read the same way, page by page.
  {
    const double tp = Now();
    if (ckpt) {
      LUCID_RETURN_IF_ERROR(ckpt->Prefetch());
    } else {
      LUCID_RETURN_IF_ERROR(ReadFilePages(o.model_path));
    }
    std::fprintf(log, "weights read into memory before timing: %.1f ms\n", Ms(Now() - tp));
  }
  j["model"] = {{"path", o.model_path},
                {"model_type", c.model_type},
                {"weight_bytes", model->weight_bytes()},
                {"ops", backend->name()},
                {"cpu_kernels", o.kernel_set},
                {"cpu_kernels_reason", o.kernel_set_reason},
                {"kv_cache_dtype", KvDtypeName(o.kv_dtype)},
                {"misaligned_weight_bytes", misaligned}};
  j["startup"] = {{"load_ms", Ms(t_load)}, {"first_token_ms", Ms(t_first)}};
  j["world"] = {{"ranks", o.tp ? o.tp->size() : 1},
                {"communicator", o.tp ? o.tp->kind() : "none"},
                {"ep_size", o.ep_size}};
  if (!o.skip_prefill) {
    nlohmann::json p;
    LUCID_RETURN_IF_ERROR(Prefill(*model, prof, o, mi, log, &p));
    j["prefill"] = p;
  }
  nlohmann::json d;
  // One pass after every timed decode step; not under tensor parallelism (the ranks share the
  // machine's bandwidth, and a probe on one would hold the others at the next collective).
  BandwidthProbe paired_probe(uint64_t{256} << 20);
  LUCID_RETURN_IF_ERROR(
      DecodeBatches(*model, prof, o, mi, o.tp ? nullptr : &paired_probe, log, &d));
  j["decode"] = d;
  if (!o.contexts.empty()) {
    nlohmann::json cs;
    LUCID_RETURN_IF_ERROR(ContextSweep(*model, prof, ckpt ? &*ckpt : nullptr, o, mi, log, &cs));
    j["context_sweep"] = cs;
  }
  return j;
}

}  // namespace lucid
