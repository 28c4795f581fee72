// Conformance cases of the ops that replaced the model's host loops: WriteKvRows (every KV row
// dtype, MLA-like and indexer-like rows, NaN and infinities in the rows), TopKRows (rows with
// fewer candidates than k, ties, NaN, an index offset) and NonFiniteRows. All three must equal
// the reference exactly: the stored bytes, the indices and the flags.
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

}  // namespace

void StepOpsCases(Suite& s) {
  WriteKvRowsCases(s);
  TopKRowsCases(s);
  NonFiniteRowsCases(s);
}

}  // namespace lucid::conformance
