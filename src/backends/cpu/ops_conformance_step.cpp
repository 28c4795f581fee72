// Conformance cases of the ops that replaced the model's host loops: WriteKvRows (every KV row
// dtype, MLA-like and indexer-like rows, NaN and infinities in the rows), TopKRows (rows with
// fewer candidates than k, ties, NaN, an index offset) and NonFiniteRows, and of the model's glue
// between the ops: Accumulate, Scale, CopyColumns and GatherRows. All must equal the reference
// exactly: the stored bytes, the indices, the flags, the values (one rounding each, or copies).
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/ops_conformance_internal.h"

namespace lucid::conformance {
namespace {

constexpr KvRowKind kKinds[] = {KvRowKind::kF32, KvRowKind::kBF16, KvRowKind::kFp8};
const char* KindName(KvRowKind k) {
  return k == KvRowKind::kF32 ? "kv:f32" : k == KvRowKind::kBF16 ? "kv:bf16" : "kv:fp8_e4m3";
}

// A row format: `width` values, fp8 keeps `fp8` leading e4m3 values in blocks of `block`.
PagedRows Format(KvRowKind kind, int64_t width, int64_t fp8, int64_t block) {
  PagedRows f;
  f.kind = kind;
  f.row_floats = width;
  if (kind == KvRowKind::kFp8) {
    f.fp8_values = fp8;
    f.fp8_block = block;
  }
  f.row_bytes = KvRowBytes(f);
  return f;
}

void WriteKvRowsCases(Suite& s) {
  if (!s.Wants("WriteKvRows")) return;
  struct Shape {
    int64_t T, a, b, fp8, block;  // parts of widths a and b (b = 0: one part)
  };
  // MLA-like (latent then rope, fp8 blocks of 128 over the latent part) and indexer-like (one
  // scale over the whole key) rows, at odd widths.
  const Shape shapes[] = {{1, 45, 19, 45, 128}, {129, 300, 33, 300, 128}, {7, 77, 0, 77, 77}};
  uint32_t seed = 900;
  for (const Shape& sh : shapes)
    for (KvRowKind kind : kKinds)
      for (Plant p : kPlants) {
        const PagedRows fmt = Format(kind, sh.a + sh.b, sh.fp8, sh.block);
        Tensor a = RandomTensor({sh.T, sh.a}, ++seed, -3.0f, 3.0f);
        Tensor b = sh.b > 0 ? RandomTensor({sh.T, sh.b}, ++seed) : Tensor();
        PlantAt(a, p, sh.T / 2, sh.a / 3);
        if (sh.b > 0) PlantAt(b, p, sh.T - 1, sh.b - 1);
        std::vector<const Tensor*> parts = {&a};
        if (sh.b > 0) parts.push_back(&b);
        // The rows go to scattered pool rows of a pool twice as large, the rest left as it was.
        const int64_t rows = 2 * sh.T + 3;
        std::vector<int64_t> dest(sh.T);
        for (int64_t t = 0; t < sh.T; ++t) dest[t] = (t * 7 + 2) % rows;
        std::vector<int64_t> seen(rows, 0);
        for (int64_t r : dest) seen[r]++;
        for (int64_t t = 0; t < sh.T; ++t)  // distinct rows: step over collisions
          while (seen[dest[t]] > 1) {
            --seen[dest[t]];
            dest[t] = (dest[t] + 1) % rows;
            ++seen[dest[t]];
          }
        std::vector<uint8_t> got(rows * fmt.row_bytes, 0xCD), want = got;
        s.cand().WriteKvRows(parts, {fmt, got.data(), rows}, dest);
        s.ref().WriteKvRows(parts, {fmt, want.data(), rows}, dest);
        s.AddExact("WriteKvRows", KindName(kind),
                   Shape3("T", sh.T, "W", sh.a + sh.b, "B", fmt.row_bytes), p, got == want);
      }
}

void TopKRowsCases(Suite& s) {
  if (!s.Wants("TopKRows")) return;
  std::mt19937 rng(77);
  for (int64_t T : {1, 5, 129})
    for (int64_t S : {1, 40, 300})
      for (Plant p : kPlants) {
        Tensor scores = F32({T, S});
        for (int64_t i = 0; i < T * S; ++i) {
          const int r = static_cast<int>(rng() % 40);  // many exact ties, -0 and +0
          scores.data<float>()[i] = r >= 35 ? (r % 2 ? -0.0f : 0.0f) : (r - 17) / 5.0f;
        }
        PlantAt(scores, p, T / 2, S / 2);
        PlantAt(scores, p, T - 1, 0);
        std::vector<int64_t> n(T);
        for (int64_t t = 0; t < T; ++t) n[t] = 1 + (t * 13 + 5) % S;  // some rows under k
        for (int64_t k : {int64_t{1}, (S + 2) / 3, S}) {
          for (int32_t offset : {0, 1000}) {
            Tensor a = Tensor::Zeros(DType::kI32, {T, k}), b = Tensor::Zeros(DType::kI32, {T, k});
            s.cand().TopKRows(scores, n, k, offset, a);
            s.ref().TopKRows(scores, n, k, offset, b);
            s.AddExact("TopKRows", offset ? "offset" : "-", Shape3("T", T, "S", S, "k", k), p,
                       std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
          }
        }
      }
  // The DSA indexer's sizes: index_topk 2048 of a longer row, and a k whose sort is longer than
  // a GPU block's shared memory holds. Row 0 from a few hundred values (ties); row 1 from 5000
  // neighbouring floats above 1 (they differ in the low bits only; ties too).
  for (Plant p : kPlants) {
    const int64_t T = 2, S = 9000;
    Tensor scores = F32({T, S});
    for (int64_t i = 0; i < S; ++i) {
      scores.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 700) - 350) / 16.0f;
      const uint32_t bits = 0x3F800000u + static_cast<uint32_t>(rng() % 5000);
      std::memcpy(scores.data<float>() + S + i, &bits, 4);
    }
    PlantAt(scores, p, 0, S / 3);
    PlantAt(scores, p, 1, S - 1);
    const std::vector<int64_t> n = {S, S - 1234};
    for (int64_t k : {int64_t{2048}, int64_t{5000}}) {
      Tensor a = Tensor::Zeros(DType::kI32, {T, k}), b = Tensor::Zeros(DType::kI32, {T, k});
      s.cand().TopKRows(scores, n, k, 0, a);
      s.ref().TopKRows(scores, n, k, 0, b);
      s.AddExact("TopKRows", "-", Shape3("T", T, "S", S, "k", k), p,
                 std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
    }
  }
}

void NonFiniteRowsCases(Suite& s) {
  if (!s.Wants("NonFiniteRows")) return;
  for (int64_t T : {1, 129})
    for (int64_t W : {1, 45, 1000})
      for (Plant p : kPlants) {
        Tensor x = RandomTensor({T, W}, static_cast<uint32_t>(T * 31 + W));
        PlantAt(x, p, T - 1, W - 1);
        PlantAt(x, p, T / 3, 0);
        if (p == Plant::kInf && T > 1) x.data<float>()[W / 2] = -PlantValue(p);  // -inf, row 0
        Tensor a = Tensor::Zeros(DType::kI32, {T}), b = Tensor::Zeros(DType::kI32, {T});
        s.cand().NonFiniteRows(x, a);
        s.ref().NonFiniteRows(x, b);
        s.AddExact("NonFiniteRows", "-", Shape2("T", T, "W", W), p,
                   std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
      }
}

// Residual adds and scalings over rows of 45 (a width no vector length divides), NaN and inf in
// either operand; x * s for a scale that is not a power of two (the product rounds).
void ElementwiseCases(Suite& s, int64_t T, Plant p) {
  const int64_t W = 45;
  if (s.Wants("Accumulate")) {
    Tensor x = RandomTensor({T, W}, 91), y = RandomTensor({T, W}, 92, -4.0f, 4.0f);
    PlantAt(x, p, T - 1, 3);
    PlantAt(y, p, T / 2, W - 1);
    Tensor r = x.Clone();
    s.cand().Accumulate(x, y);
    s.ref().Accumulate(r, y);
    s.Add("Accumulate", "-", Shape2("T", T, "W", W), p, x.data<float>(), r.data<float>(), x.numel(),
          0.0);
  }
  if (s.Wants("Scale")) {
    Tensor x = RandomTensor({T, W}, 93, -1e3f, 1e3f);
    PlantAt(x, p, T / 2, 7);
    Tensor r = x.Clone();
    s.cand().Scale(x, 0.0883883f);
    s.ref().Scale(r, 0.0883883f);
    s.Add("Scale", "-", Shape2("T", T, "W", W), p, x.data<float>(), r.data<float>(), x.numel(),
          0.0);
  }
}

// CopyColumns: 24 columns from column 9 of each of 3 groups of 40, out of rows with 5 more
// columns after the groups (the planted value inside group 1's copied columns). GatherRows:
// rows out of order, one twice, the last row.
void CopyCases(Suite& s, int64_t T, Plant p) {
  if (s.Wants("CopyColumns")) {
    const int64_t groups = 3, stride = 40, offset = 9, width = 24;
    Tensor x = RandomTensor({T, groups * stride + 5}, 94);
    PlantAt(x, p, T - 1, stride + offset + 2);
    Tensor y = F32({T, groups * width}), r = F32({T, groups * width});
    s.cand().CopyColumns(x, groups, stride, offset, width, y);
    s.ref().CopyColumns(x, groups, stride, offset, width, r);
    s.Add("CopyColumns", "-", Shape3("T", T, "groups", groups, "width", width), p, y.data<float>(),
          r.data<float>(), y.numel(), 0.0);
  }
  if (s.Wants("GatherRows")) {
    const int64_t W = 45;
    const std::vector<int64_t> rows = {T - 1, 0, T / 2, T - 1};
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor x = RandomTensor({T, W}, 95);
    PlantAt(x, p, T / 2, 10);
    Tensor y = F32({n, W}), r = F32({n, W});
    s.cand().GatherRows(x, rows, y);
    s.ref().GatherRows(x, rows, r);
    s.Add("GatherRows", "-", Shape3("T", T, "rows", n, "W", W), p, y.data<float>(), r.data<float>(),
          y.numel(), 0.0);
  }
}

void GlueCases(Suite& s) {
  for (int64_t T : {1, 129})
    for (Plant p : kPlants) {
      ElementwiseCases(s, T, p);
      CopyCases(s, T, p);
    }
}

}  // namespace

void StepOpsCases(Suite& s) {
  WriteKvRowsCases(s);
  TopKRowsCases(s);
  NonFiniteRowsCases(s);
  GlueCases(s);
}

}  // namespace lucid::conformance
