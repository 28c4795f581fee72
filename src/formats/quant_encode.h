// Quantizers that write the public packed formats (layouts: ops/weight.h, docs/QUANTIZATION.md).
// Deterministic, single-rounding f32 arithmetic in a fixed order, bit-identical to
// tools/reference/quant/quant_ref.py, whose NVFP4 path reproduces NVIDIA ModelOpt 0.47's exporter
// bit for bit (checked on the ModelOpt fixture).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lucid {

// NVFP4 (ModelOpt). Global scale: amax(|w|) / (6 * 448).
float Nvfp4GlobalScale(const float* w, size_t n);
// w [rows, cols] -> packed [rows, ceil(cols/16)*8] (low nibble = even column, zero padding past
// cols), scales e4m3 [rows, ceil(cols/16)]. Per group: s = amax / (6 * scale2) (0 -> 1), clamped
// to [2^-9, 448], e4m3 RNE; code = ModelOpt's e2m1 rounding of w / (float(s) * scale2) (RNE on
// the magnitude, saturating at 6, sign bit only for negative inputs).
void QuantizeNvfp4(const float* w, int64_t rows, int64_t cols, float scale2, uint8_t* packed,
                   uint8_t* scales);
// ModelOpt's e2m1 code of x (already divided by its scale).
uint8_t Nvfp4Code(float x);

// FP8 block (DeepSeek). w [rows, cols] -> q e4m3 [rows, cols], scales f32
// [ceil(rows/br), ceil(cols/bc)]: s = max(block amax, 1e-4) / 448, rounded up to a power of two
// if ue8m0; q = e4m3(clamp(w / s, -448, 448)) RNE.
void QuantizeFp8Block(const float* w, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                      bool ue8m0, uint8_t* q, float* scales);

}  // namespace lucid
