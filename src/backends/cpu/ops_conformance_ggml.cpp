// The ops conformance suite's cases for GGUF block weights (core/ggml_types.h): Linear,
// LinearMany and LinearTransposed on F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K rows of random
// codes with random f16 block scales, at 1, 3 (the one-token kernels), 5 (a row-range view), 8,
// 33 and 129 tokens, with rows of more than one 1024-column k block ending in a partial one
// (1056 = 33 blocks of 32, 1280 = 5 super-blocks of 256), odd row counts, and NaN / Inf planted
// in x or a NaN block scale planted in one weight row ("nan-scale": that row's outputs are NaN
// for every token).
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops_conformance_internal.h"
#include "core/dtype.h"

namespace lucid::conformance {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::kF16,  GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                               GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// Byte offsets of a block's f16 scale fields (d, and dmin / m where the type has one).
std::vector<int64_t> ScaleOffsets(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      return {0};
    case GgmlType::kQ6_K:
      return {208};
    default:  // Q4_1 (d, m), Q4_K and Q5_K (d, dmin)
      return {0, 2};
  }
}

int64_t Cols(GgmlType t) {
  return GgmlTypeInfo(static_cast<uint32_t>(t))->block_elems == 256 ? 1280 : 1056;
}

// rows x cols of type t: random code bytes, block scales uniform in [1e-3, 2e-2) (F16: values in
// [-1, 1)); nan_row >= 0 gets a NaN d in its second block (F16: a NaN element).
Weight RandomGgml(GgmlType t, int64_t rows, int64_t cols, uint32_t seed, int64_t nan_row = -1) {
  const GgmlTypeTraits info = *GgmlTypeInfo(static_cast<uint32_t>(t));
  const int64_t row_bytes = GgmlRowBytes(t, cols), blocks = cols / info.block_elems;
  Weight w;
  w.format = WeightFormat::kGgml;
  w.ggml_type = t;
  w.name = std::string("gguf-") + info.name;
  w.rows = rows;
  w.cols = cols;
  w.data = Tensor::Empty(DType::kU8, {rows, row_bytes});
  uint8_t* d = w.data.data<uint8_t>();
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < rows * row_bytes; ++i) d[i] = static_cast<uint8_t>(rng() & 0xFF);
  auto put = [&](uint8_t* p, float v) {
    const uint16_t h = F32ToF16(v);
    p[0] = static_cast<uint8_t>(h & 0xFF);
    p[1] = static_cast<uint8_t>(h >> 8);
  };
  std::uniform_real_distribution<float> scale(1e-3f, 2e-2f), value(-1.0f, 1.0f);
  const std::vector<int64_t> offsets =
      t == GgmlType::kF16 ? std::vector<int64_t>{0} : ScaleOffsets(t);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* blk = d + r * row_bytes + b * info.block_bytes;
      for (int64_t o : offsets) put(blk + o, t == GgmlType::kF16 ? value(rng) : scale(rng));
      if (r == nan_row && b == 1) put(blk + offsets[0], std::numeric_limits<float>::quiet_NaN());
    }
  return w;
}

const char* Name(GgmlType t) { return GgmlTypeName(t); }

void GgmlLinear(Suite& s) {
  struct Case {
    int64_t T, N, skip;
  };
  for (GgmlType type : kTypes)
    for (Case c : {Case{1, 45, 0}, Case{3, 38, 1}, Case{5, 37, 3}, Case{8, 19, 0}, Case{33, 41, 0},
                   Case{129, 33, 0}}) {
      const int64_t K = Cols(type);
      for (int input = 0; input < 4; ++input) {  // random, NaN in x, Inf in x, NaN block scale
        const Plant p = input == 3 ? Plant::kNone : kPlants[input];
        const Weight w = RandomGgml(type, c.skip + c.N + 2, K, 90 + static_cast<uint32_t>(type),
                                    input == 3 ? c.skip + 2 : -1)
                             .RowRange(c.skip, c.N);
        Tensor x = RandomTensor({c.T, K}, 5 + static_cast<uint32_t>(c.T));
        PlantAt(x, p, c.T / 2, K / 3);
        Tensor y = F32({c.T, c.N}), r = F32({c.T, c.N});
        s.cand().Linear(x, w, y);
        s.ref().Linear(s.MatmulInput(x, w), w, r);
        const std::string fmt = std::string("gguf:") + Name(type);
        const std::string shape = Shape3("T", c.T, "N", c.N, "K", K);
        if (input == 3) {
          s.AddNamed("Linear", fmt, shape, "nan-scale", y.data<float>(), r.data<float>(), y.numel(),
                     2e-5);
        } else {
          s.Add("Linear", fmt, shape, p, y.data<float>(), r.data<float>(), y.numel(), 2e-5);
        }
      }
    }
}

// Q4_1, Q8_0 and Q6_K on one input (SmolLM2's and a Q4_K_M mix's formats side by side).
void GgmlLinearMany(Suite& s) {
  const int64_t K = 1280;
  const Weight a = RandomGgml(GgmlType::kQ4_1, 40, K, 1), b = RandomGgml(GgmlType::kQ8_0, 24, K, 2),
               c = RandomGgml(GgmlType::kQ6_K, 130, K, 3);
  LinearManyOnThree(s, {&a, &b, &c}, "gguf:Q4_1+Q8_0+Q6_K", 19);
}

void GgmlLinearTransposed(Suite& s) {
  const int64_t R = 19;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K})
    for (int64_t T : {1, 129})
      for (Plant p : kPlants) {
        const int64_t C = Cols(type);
        const Weight w = RandomGgml(type, R, C, 60 + static_cast<uint32_t>(type));
        Tensor x = RandomTensor({T, R}, 5);
        PlantAt(x, p, T / 2, 7);
        Tensor y = F32({T, C}), r = F32({T, C});
        s.cand().LinearTransposed(x, w, y);
        s.ref().LinearTransposed(x, w, r);
        s.Add("LinearTransposed", std::string("gguf:") + Name(type), Shape3("T", T, "R", R, "C", C),
              p, y.data<float>(), r.data<float>(), y.numel(), 1e-5);
      }
}

}  // namespace

void GgmlCases(Suite& s) {
  if (!s.Wants("GgufWeights")) return;
  GgmlLinear(s);
  GgmlLinearMany(s);
  GgmlLinearTransposed(s);
}

}  // namespace lucid::conformance
