#include <math_constants.h>

#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/cuda_step_kernels.h"

namespace lucid::cuda {
namespace {

__global__ void RopeKernel(float* x, int64_t T, int64_t heads, int64_t head_stride, int64_t offset,
                           int64_t half, const float* cs, bool interleaved) {
  LUCID_GRID_LOOP(j, T * heads * half) {
    const int64_t i = j % half, h = (j / half) % heads, t = j / (half * heads);
    float* v = x + (t * heads + h) * head_stride + offset;
    float* a = interleaved ? v + 2 * i : v + i;
    float* b = interleaved ? v + 2 * i + 1 : v + i + half;
    const float c = cs[(t * 2) * half + i], s = cs[(t * 2 + 1) * half + i];
    const float x0 = *a, x1 = *b;
    // No contraction into FMA: the reference rounds each product.
    *a = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *b = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
}

// Whether score a at index ia ranks before b at ib (TopK's order: NaN first, then larger, ties
// to the lower index; -0 equals +0).
__device__ bool Before(float a, int64_t ia, float b, int64_t ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na || nb) return na && (!nb || ia < ib);
  return a > b || (a == b && ia < ib);
}

// The k best of s[0..n) in TopK's order: k passes, each the best after the previous pick.
__device__ void SelectTopK(const float* s, int64_t n, int64_t k, int32_t* out) {
  float pv = 0.0f;
  int64_t pi = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t u = 0; u < n; ++u) {
      const float v = s[u];
      if (pi >= 0 && !Before(pv, pi, v, u)) continue;
      if (best < 0 || Before(v, u, bv, best)) {
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
__device__ bool GroupBefore(float a, float b) { return isnan(a) ? !isnan(b) : a > b; }

__global__ void MoeRouteKernel(const float* lg, int64_t T, int64_t E, const float* bias, int64_t G,
                               int64_t topk_group, int64_t k, bool norm, float scaling,
                               float* scratch, int32_t* idx, float* weights) {
  LUCID_GRID_LOOP(t, T) {
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
        if (!keep) choice[e] = -CUDART_INF_F;
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
}

// F32ToBf16 (core/dtype.cpp): RNE; NaN keeps its sign with the quiet pattern.
__device__ uint16_t ToBf16(float v) {
  const uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((bits >> 16) & 0x8000u) | 0x7FC0u;
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// F32ToF8E4M3Saturate: RNE to e4m3 (bias 7, subnormal step 2^-9), magnitudes past 448 and
// infinities saturate to 448 (0x7E), NaN is 0x7F; the sign bit is kept.
__device__ uint8_t ToE4m3Saturate(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = fabsf(v);
  if (isnan(v)) return sign | 0x7F;
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

__device__ void PutBytes(uint8_t* dst, const void* src, int n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (int i = 0; i < n; ++i) dst[i] = s[i];
}

__device__ float PartValue(const KvParts& p, int64_t t, int64_t c) {
  for (int i = 0; i < p.count; ++i) {
    if (c < p.width[i]) return p.data[i][t * p.width[i] + c];
    c -= p.width[i];
  }
  return CUDART_NAN_F;
}

__global__ void WriteKvRowsKernel(KvParts parts, int64_t T, int kind, int64_t row_floats,
                                  int64_t fp8_values, int64_t fp8_block, int64_t row_bytes,
                                  const int64_t* pool_rows, uint8_t* bytes) {
  LUCID_GRID_LOOP(t, T) {
    uint8_t* out = bytes + pool_rows[t] * row_bytes;
    if (kind == 0) {
      for (int64_t i = 0; i < row_floats; ++i) {
        const float v = PartValue(parts, t, i);
        PutBytes(out + 4 * i, &v, 4);
      }
    } else if (kind == 1) {
      for (int64_t i = 0; i < row_floats; ++i) {
        const uint16_t b = ToBf16(PartValue(parts, t, i));
        PutBytes(out + 2 * i, &b, 2);
      }
    } else {
      const int64_t n_scales = (fp8_values + fp8_block - 1) / fp8_block;
      uint8_t* scales = out + fp8_values;
      for (int64_t b = 0; b < n_scales; ++b) {
        const int64_t b0 = b * fp8_block, b1 = min(fp8_values, b0 + fp8_block);
        float amax = 0.0f;
        for (int64_t i = b0; i < b1; ++i) {
          const float a = fabsf(PartValue(parts, t, i));
          amax = amax < a ? a : amax;  // std::max's rule: a NaN never replaces amax
        }
        const float scale = amax / 448.0f;
        for (int64_t i = b0; i < b1; ++i) {  // a NaN quotient: the NaN code with v's sign
          const float v = PartValue(parts, t, i), q = v / scale;
          out[i] = scale > 0.0f ? (isnan(q) ? (signbit(v) ? 0xFF : 0x7F) : ToE4m3Saturate(q)) : 0;
        }
        PutBytes(scales + 4 * b, &scale, 4);
      }
      uint8_t* tail = scales + 4 * n_scales;
      for (int64_t i = fp8_values; i < row_floats; ++i) {
        const uint16_t v = ToBf16(PartValue(parts, t, i));
        PutBytes(tail + 2 * (i - fp8_values), &v, 2);
      }
    }
  }
}

__global__ void ScatterAddRowsKernel(float* out, int64_t D, const float* y, const int64_t* rows,
                                     const float* w, int64_t n) {
  LUCID_GRID_LOOP(j, n * D) {
    const int64_t i = j / D, c = j % D;
    out[rows[i] * D + c] += w[i] * y[j];
  }
}

}  // namespace

void LaunchRope(float* x, int64_t T, int64_t heads, int64_t head_stride, int64_t offset,
                int64_t half, const float* cs, bool interleaved, cudaStream_t stream) {
  RopeKernel<<<Blocks(T * heads * half), kThreads, 0, stream>>>(x, T, heads, head_stride, offset,
                                                                half, cs, interleaved);
}

void LaunchMoeRoute(const float* logits, int64_t T, int64_t E, const float* bias, int64_t n_group,
                    int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                    float* scratch, int32_t* idx, float* weights, cudaStream_t stream) {
  MoeRouteKernel<<<Blocks(T), kThreads, 0, stream>>>(
      logits, T, E, bias, n_group, topk_group, k, norm_topk_prob, scaling, scratch, idx, weights);
}

void LaunchWriteKvRows(const KvParts& parts, int64_t T, int kind, int64_t row_floats,
                       int64_t fp8_values, int64_t fp8_block, int64_t row_bytes,
                       const int64_t* pool_rows, uint8_t* bytes, cudaStream_t stream) {
  WriteKvRowsKernel<<<Blocks(T), kThreads, 0, stream>>>(parts, T, kind, row_floats, fp8_values,
                                                        fp8_block, row_bytes, pool_rows, bytes);
}

void LaunchScatterAddRows(float* out, int64_t D, const float* y, const int64_t* rows,
                          const float* w, int64_t n, cudaStream_t stream) {
  ScatterAddRowsKernel<<<Blocks(n * D), kThreads, 0, stream>>>(out, D, y, rows, w, n);
}

}  // namespace lucid::cuda
