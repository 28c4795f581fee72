// The ops conformance suite: its framework (inputs, comparison, the table) and the dense ops
// (Linear, LinearMany, LinearTransposed, Embedding, RmsNorm, LayerNorm, Rope, SwiGlu, the MLA
// absorption and output projection). The contract is in ops_conformance.h.
#include "backends/cpu/ops_conformance.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <utility>

#include "backends/cpu/ops_conformance_internal.h"
#include "core/dtype.h"
#include "ops/fp8_activations.h"

namespace lucid {
namespace conformance {

const char* PlantName(Plant p) {
  return p == Plant::kNone ? "random" : p == Plant::kNaN ? "nan" : "inf";
}

float PlantValue(Plant p) {
  return p == Plant::kNaN   ? std::numeric_limits<float>::quiet_NaN()
         : p == Plant::kInf ? std::numeric_limits<float>::infinity()
                            : 0.0f;
}

const char* WeightKindName(int kind) {
  static const char* const kNames[kWeightKinds] = {"f32", "bf16", "fp8", "fp8-ue8m0", "nvfp4"};
  return kNames[kind];
}

Tensor RandomTensor(Shape shape, uint32_t seed, float lo, float hi) {
  Tensor t = Tensor::Empty(DType::kF32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

Tensor RoundedToBf16(const Tensor& x) {
  Tensor r = x.Clone();
  for (int64_t i = 0; i < r.numel(); ++i)
    r.data<float>()[i] = Bf16ToF32(F32ToBf16(r.data<float>()[i]));
  return r;
}

Tensor Suite::MatmulInput(const Tensor& x, const Weight& w) const {
  if (precision_ == ConformancePrecision::kFp8Act && w.format == WeightFormat::kFp8Block)
    return Fp8ActDequantized(x);
  return rounds_activations() ? RoundedToBf16(x) : x;
}

double Suite::MatmulTolerance(const Weight& w, double base) const {
  if (precision_ == ConformancePrecision::kFp8Act && w.format == WeightFormat::kFp8Block)
    return std::max(base, 1e-3);
  return base;
}

namespace {

Weight Dense(bool bf16, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor src = RandomTensor({rows, cols}, seed);
  Weight w;
  w.format = bf16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  w.name = "w";
  w.rows = rows;
  w.cols = cols;
  if (!bf16) {
    w.data = src;
    return w;
  }
  w.data = Tensor::Empty(DType::kBF16, {rows, cols});
  for (int64_t i = 0; i < src.numel(); ++i)
    w.data.data<uint16_t>()[i] = F32ToBf16(src.data<float>()[i]);
  return w;
}

Weight Nvfp4(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t groups = (cols + 15) / 16;
  Weight w;
  w.format = WeightFormat::kNvfp4;
  w.name = "nvfp4";
  w.rows = rows;
  w.cols = cols;
  w.block_rows = 1;
  w.block_cols = 16;
  w.data = Tensor::Empty(DType::kU8, {rows, groups * 8});
  w.scale = Tensor::Empty(DType::kF8E4M3, {rows, groups});
  w.scale2 = Tensor::Empty(DType::kF32, {});
  for (int64_t i = 0; i < w.data.numel(); ++i) w.data.data<uint8_t>()[i] = rng() & 0xFF;
  std::uniform_real_distribution<float> s(0.01f, 448.0f);
  for (int64_t i = 0; i < w.scale.numel(); ++i)
    w.scale.data<uint8_t>()[i] = F32ToF8E4M3Saturate(s(rng));
  *w.scale2.data<float>() = 1.2345e-4f;
  return w;
}

Weight Fp8(int64_t rows, int64_t cols, uint32_t seed, bool ue8m0) {
  std::mt19937 rng(seed);
  const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  Weight w;
  w.format = WeightFormat::kFp8Block;
  w.name = "fp8";
  w.rows = rows;
  w.cols = cols;
  w.block_rows = 128;
  w.block_cols = 128;
  w.data = Tensor::Empty(DType::kF8E4M3, {rows, cols});
  for (int64_t i = 0; i < w.data.numel(); ++i) {
    uint8_t b = rng() & 0xFF;
    if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN codes: the planted inputs are the NaN cases
    w.data.data<uint8_t>()[i] = b;
  }
  w.scale = Tensor::Empty(ue8m0 ? DType::kUE8M0 : DType::kF32, {br, bc});
  std::uniform_real_distribution<float> s(1e-4f, 1e-2f);
  for (int64_t i = 0; i < br * bc; ++i) {
    if (ue8m0) {
      w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(127 - 14 + (rng() % 8));
    } else {
      w.scale.data<float>()[i] = s(rng);
    }
  }
  return w;
}

}  // namespace

Weight RandomWeight(int kind, int64_t rows, int64_t cols, uint32_t seed) {
  switch (kind) {
    case 0:
    case 1:
      return Dense(kind == 1, rows, cols, seed);
    case 2:
    case 3:
      return Fp8(rows, cols, seed, kind == 3);
    default:
      return Nvfp4(rows, cols, seed);
  }
}

void Suite::Add(const std::string& op, const std::string& format, const std::string& shape,
                Plant plant, const float* got, const float* want, int64_t n, double tolerance) {
  AddNamed(op, format, shape, PlantName(plant), got, want, n, tolerance);
}

void Suite::AddNamed(const std::string& op, const std::string& format, const std::string& shape,
                     const std::string& input, const float* got, const float* want, int64_t n,
                     double tolerance) {
  double err = 0.0, mag = 1e-30;
  bool same_nonfinite = true;
  for (int64_t i = 0; i < n; ++i) {
    const bool g = std::isfinite(got[i]), w = std::isfinite(want[i]);
    if (g != w) {
      same_nonfinite = false;
    } else if (w) {
      err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
      mag = std::max(mag, std::fabs(static_cast<double>(want[i])));
    }
  }
  ConformanceCase c{op, format, shape, input, err / mag, tolerance, same_nonfinite};
  c.pass = same_nonfinite && c.error <= tolerance;
  cases_.push_back(std::move(c));
}

void Suite::AddExact(const std::string& op, const std::string& format, const std::string& shape,
                     Plant plant, bool equal) {
  ConformanceCase c{op, format, shape, PlantName(plant), equal ? 0.0 : 1.0, 0.0, equal};
  c.pass = equal;
  cases_.push_back(std::move(c));
}

void LinearManyOnThree(Suite& s, std::array<const Weight*, 3> ws, const std::string& format,
                       uint32_t seed) {
  const int64_t K = ws[0]->cols;
  for (int64_t T : {1, 5, 129})
    for (Plant p : kPlants) {
      Tensor x = RandomTensor({T, K}, seed);
      PlantAt(x, p, T - 1, 17);
      std::array<Tensor, 3> ys;
      std::array<Tensor*, 3> yp;
      for (int i = 0; i < 3; ++i) {
        ys[i] = F32({T, ws[i]->rows});
        yp[i] = &ys[i];
      }
      s.cand().LinearMany(x, ws, yp);
      for (int i = 0; i < 3; ++i) {
        Tensor r = F32({T, ws[i]->rows});
        s.ref().Linear(s.MatmulInput(x, *ws[i]), *ws[i], r);
        s.Add("LinearMany", format, Shape3("T", T, "N", ws[i]->rows, "K", K), p,
              ys[i].data<float>(), r.data<float>(), r.numel(), s.MatmulTolerance(*ws[i], 2e-5));
      }
    }
}

namespace {

// Packed weights against 1 to 9 tokens (at avx2 the f32-activation tiles, one per token count,
// take 1 to 8) over columns that are neither a multiple of 128 nor of 32 (NVFP4: an odd group
// count with a partial last group), NaN / Inf activations, and a planted non-finite weight
// ("nan-code"): FP8 NaN codes in two rows, an NVFP4 NaN group scale in one.
void LinearTokensCases(Suite& s) {
  const int64_t N = 19, K = 1283;
  for (int kind : {2, 3, 4})
    for (int64_t T = 1; T <= 9; ++T)
      for (int plant = 0; plant < 4; ++plant) {
        const Plant p = plant == 3 ? Plant::kNone : kPlants[plant];
        Weight w = RandomWeight(kind, N + 1, K, 80 + kind).RowRange(1, N);
        if (plant == 3 && kind == 4) {  // row 6's group holding column 700
          w.scale = w.scale.Clone();
          w.scale.data<uint8_t>()[7 * w.scale.size(1) + 700 / 16] = 0x7F;
        } else if (plant == 3) {  // e4m3 NaN codes, one in row 4, one at the last column of row 13
          w.data = w.data.Clone();
          w.data.data<uint8_t>()[5 * K + 700] = 0x7F;
          w.data.data<uint8_t>()[14 * K + K - 1] = 0xFF;
        }
        Tensor x = RandomTensor({T, K}, 21 + static_cast<uint32_t>(T));
        PlantAt(x, p, T - 1, K - 2);
        Tensor y = F32({T, N}), r = F32({T, N});
        s.cand().Linear(x, w, y);
        s.ref().Linear(s.MatmulInput(x, w), w, r);
        s.AddNamed("Linear", WeightKindName(kind), Shape3("T", T, "N", N, "K", K),
                   plant == 3 ? "nan-code" : PlantName(p), y.data<float>(), r.data<float>(),
                   y.numel(), s.MatmulTolerance(w, 2e-5));
      }
}

// FP8 block weights at shapes an FP8 tensor-core GEMM takes (K and N multiples of 16, whole
// 128-row blocks, a view starting at row 128): the cuda-fp8act set's cuBLASLt path; the shapes
// above take its fallback.
void LinearFp8GemmCases(Suite& s) {
  struct Case {
    int64_t N, K, skip;
  };
  for (int kind : {2, 3})
    for (Case c : {Case{256, 512, 0}, Case{144, 384, 128}})
      for (int64_t T : {1, 7, 129})
        for (Plant p : kPlants) {
          const Weight w = RandomWeight(kind, c.skip + c.N, c.K, 60 + kind).RowRange(c.skip, c.N);
          Tensor x = RandomTensor({T, c.K}, 30 + static_cast<uint32_t>(T));
          PlantAt(x, p, T - 1, c.K / 2 + 1);
          Tensor y = F32({T, c.N}), r = F32({T, c.N});
          s.cand().Linear(x, w, y);
          s.ref().Linear(s.MatmulInput(x, w), w, r);
          s.Add("Linear", WeightKindName(kind), Shape3("T", T, "N", c.N, "K", c.K), p,
                y.data<float>(), r.data<float>(), y.numel(), s.MatmulTolerance(w, 2e-5));
        }
}

void LinearCases(Suite& s) {
  if (!s.Wants("Linear")) return;
  struct Case {
    int64_t T, N, K, skip;
  };
  // 1 token (the one-token tiles; at K 1024, a multiple of 64, NVFP4's integer tile for bf16
  // activations), 5 (token tiles, a row-range view), 129 (the many-token GEMM).
  for (int kind = 0; kind < kWeightKinds; ++kind)
    for (Case c :
         {Case{1, 45, 300, 0}, Case{1, 21, 1024, 0}, Case{5, 37, 77, 3}, Case{129, 33, 300, 0}})
      for (Plant p : kPlants) {
        const Weight w = RandomWeight(kind, c.skip + c.N + 2, c.K, 40 + kind).RowRange(c.skip, c.N);
        Tensor x = RandomTensor({c.T, c.K}, 3 + static_cast<uint32_t>(c.T));
        PlantAt(x, p, c.T / 2, c.K / 3);
        Tensor y = F32({c.T, c.N}), r = F32({c.T, c.N});
        s.cand().Linear(x, w, y);
        s.ref().Linear(s.MatmulInput(x, w), w, r);
        s.Add("Linear", WeightKindName(kind), Shape3("T", c.T, "N", c.N, "K", c.K), p,
              y.data<float>(), r.data<float>(), y.numel(), s.MatmulTolerance(w, 2e-5));
      }
  LinearTokensCases(s);
  LinearFp8GemmCases(s);
}

void LinearManyCases(Suite& s) {
  if (!s.Wants("LinearMany")) return;
  const int64_t K = 200;
  const Weight a = RandomWeight(1, 40, K, 1), b = RandomWeight(4, 24, K, 2),
               c = RandomWeight(2, 130, K, 3);
  LinearManyOnThree(s, {&a, &b, &c}, "bf16+nvfp4+fp8", 9);
}

void LinearTransposedCases(Suite& s) {
  if (!s.Wants("LinearTransposed")) return;
  const int64_t R = 19, C = 131;
  for (int kind = 0; kind < kWeightKinds; ++kind)
    for (int64_t T : {1, 129})
      for (Plant p : kPlants) {
        const Weight w = RandomWeight(kind, R, C, 60 + kind);
        Tensor x = RandomTensor({T, R}, 5);
        PlantAt(x, p, T / 2, 7);
        Tensor y = F32({T, C}), r = F32({T, C});
        s.cand().LinearTransposed(x, w, y);
        s.ref().LinearTransposed(x, w, r);
        s.Add("LinearTransposed", WeightKindName(kind), Shape3("T", T, "R", R, "C", C), p,
              y.data<float>(), r.data<float>(), y.numel(), 1e-5);
      }
}

void EmbeddingCases(Suite& s) {
  if (!s.Wants("Embedding")) return;
  const int64_t V = 50, D = 77;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 13};
  for (int kind = 0; kind < kWeightKinds; ++kind)
    for (Plant p : kPlants) {
      if (p != Plant::kNone && kind != 0) continue;  // planted into an f32 table
      Weight t = RandomWeight(kind, V, D, 70 + kind);
      if (p != Plant::kNone) {
        t.data = t.data.Clone();
        t.data.data<float>()[7 * D + 5] = PlantValue(p);
      }
      Tensor y = F32({5, D}), r = F32({5, D});
      s.cand().Embedding(t, ids, y);
      s.ref().Embedding(t, ids, r);
      s.Add("Embedding", WeightKindName(kind), Shape3("T", 5, "V", V, "D", D), p, y.data<float>(),
            r.data<float>(), y.numel(), 0.0);
    }
}

// The norm weight as f32 or bf16 [D].
Tensor NormWeight(bool bf16, int64_t D, uint32_t seed) {
  Tensor w = RandomTensor({D}, seed, 0.5f, 1.5f);
  if (!bf16) return w;
  Tensor b = Tensor::Empty(DType::kBF16, {D});
  for (int64_t i = 0; i < D; ++i) b.data<uint16_t>()[i] = F32ToBf16(w.data<float>()[i]);
  return b;
}

void NormCases(Suite& s) {
  if (!s.Wants("RmsNorm")) return;
  const int64_t D = 77;
  for (bool bf16 : {false, true})
    for (int64_t T : {1, 129})
      for (Plant p : kPlants) {
        const char* fmt = bf16 ? "bf16" : "f32";
        Tensor x = RandomTensor({T, D}, 11, -3.0f, 3.0f);
        PlantAt(x, p, T / 2, 40);
        const Tensor w = NormWeight(bf16, D, 12), b = NormWeight(bf16, D, 13);
        Tensor y = F32({T, D}), r = F32({T, D});
        s.cand().RmsNorm(x, w, 1e-6f, y);
        s.ref().RmsNorm(x, w, 1e-6f, r);
        s.Add("RmsNorm", fmt, Shape2("T", T, "D", D), p, y.data<float>(), r.data<float>(),
              y.numel(), 1e-6);
        s.cand().LayerNorm(x, w, b, 1e-5f, y);
        s.ref().LayerNorm(x, w, b, 1e-5f, r);
        s.Add("LayerNorm", fmt, Shape2("T", T, "D", D), p, y.data<float>(), r.data<float>(),
              y.numel(), 1e-6);
      }
}

void RopeCases(Suite& s) {
  if (!s.Wants("Rope")) return;
  const int64_t H = 3, stride = 40, offset = 8;
  RopeTable table;
  for (int i = 0; i < 8; ++i) table.inv_freq.push_back(std::pow(10000.0f, -i / 8.0f));
  table.attention_factor = 1.25f;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
    for (int64_t T : {1, 129})
      for (Plant p : kPlants)
        for (bool in_table : {false, true}) {  // planted into x, or into a frequency
          if (in_table && p == Plant::kNone) continue;
          std::vector<int64_t> pos(T);
          for (int64_t t = 0; t < T; ++t) pos[t] = (t * 37) % 5000;
          Tensor x = RandomTensor({T, H * stride}, 14);
          RopeTable tab = table;
          if (in_table) {
            tab.inv_freq[2] = PlantValue(p);  // rope_theta <= 0 makes such frequencies
          } else {
            PlantAt(x, p, T / 2, stride + offset + 3);
          }
          Tensor y = x.Clone(), r = x.Clone();
          s.cand().Rope(y, H, stride, offset, tab, pos, style);
          s.ref().Rope(r, H, stride, offset, tab, pos, style);
          const std::string fmt =
              std::string(style == RopeStyle::kInterleaved ? "interleaved" : "half-split") +
              (in_table ? ", bad freq" : "");
          s.Add("Rope", fmt, Shape3("T", T, "H", H, "dim", tab.dim()), p, y.data<float>(),
                r.data<float>(), y.numel(), 1e-6);
        }
}

void SwiGluCases(Suite& s) {
  if (!s.Wants("SwiGlu")) return;
  const int64_t I = 41;
  for (int64_t T : {1, 129})
    for (Plant p : kPlants) {
      Tensor g = RandomTensor({T, I}, 3, -20.0f, 20.0f), u = RandomTensor({T, I}, 4);
      PlantAt(g, p, T / 2, 5);
      PlantAt(u, p, T - 1, 30);
      if (p == Plant::kInf) g.data<float>()[7] = -PlantValue(p);  // silu(-inf) is NaN in IEEE
      Tensor y = F32({T, I}), r = F32({T, I});
      s.cand().SwiGlu(g, u, y);
      s.ref().SwiGlu(g, u, r);
      s.Add("SwiGlu", "-", Shape2("T", T, "I", I), p, y.data<float>(), r.data<float>(), y.numel(),
            1e-6);
    }
}

void MlaProjectionCases(Suite& s) {
  if (!s.Wants("MlaAbsorbQuery")) return;
  const int64_t H = 3, nope = 24, v = 20, R = 200, rope = 8, qs = nope + rope;
  for (int kind = 0; kind < kWeightKinds; ++kind)
    for (int64_t T : {1, 129})
      for (Plant p : kPlants) {
        const Weight kv_b = RandomWeight(kind, H * (nope + v), R, 80 + kind);
        Tensor q = RandomTensor({T, H * qs}, 81);
        PlantAt(q, p, T / 2, qs + 5);  // head 1's nope part
        Tensor ql = F32({T, H * R}), rl = F32({T, H * R});
        s.cand().MlaAbsorbQuery(q, H, qs, nope, v, kv_b, ql);
        s.ref().MlaAbsorbQuery(q, H, qs, nope, v, kv_b, rl);
        s.Add("MlaAbsorbQuery", WeightKindName(kind), Shape3("T", T, "H", H, "R", R), p,
              ql.data<float>(), rl.data<float>(), ql.numel(), 2e-5);
        Tensor lat = RandomTensor({T, H * R}, 82);
        PlantAt(lat, p, T - 1, 2 * R + 9);
        Tensor o = F32({T, H * v}), ro = F32({T, H * v});
        s.cand().MlaProjectOutput(lat, H, nope, v, kv_b, o);
        s.ref().MlaProjectOutput(s.Bf16Input(lat), H, nope, v, kv_b, ro);
        s.Add("MlaProjectOutput", WeightKindName(kind), Shape3("T", T, "H", H, "R", R), p,
              o.data<float>(), ro.data<float>(), o.numel(), 2e-5);
      }
}

}  // namespace

void DenseCases(Suite& s) {
  LinearCases(s);
  LinearManyCases(s);
  LinearTransposedCases(s);
  EmbeddingCases(s);
  NormCases(s);
  RopeCases(s);
  SwiGluCases(s);
  MlaProjectionCases(s);
}

}  // namespace conformance

std::vector<ConformanceCase> RunOpsConformance(const Ops& candidate, ConformancePrecision precision,
                                               const std::vector<std::string>& only) {
  conformance::Suite s(candidate, precision, only);
  conformance::DenseCases(s);
  conformance::AttentionCases(s);
  conformance::IndexerCases(s);
  conformance::TopKCases(s);
  conformance::MoeCases(s);
  conformance::StepOpsCases(s);
  conformance::SamplingCases(s);
  conformance::GqaCases(s);
  conformance::GgmlCases(s);
  return s.Take();
}

const std::vector<std::string>& OpNames() {
  static const std::vector<std::string> names = {"Linear",
                                                 "LinearMany",
                                                 "LinearTransposed",
                                                 "Embedding",
                                                 "RmsNorm",
                                                 "LayerNorm",
                                                 "Rope",
                                                 "SwiGlu",
                                                 "MlaAttention",
                                                 "IndexerScores",
                                                 "GqaAttention",
                                                 "TopK",
                                                 "MoeRoute",
                                                 "MoeExperts",
                                                 "MlaAbsorbQuery",
                                                 "MlaProjectOutput",
                                                 "Accumulate",
                                                 "Scale",
                                                 "CopyColumns",
                                                 "GatherRows",
                                                 "WriteKvRows",
                                                 "TopKRows",
                                                 "NonFiniteRows",
                                                 "SampleRows",
                                                 "ApplyTokenBitmask"};
  return names;
}

bool AllPassed(const std::vector<ConformanceCase>& cases) {
  return std::all_of(cases.begin(), cases.end(), [](const auto& c) { return c.pass; });
}

std::string ConformanceTable(std::string_view title, const std::vector<ConformanceCase>& cases) {
  struct Row {
    int n = 0, failed = 0;
    double worst = 0.0, tol = 0.0;
    std::vector<const ConformanceCase*> failures;
  };
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, Row> rows;
  for (const ConformanceCase& c : cases) {
    const auto key = std::make_pair(c.op, c.format);
    if (!rows.count(key)) order.push_back(key);
    Row& r = rows[key];
    ++r.n;
    r.worst = std::max(r.worst, c.error);
    r.tol = std::max(r.tol, c.tolerance);
    if (!c.pass) {
      ++r.failed;
      r.failures.push_back(&c);
    }
  }
  std::string out = std::string(title) + "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-18s %-22s %5s %10s %10s  %s\n", "op", "format", "cases",
                "worst err", "tolerance", "result");
  out += line;
  for (const auto& key : order) {
    const Row& r = rows[key];
    std::snprintf(line, sizeof(line), "  %-18s %-22s %5d %10.2e %10.2e  %s\n", key.first.c_str(),
                  key.second.c_str(), r.n, r.worst, r.tol, r.failed ? "FAIL" : "PASS");
    out += line;
    for (const ConformanceCase* c : r.failures) {
      std::snprintf(line, sizeof(line), "    FAILED %s input=%s: error %.3e (tolerance %.1e)%s\n",
                    c->shape.c_str(), c->input.c_str(), c->error, c->tolerance,
                    c->nonfinite_match ? "" : ", non-finite entries differ");
      out += line;
    }
  }
  return out;
}

}  // namespace lucid
