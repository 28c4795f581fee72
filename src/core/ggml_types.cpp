// ggml type table and the per-type decoders (the math is specified in ggml_types.h).
#include "core/ggml_types.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"

namespace lucid {
namespace {

constexpr int64_t kQK = 256;  // K-quant super-block

struct Row {
  uint32_t id;
  GgmlTypeTraits traits;
};

constexpr Row kTypes[] = {
    {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},       {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, false}},      {7, {"Q5_1", 32, 24, false}},
    {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", kQK, 84, false}},    {11, {"Q3_K", kQK, 110, false}},
    {12, {"Q4_K", kQK, 144, true}},    {13, {"Q5_K", kQK, 176, true}},
    {14, {"Q6_K", kQK, 210, true}},    {15, {"Q8_K", kQK, 292, false}},
    {16, {"IQ2_XXS", kQK, 66, false}}, {17, {"IQ2_XS", kQK, 74, false}},
    {18, {"IQ3_XXS", kQK, 98, false}}, {19, {"IQ1_S", kQK, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", kQK, 110, false}},
    {22, {"IQ2_S", kQK, 82, false}},   {23, {"IQ4_XS", kQK, 136, false}},
    {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},        {29, {"IQ1_M", kQK, 56, false}},
    {30, {"BF16", 1, 2, true}},        {34, {"TQ1_0", kQK, 54, false}},
    {35, {"TQ2_0", kQK, 66, false}},   {39, {"MXFP4", 32, 17, false}},
};

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

void DecodeQ8_0(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}

void DecodeQ4_0(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>((qs[j] & 0xF) - 8);
    out[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void DecodeQ4_1(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  const float m = HalfAt(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const float lo = d * static_cast<float>(qs[j] & 0xF);
    const float hi = d * static_cast<float>(qs[j] >> 4);
    out[j] = lo + m;
    out[j + 16] = hi + m;
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block.
inline void ScaleMinK4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K (qh == nullptr) and Q5_K.
void DecodeQ45K(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = HalfAt(b);
  const float dmin = HalfAt(b + 2);
  const uint8_t* scales = b + 4;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMinK4(scales, j, &sc, &m);
    const float ds = d * static_cast<float>(sc);
    const float dm = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0xF;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      const float p = ds * static_cast<float>(v);
      out[32 * j + l] = p - dm;
    }
  }
}

void DecodeQ6_K(const uint8_t* b, float* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = HalfAt(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    const float ds = d * static_cast<float>(scales[e / 16]);
    out[e] = ds * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

}  // namespace

std::optional<GgmlTypeTraits> GgmlTypeInfo(uint32_t id) {
  for (const Row& r : kTypes) {
    if (r.id == id) return r.traits;
  }
  return std::nullopt;
}

const char* GgmlTypeName(GgmlType t) {
  auto i = GgmlTypeInfo(static_cast<uint32_t>(t));
  return i ? i->name : "?";
}

int64_t GgmlRowBytes(GgmlType t, int64_t n) {
  auto i = GgmlTypeInfo(static_cast<uint32_t>(t));
  if (!i) return 0;
  return n / i->block_elems * i->block_bytes;
}

void DequantizeGgmlBlock(GgmlType t, const uint8_t* b, float* out) {
  switch (t) {
    case GgmlType::kQ8_0:
      return DecodeQ8_0(b, out);
    case GgmlType::kQ4_0:
      return DecodeQ4_0(b, out);
    case GgmlType::kQ4_1:
      return DecodeQ4_1(b, out);
    case GgmlType::kQ4_K:
      return DecodeQ45K(b, nullptr, b + 16, out);
    case GgmlType::kQ5_K:
      return DecodeQ45K(b, b + 16, b + 48, out);
    case GgmlType::kQ6_K:
      return DecodeQ6_K(b, out);
    default:
      break;
  }
  std::abort();
}

void DequantizeGgmlRowSpan(GgmlType t, const uint8_t* row, int64_t c0, int64_t n, float* out) {
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(out, row + 4 * c0, 4 * n);
      return;
    case GgmlType::kF16:
      ConvertToF32(DType::kF16, row + 2 * c0, out, n);
      return;
    case GgmlType::kBF16:
      ConvertToF32(DType::kBF16, row + 2 * c0, out, n);
      return;
    default:
      break;
  }
  auto info = GgmlTypeInfo(static_cast<uint32_t>(t));
  if (!info || !info->supported) std::abort();
  const int64_t be = info->block_elems;
  float buf[kQK];
  int64_t c = c0;
  const int64_t end = c0 + n;
  while (c < end) {
    const int64_t blk = c / be;
    const int64_t in_blk = c - blk * be;
    const int64_t take = std::min(be - in_blk, end - c);
    if (in_blk == 0 && take == be) {
      DequantizeGgmlBlock(t, row + blk * info->block_bytes, out + (c - c0));
    } else {
      DequantizeGgmlBlock(t, row + blk * info->block_bytes, buf);
      std::memcpy(out + (c - c0), buf + in_blk, take * sizeof(float));
    }
    c += take;
  }
}

}  // namespace lucid
