#include "backends/cuda/cuda_fp8_scales.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace lucid::cuda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string BlockName(int64_t index, int64_t blocks_per_row, float s) {
  return "block scale (" + std::to_string(index / blocks_per_row) + ", " +
         std::to_string(index % blocks_per_row) + ") = " + std::to_string(s);
}

// Re-rounds block (bi, bj)'s codes to q * ratio; returns how many dequantized values changed
// (ratio = s / s' with s' the new power-of-two scale, so new value = code' * s').
int64_t RequantizeBlock(const uint8_t* q, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                        int64_t c1, double s, double s_new, uint8_t* out_q) {
  int64_t changed = 0;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const double v = static_cast<double>(F8E4M3ToF32(q[r * cols + c])) * s;  // exact
      const uint8_t code = NearestE4m3(v / s_new);
      out_q[r * cols + c] = code;  // a NaN code stays NaN
      const double w = static_cast<double>(F8E4M3ToF32(code)) * s_new;
      if (w != v && !(std::isnan(w) && std::isnan(v))) ++changed;
    }
  }
  return changed;
}

}  // namespace

void Ue8m0ScalesToF32(const uint8_t* codes, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Ue8m0ToF32(codes[i]);
}

int Ue8m0CeilCode(float s) {
  if (!(s > 0.0f) || !std::isfinite(s)) return -1;
  int e = 0;
  const float m = std::frexp(s, &e);    // s = m * 2^e, m in [0.5, 1)
  const int p = m == 0.5f ? e - 1 : e;  // smallest power of two >= s is 2^p
  if (p + 127 > 254) return -1;
  return p + 127 < 0 ? 0 : p + 127;
}

uint8_t NearestE4m3(double x) {
  // F32ToF8E4M3 rounds the float nearest to x; double rounding can only move it by one code, so
  // the nearest of that code and its two neighbours of the same sign is the exact answer.
  const uint8_t c = F32ToF8E4M3(static_cast<float>(x));
  const uint8_t sign = c & 0x80;
  const int mag = c & 0x7F;
  uint8_t best = c;
  double best_d = std::fabs(static_cast<double>(F8E4M3ToF32(c)) - x);
  for (int m : {mag - 1, mag + 1}) {
    if (m < 0 || m > 0x7E) continue;  // 0x7F is NaN
    const uint8_t cand = static_cast<uint8_t>(sign | m);
    const double d = std::fabs(static_cast<double>(F8E4M3ToF32(cand)) - x);
    if (d < best_d || (d == best_d && (cand & 1) == 0 && (best & 1) != 0)) {
      best = cand;
      best_d = d;
    }
  }
  return best;
}

Ue8m0Packing PackScalesUe8m0(const float* scales, const uint8_t* q, int64_t rows, int64_t cols,
                             int64_t br, int64_t bc, uint8_t* out_codes, uint8_t* out_q) {
  Ue8m0Packing p;
  const int64_t nr = CeilDiv(rows, br), nc = CeilDiv(cols, bc);
  std::memcpy(out_q, q, static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < nr * nc; ++i) {
    const float s = scales[i];
    const int64_t r0 = (i / nc) * br, c0 = (i % nc) * bc;
    const int64_t r1 = std::min(rows, r0 + br), c1 = std::min(cols, c0 + bc);
    ++p.scales;
    if (std::isnan(s)) {
      out_codes[i] = 0xFF;
      ++p.nan;
      continue;
    }
    if (s == 0.0f) {  // an all-zero block (but for NaN codes): zero codes keep it
      out_codes[i] = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          if ((out_q[r * cols + c] & 0x7F) != 0x7F) out_q[r * cols + c] &= 0x80;  // +-0
      ++p.zero;
      continue;
    }
    const int code = Ue8m0CeilCode(s);
    if (code < 0) {
      p.refusal = BlockName(i, nc, s) + " has no ue8m0 form (" +
                  (s < 0.0f        ? "negative"
                   : std::isinf(s) ? "infinite"
                                   : "above 2^127") +
                  ")";
      return p;
    }
    out_codes[i] = static_cast<uint8_t>(code);
    const double s_new = std::ldexp(1.0, code - 127);
    if (static_cast<double>(s) == s_new) {
      ++p.exact;
      continue;
    }
    ++p.rounded_up;
    p.changed_weights += RequantizeBlock(q, cols, r0, r1, c0, c1, s, s_new, out_q);
  }
  return p;
}

int64_t Blk128x128ScaleLd(int64_t cols) { return (CeilDiv(cols, 128) + 3) / 4 * 4; }

std::vector<float> LayoutBlk128x128Scales(const float* natural, int64_t rows, int64_t cols) {
  const int64_t nr = CeilDiv(rows, 128), nc = CeilDiv(cols, 128), ld = Blk128x128ScaleLd(cols);
  std::vector<float> out(static_cast<size_t>(nr * ld), 0.0f);
  for (int64_t n = 0; n < nr; ++n)
    for (int64_t k = 0; k < nc; ++k) out[n * ld + k] = natural[n * nc + k];
  return out;
}

int64_t Vec128ScaleOffset(int64_t m, int64_t k, int64_t tokens) { return k * tokens + m; }

std::vector<float> LayoutVec128Scales(const float* natural, int64_t tokens, int64_t cols) {
  const int64_t nc = CeilDiv(cols, 128);
  std::vector<float> out(static_cast<size_t>(tokens * nc));
  for (int64_t m = 0; m < tokens; ++m)
    for (int64_t k = 0; k < nc; ++k) out[Vec128ScaleOffset(m, k, tokens)] = natural[m * nc + k];
  return out;
}

const char* Fp8ScaleReadName(Fp8ScaleRead r) {
  switch (r) {
    case Fp8ScaleRead::kAsStored:
      return "as stored";
    case Fp8ScaleRead::kF32:
      return "f32";
    case Fp8ScaleRead::kUe8m0:
      return "ue8m0";
  }
  return "?";
}

StatusOr<Fp8ScalesForKernelResult> Fp8ScalesForKernel(const Tensor& q, const Tensor& scale,
                                                      int64_t br, int64_t bc, Fp8ScaleRead read) {
  if (q.dtype() != DType::kF8E4M3 || q.rank() != 2 || !q.is_contiguous())
    return InvalidArgument(
        "Fp8ScalesForKernel: the payload must be contiguous f8_e4m3 [rows, "
        "cols], got " +
        q.DebugString());
  const int64_t rows = q.size(0), cols = q.size(1);
  const Shape sshape = {CeilDiv(rows, br), CeilDiv(cols, bc)};
  if ((scale.dtype() != DType::kF32 && scale.dtype() != DType::kUE8M0) || scale.shape() != sshape ||
      !scale.is_contiguous())
    return InvalidArgument("Fp8ScalesForKernel: scales must be f32 or ue8m0 " +
                           ShapeToString(sshape) + ", got " + scale.DebugString());
  Fp8ScalesForKernelResult r;
  r.q = q;
  const bool stored_ue8m0 = scale.dtype() == DType::kUE8M0;
  if (read == Fp8ScaleRead::kAsStored || (read == Fp8ScaleRead::kF32 && !stored_ue8m0) ||
      (read == Fp8ScaleRead::kUe8m0 && stored_ue8m0)) {
    r.scale = scale;
    r.action = std::string("as stored (") + (stored_ue8m0 ? "ue8m0" : "f32") + ", exact)";
    return r;
  }
  if (read == Fp8ScaleRead::kF32) {
    r.scale = Tensor::Empty(DType::kF32, sshape);
    Ue8m0ScalesToF32(scale.data<const uint8_t>(), scale.numel(), r.scale.data<float>());
    r.action = "ue8m0 -> f32 (exact)";
    return r;
  }
  r.scale = Tensor::Empty(DType::kUE8M0, sshape);
  Tensor out_q = Tensor::Empty(DType::kF8E4M3, q.shape());
  r.packing = PackScalesUe8m0(scale.data<const float>(), q.data<const uint8_t>(), rows, cols, br,
                              bc, r.scale.data<uint8_t>(), out_q.data<uint8_t>());
  const Ue8m0Packing& p = r.packing;
  if (!p.refusal.empty()) return FailedPrecondition("f32 -> ue8m0 block scales: " + p.refusal);
  if (p.lossy())
    return FailedPrecondition(
        "f32 -> ue8m0 block scales would be lossy: " + std::to_string(p.rounded_up) + " of " +
        std::to_string(p.scales) + " scales are not powers of two; rounding them up changes " +
        std::to_string(p.changed_weights) + " of " + std::to_string(rows * cols) +
        " weights (lucid refuses; choose a kernel that reads f32 scales)");
  // Rounded-up blocks whose codes all re-round exactly are exact too: keep the new codes.
  if (p.rounded_up > 0 || p.zero > 0) r.q = out_q;
  r.action =
      "f32 -> ue8m0 (exact: " + std::to_string(p.exact) + " powers of two" +
      (p.rounded_up > 0 ? ", " + std::to_string(p.rounded_up) + " rounded up with every value kept"
                        : std::string()) +
      (p.zero > 0 ? ", " + std::to_string(p.zero) + " zero blocks" : std::string()) +
      (p.nan > 0 ? ", " + std::to_string(p.nan) + " NaN kept" : std::string()) + ")";
  return r;
}

}  // namespace lucid::cuda
