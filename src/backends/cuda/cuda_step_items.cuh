// The per-item bodies of cuda_step_kernels.cu's grid loops: one RoPE pair, one token's MoE
// routing, one token's KV row encoding (ScatterAddRows' one multiply-add per element stays in its
// kernel; the MoeExperts conformance cases reach it on a GPU). Each is a host function too, so
// cuda_step_items_test.cpp runs them on the CPU through the ops conformance suite's Rope,
// MoeRoute and WriteKvRows cases against the CPU reference, and checks the bf16 and e4m3 encoders
// against core/dtype.h's over the float bit patterns. The arithmetic mirrors the reference's
// (backends/cpu/cpu_ops.cpp, cpu_moe.cpp, ops/kv_rows.cpp): products rounded alone, never
// contracted into an FMA; std::max's rule where the reference takes a running maximum.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_step_kernels.h"
#include "backends/cuda/cuda_weight_view.cuh"

namespace lucid::cuda {

// a + b and a - b rounded alone (never contracted with a product into an FMA).
__host__ __device__ inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// v != v: a NaN (isnan is std::isnan on the host, a global on the device).
__host__ __device__ inline bool IsNan(float v) { return v != v; }

// Pair j of LaunchRope's T * heads * half pairs.
__host__ __device__ inline void RopeItem(float* x, int64_t heads, int64_t head_stride,
                                         int64_t offset, int64_t half, const float* cs,
                                         bool interleaved, int64_t j) {
  const int64_t i = j % half, h = (j / half) % heads, t = j / (half * heads);
  float* v = x + (t * heads + h) * head_stride + offset;
  float* a = interleaved ? v + 2 * i : v + i;
  float* b = interleaved ? v + 2 * i + 1 : v + i + half;
  const float c = cs[(t * 2) * half + i], s = cs[(t * 2 + 1) * half + i];
  const float x0 = *a, x1 = *b;
  *a = SubRn(MulRn(x0, c), MulRn(x1, s));
  *b = AddRn(MulRn(x1, c), MulRn(x0, s));
}

// Whether score a at index ia ranks before b at ib (TopK's order: NaN first, then larger, ties
// to the lower index; -0 equals +0).
__host__ __device__ inline bool TopKBefore(float a, int64_t ia, float b, int64_t ib) {
  const bool na = IsNan(a), nb = IsNan(b);
  if (na || nb) return na && (!nb || ia < ib);
  return a > b || (a == b && ia < ib);
}

// The k best of s[0..n) in TopK's order: k passes, each the best after the previous pick.
__host__ __device__ inline void SelectTopK(const float* s, int64_t n, int64_t k, int32_t* out) {
  float pv = 0.0f;
  int64_t pi = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t u = 0; u < n; ++u) {
      const float v = s[u];
      if (pi >= 0 && !TopKBefore(pv, pi, v, u)) continue;
      if (best < 0 || TopKBefore(v, u, bv, best)) {
        best = u;
        bv = v;
      }
    }
    out[j] = static_cast<int32_t>(best);
    pv = bv;
    pi = best;
  }
}

// "a before b" for the group scores' top two (NaN first, then larger; ties do not matter).
__host__ __device__ inline bool GroupBefore(float a, float b) {
  return IsNan(a) ? !IsNan(b) : a > b;
}

// The routing of token t (LaunchMoeRoute's arguments; scratch row t of 2E + G floats).
__host__ __device__ inline void MoeRouteRow(const float* lg, int64_t E, const float* bias,
                                            int64_t G, int64_t topk_group, int64_t k, bool norm,
                                            float scaling, float* scratch, int32_t* idx,
                                            float* weights, int64_t t) {
  float* score = scratch + t * (2 * E + G);
  float* choice = score + E;
  float* gs = choice + E;
  for (int64_t e = 0; e < E; ++e) {
    score[e] = 1.0f / (1.0f + expf(-lg[t * E + e]));
    choice[e] = score[e] + (bias ? bias[e] : 0.0f);
  }
  if (G > 1) {
    const int64_t per = E / G;
    for (int64_t g = 0; g < G; ++g) {
      const float* v = choice + g * per;
      int64_t b0 = 0;
      for (int64_t i = 1; i < per; ++i)
        if (GroupBefore(v[i], v[b0])) b0 = i;
      int64_t b1 = b0 == 0 ? 1 : 0;
      for (int64_t i = 0; i < per; ++i)
        if (i != b0 && GroupBefore(v[i], v[b1])) b1 = i;
      gs[g] = v[b0] + v[b1];
    }
    int32_t groups[64];  // n_group <= 64 (checked by the caller)
    SelectTopK(gs, G, topk_group, groups);
    for (int64_t e = 0; e < E; ++e) {
      bool keep = false;
      for (int64_t i = 0; i < topk_group; ++i) keep = keep || groups[i] == e / per;
      if (!keep) choice[e] = -INFINITY;
    }
  }
  int32_t* ti = idx + t * k;
  float* tw = weights + t * k;
  SelectTopK(choice, E, k, ti);
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += (tw[i] = score[ti[i]]);
  for (int64_t i = 0; i < k; ++i) {
    if (norm) tw[i] /= (sum + 1e-20f);
    tw[i] *= scaling;
  }
}

// core/dtype.h's F32ToF8E4M3Saturate: RNE to e4m3 (bias 7, subnormal step 2^-9), magnitudes past
// 448 and infinities saturate to 448 (0x7E), NaN is 0x7F; the sign bit is kept.
__host__ __device__ inline uint8_t E4m3SaturateCode(float v) {
  const uint8_t sign = static_cast<uint8_t>((BitsOfFloat(v) >> 24) & 0x80u);
  const float a = fabsf(v);
  if (IsNan(v)) return sign | 0x7F;
  if (a >= 448.0f) return sign | 0x7E;
  uint32_t code;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9 (8 steps reach the first normal)
    code = static_cast<uint32_t>(rintf(a * 512.0f));
  } else {
    int e = 0;
    const float m = frexpf(a, &e);  // a = m * 2^e, m in [0.5, 1)
    uint32_t q = static_cast<uint32_t>(rintf((m * 2.0f - 1.0f) * 8.0f));
    int exp = e - 1;
    if (q == 8) {
      q = 0;
      ++exp;
    }
    code = (static_cast<uint32_t>(exp + 7) << 3) | q;
    if (code > 0x7E) code = 0x7E;
  }
  return sign | static_cast<uint8_t>(code);
}

__host__ __device__ inline void PutBytes(uint8_t* dst, const void* src, int n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (int i = 0; i < n; ++i) dst[i] = s[i];
}

// Column c of token t's concatenated parts (NaN past the last part: the caller checks widths).
__host__ __device__ inline float PartValue(const KvParts& p, int64_t t, int64_t c) {
  for (int i = 0; i < p.count; ++i) {
    if (c < p.width[i]) return p.data[i][t * p.width[i] + c];
    c -= p.width[i];
  }
  return NAN;
}

// Token t's row encoded at `out` (LaunchWriteKvRows' kind and format).
__host__ __device__ inline void WriteKvRow(const KvParts& parts, int64_t t, int kind,
                                           int64_t row_floats, int64_t fp8_values,
                                           int64_t fp8_block, uint8_t* out) {
  if (kind == 0) {
    for (int64_t i = 0; i < row_floats; ++i) {
      const float v = PartValue(parts, t, i);
      PutBytes(out + 4 * i, &v, 4);
    }
    return;
  }
  if (kind == 1) {
    for (int64_t i = 0; i < row_floats; ++i) {
      const uint16_t b = Bf16BitsRne(PartValue(parts, t, i));
      PutBytes(out + 2 * i, &b, 2);
    }
    return;
  }
  const int64_t n_scales = (fp8_values + fp8_block - 1) / fp8_block;
  uint8_t* scales = out + fp8_values;
  for (int64_t b = 0; b < n_scales; ++b) {
    const int64_t b0 = b * fp8_block,
                  b1 = fp8_values < b0 + fp8_block ? fp8_values : b0 + fp8_block;
    float amax = 0.0f;
    for (int64_t i = b0; i < b1; ++i) {
      const float a = fabsf(PartValue(parts, t, i));
      amax = amax < a ? a : amax;  // std::max's rule: a NaN never replaces amax
    }
    const float scale = amax / 448.0f;
    for (int64_t i = b0; i < b1; ++i) {  // a NaN quotient: the NaN code with v's sign
      const float v = PartValue(parts, t, i), q = v / scale;
      out[i] = scale > 0.0f
                   ? (IsNan(q) ? ((BitsOfFloat(v) >> 31) != 0 ? 0xFF : 0x7F) : E4m3SaturateCode(q))
                   : 0;
    }
    PutBytes(scales + 4 * b, &scale, 4);
  }
  uint8_t* tail = scales + 4 * n_scales;
  for (int64_t i = fp8_values; i < row_floats; ++i) {
    const uint16_t v = Bf16BitsRne(PartValue(parts, t, i));
    PutBytes(tail + 2 * (i - fp8_values), &v, 2);
  }
}

}  // namespace lucid::cuda
