#include "config/backends_report.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <sstream>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_conformance.h"

namespace lucid::config {
namespace {

template <typename T, typename F>
std::vector<std::string> Names(const std::vector<T>& v, F name) {
  std::vector<std::string> out;
  for (const T& x : v) out.push_back(name(x));
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double MaxAbs(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

Tensor Owned(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::Empty(DType::kF32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

SelfTestResult TestLinear(const Ops& ops, std::mt19937& rng) {
  const int64_t T = 5, in = 48, out = 24;
  std::vector<float> x = Random(T * in, rng), w = Random(out * in, rng);
  Weight wt;
  wt.format = WeightFormat::kF32;
  wt.rows = out;
  wt.cols = in;
  wt.data = Owned(w, {out, in});
  Tensor y = Tensor::Empty(DType::kF32, {T, out});
  ops.Linear(Owned(x, {T, in}), wt, y);
  std::vector<double> ref(T * out, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) ref[t * out + o] += double(x[t * in + i]) * w[o * in + i];
  std::vector<float> got(y.data<float>(), y.data<float>() + T * out);
  SelfTestResult r{"matmul", "cpu", "Linear f32 [5x48]x[24x48]^T", MaxAbs(got, ref), 1e-4, false,
                   false,    ""};
  return r;
}

SelfTestResult TestAttention(const Ops& ops, std::mt19937& rng, bool sparse) {
  const int64_t T = 3, H = 2, L = 16, R = 8, U = 10, page = 4;
  std::vector<float> ql = Random(T * H * L, rng), qr = Random(T * H * R, rng);
  std::vector<float> cache = Random(((U + page - 1) / page) * page * (L + R), rng);
  std::vector<int32_t> table = {2, 0, 1};
  // Query t attends to tokens [0, 8 + t) (dense) or every other of them (sparse).
  std::vector<int32_t> sel(T * U, 0), count(T, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t u = 0; u < 8 + t; u += sparse ? 2 : 1) sel[t * U + count[t]++] = u;
  MlaAttentionArgs a;
  a.q_latent = ql.data();
  a.q_rope = qr.data();
  a.tokens = T;
  a.heads = H;
  a.latent_dim = L;
  a.rope_dim = R;
  a.scale = 0.3f;
  a.kv = PagedRows{cache.data(), table, page, page * (L + R), L + R};
  a.selected = sel.data();
  a.selected_stride = U;
  a.selected_count = count.data();
  std::vector<float> out(T * H * L);
  a.out_latent = out.data();
  ops.MlaAttention(a);
  std::vector<double> ref(T * H * L, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> s(count[t]);
      double mx = -1e300, sum = 0;
      for (int32_t i = 0; i < count[t]; ++i) {
        const float* row = a.kv.Row(sel[t * U + i]);
        double d = 0;
        for (int64_t j = 0; j < L; ++j) d += double(ql[(t * H + h) * L + j]) * row[j];
        for (int64_t j = 0; j < R; ++j) d += double(qr[(t * H + h) * R + j]) * row[L + j];
        s[i] = a.scale * d;
        mx = std::max(mx, s[i]);
      }
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int32_t i = 0; i < count[t]; ++i) {
        const float* row = a.kv.Row(sel[t * U + i]);
        for (int64_t j = 0; j < L; ++j) ref[(t * H + h) * L + j] += s[i] / sum * row[j];
      }
    }
  return {sparse ? "sparse_attention" : "dense_attention",
          "cpu",
          std::string("MlaAttention paged, ") + (sparse ? "sparse" : "dense") + " selection",
          MaxAbs(out, ref),
          1e-4,
          false,
          false,
          ""};
}

SelfTestResult TestIndexer(const Ops& ops, std::mt19937& rng) {
  const int64_t T = 3, H = 4, D = 16, U = 9, page = 4;
  std::vector<float> q = Random(T * H * D, rng), w = Random(T * H, rng);
  std::vector<float> keys = Random(3 * page * D, rng);
  std::vector<int32_t> table = {1, 2, 0};
  std::vector<int64_t> causal = {7, 8, 9};
  std::vector<float> scores(T * U, 0.0f);
  IndexerArgs a{
      q.data(),      w.data(),      T, H, D, PagedRows{keys.data(), table, page, page * D, D},
      causal.data(), scores.data(), U};
  ops.IndexerScores(a);
  double err = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t u = 0; u < causal[t]; ++u) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) {
        double d = 0;
        for (int64_t k = 0; k < D; ++k) d += double(q[(t * H + j) * D + k]) * a.keys.Row(u)[k];
        s += w[t * H + j] * std::max(0.0, d);
      }
      err = std::max(err, std::fabs(s - scores[t * U + u]));
    }
  // Top-k of the last row must be the k largest, in descending order.
  std::vector<int32_t> top(4);
  ops.TopK(scores.data() + 2 * U, 9, 4, top.data());
  std::vector<int32_t> idx(9);
  for (int32_t i = 0; i < 9; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t x, int32_t y) { return scores[2 * U + x] > scores[2 * U + y]; });
  bool topk_ok = std::equal(top.begin(), top.end(), idx.begin());
  SelfTestResult r{"indexer", "cpu", "IndexerScores + TopK", err, 1e-4, false, false, ""};
  if (!topk_ok) r.note = "top-k order differs";
  r.tolerance = topk_ok ? r.tolerance : -1;
  return r;
}

}  // namespace

std::vector<BackendRow> BackendRows() {
  std::vector<BackendRow> rows;
  for (const KernelDecl& d : KernelCatalog()) {
    BackendRow r{&d, false, ""};
    if (!d.compiled_in)
      r.why_not =
          "not compiled in (this build has no CUDA backend; configure with -DLUCID_CUDA=ON)";
    else if (d.device != Device::kCpu)
      r.why_not =
          "compiled in; `lucid serve`, `lucid generate` and `lucid bench` run a model on it "
          "with --device cuda on a machine with a GPU (--self-test runs its ops)";
    else
      r.usable_here = true;
    rows.push_back(r);
  }
  for (const KernelDecl& d : ForeignKernels())
    rows.push_back({&d, false, "not implemented by lucid (" + d.project + ")"});
  return rows;
}

nlohmann::json BackendsJson(const std::vector<BackendRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const BackendRow& r : rows) {
    const KernelDecl& d = *r.decl;
    nlohmann::json j = {{"family", FamilyName(d.family)},
                        {"name", d.name},
                        {"device", DeviceName(d.device)},
                        {"compiled_in", d.compiled_in},
                        {"usable_here", r.usable_here},
                        {"phases", Names(d.phases, PhaseName)},
                        {"weight_formats", Names(d.weight_formats, WeightFormatName)},
                        {"kv_dtypes", Names(d.kv_dtypes, KvDtypeName)},
                        {"compute_dtypes", Names(d.compute_dtypes, DTypeName)},
                        {"page_sizes", d.page_sizes},
                        {"head_dims", d.head_dims},
                        {"graph_capture", d.graph_capture},
                        {"origin", d.origin},
                        {"project", d.project}};
    if (d.device == Device::kCuda) j["compute_capability"] = {SmName(d.min_sm), SmName(d.max_sm)};
    if (!r.usable_here) j["why_not"] = r.why_not;
    out.push_back(j);
  }
  return out;
}

std::string BackendsText(const std::vector<BackendRow>& rows) {
  std::ostringstream o;
  KernelFamily last = KernelFamily::kSampling;
  bool first = true, foreign = false;
  for (const BackendRow& r : rows) {
    const KernelDecl& d = *r.decl;
    if (d.project != "lucid" && !foreign) {
      o << "\nNot implemented by lucid (known by name; a flag naming one is refused)\n";
      foreign = true;
      first = true;
    }
    if (first || d.family != last) o << (first ? "" : "\n") << FamilyName(d.family) << "\n";
    first = false;
    last = d.family;
    std::string where = DeviceName(d.device);
    if (d.device == Device::kCuda) where += ":" + SmName(d.min_sm) + ".." + SmName(d.max_sm);
    o << "  " << d.name << std::string(d.name.size() < 20 ? 20 - d.name.size() : 1, ' ') << where
      << "  compiled=" << (d.compiled_in ? "yes" : "no")
      << " usable=" << (r.usable_here ? "yes" : "no (" + r.why_not + ")") << "\n      phases "
      << Join(Names(d.phases, PhaseName));
    if (!d.weight_formats.empty())
      o << "; weights " << Join(Names(d.weight_formats, WeightFormatName));
    if (!d.kv_dtypes.empty()) o << "; KV " << Join(Names(d.kv_dtypes, KvDtypeName));
    o << "; compute " << Join(Names(d.compute_dtypes, DTypeName));
    if (!d.page_sizes.empty())
      o << "; pages " << Join(Names(d.page_sizes, [](int64_t p) { return std::to_string(p); }));
    o << "  [" << d.origin << "]\n";
  }
  return o.str();
}

std::vector<SelfTestResult> RunSelfTest(const std::vector<BackendRow>& rows) {
  std::vector<SelfTestResult> out;
  // Both CPU kernel sets: the fast one (serve's default, at this machine's instruction set) and
  // the reference (--cpu-kernels reference), each against the same double-precision formulas.
  const CpuFastOps fast;
  const CpuOps reference;
  for (const Ops* ops : {static_cast<const Ops*>(&fast), static_cast<const Ops*>(&reference)}) {
    std::mt19937 rng(1234);
    for (const BackendRow& r : rows) {
      if (!r.usable_here) continue;
      const KernelDecl& d = *r.decl;
      SelfTestResult t;
      switch (d.family) {
        case KernelFamily::kMatmul:
          t = TestLinear(*ops, rng);
          break;
        case KernelFamily::kDenseAttention:
          t = TestAttention(*ops, rng, false);
          break;
        case KernelFamily::kSparseAttention:
          t = TestAttention(*ops, rng, true);
          break;
        case KernelFamily::kIndexer:
          t = TestIndexer(*ops, rng);
          break;
        default:
          if (ops != &fast) continue;  // reported once
          out.push_back({FamilyName(d.family), d.name, "-", 0, 0, false, true,
                         d.family == KernelFamily::kMoe
                             ? "no double-precision check: MoeRoute and MoeExperts are checked "
                               "by the ops conformance lines below"
                             : "no self-test yet (the sampler is not an op of the conformance "
                               "suite)"});
          continue;
      }
      t.kernel = d.name + " (" + ops->name() + ")";
      t.passed = t.tolerance >= 0 && t.max_error <= t.tolerance;
      out.push_back(t);
    }
  }
  for (const OpsSetEntry& e : OpsRegistry()) out.push_back(ConformanceSelfTest(e));
  return out;
}

SelfTestResult ConformanceSelfTest(const OpsSetEntry& e) {
  const std::unique_ptr<Ops> ops = e.make(CpuIsa::kAvx512Bf16);
  const std::vector<ConformanceCase> cases = RunOpsConformance(*ops, e.precision);
  SelfTestResult t;
  t.family = "ops conformance";
  t.kernel = e.name + " (" + ops->name() + ")";
  // The worst case's error as a fraction of its tolerance (exact cases count 0 or fail).
  double worst = 0.0;
  int failed = 0;
  for (const ConformanceCase& c : cases) {
    if (c.tolerance > 0) worst = std::max(worst, c.error / c.tolerance);
    if (c.pass) continue;
    if (failed++ < 3)
      t.note += (t.note.empty() ? "" : "; ") + c.op + " " + c.format + " " + c.shape + " " +
                c.input + (c.nonfinite_match ? "" : " (non-finite entries differ)");
  }
  t.check = std::to_string(cases.size()) + " cases vs the reference (error/tolerance)";
  t.max_error = worst;
  t.tolerance = 1.0;
  t.passed = AllPassed(cases);
  if (failed > 3) t.note += "; and " + std::to_string(failed - 3) + " more";
  return t;
}

}  // namespace lucid::config
