// ggml tensor types (the element formats of GGUF files) and THE definition of each one's math.
//
// Every quantized type stores a row as consecutive blocks; a block of `BlockElems` elements is
// `BlockBytes` bytes, little-endian, laid out as llama.cpp's ggml-common.h declares it. Decoding
// follows the `gguf` Python package's numpy dequantize (gguf/quants.py, version pinned in
// tools/reference/gguf/requirements.txt) bit for bit, checked on committed goldens:
// - F32, F16 (IEEE half), BF16 (bits << 16): exact.
// - Q8_0 (32 elems, 34 B: f16 d, i8 q[32]): d * q.
// - Q4_0 (32, 18 B: f16 d, u8 qs[16]): d * (nibble - 8); element j < 16 is the low nibble of
//   qs[j], element j + 16 its high nibble.
// - Q4_1 (32, 20 B: f16 d, f16 m, qs[16] as Q4_0): d * nibble + m (the product is exact in f32, so
//   one rounding, with or without fused multiply-add).
// - Q4_K (256, 144 B: f16 d, f16 dmin, u8 scales[12], qs[128]): eight sub-blocks of 32 with 6-bit
//   scale sc[j] and min m[j] unpacked from `scales` (j < 4: scales[j] & 63, scales[j+4] & 63;
//   j >= 4: (scales[j+4] & 15) | ((scales[j-4] >> 6) << 4), (scales[j+4] >> 4) | ((scales[j] >> 6)
//   << 4)); sub-block 2i holds the low nibbles of qs[32i .. 32i+32), 2i+1 their high nibbles;
//   value = (d * sc) * q - dmin * m, each product exact in f32, one rounding at the subtraction.
// - Q5_K (256, 176 B: d, dmin, scales[12], qh[32], qs[128]): as Q4_K with a fifth bit: bit j of
//   qh[l] is bit 4 of element l of sub-block j.
// - Q6_K (256, 210 B: ql[128], qh[64], i8 scales[16], f16 d): element e = 128h + r (h = 0, 1):
//   low 4 bits (ql[64h + r % 64] >> 4 * (r / 64)) & 15, high 2 bits (qh[32h + r % 32] >> 2 *
//   (r / 32)) & 3, q = that 6-bit code - 32, value = (d * scales[e / 16]) * q.
// Other ggml types (Q5_0, Q2_K, IQ*, ...) are known by name so errors can say which type a file
// uses, but have no math here: IsSupported() is false for them.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace lucid {

// Values are ggml's `enum ggml_type` ids, as stored in GGUF tensor infos.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  const char* name;     // ggml's spelling: "F32", "Q4_K", ...
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  bool supported;       // lucid can decode it (the math above)
};

// Traits of a known type id; nullopt for an id ggml does not define.
std::optional<GgmlTypeTraits> GgmlTypeInfo(uint32_t id);
inline bool IsSupported(GgmlType t) {
  auto i = GgmlTypeInfo(static_cast<uint32_t>(t));
  return i && i->supported;
}
const char* GgmlTypeName(GgmlType t);  // "?" for an unknown id
// Bytes of a row of `n` elements; n must be a multiple of the block size (callers validate).
int64_t GgmlRowBytes(GgmlType t, int64_t n);

// Decodes elements [c0, c0 + n) of a row stored at `row` (the row's first block) into out[n].
// Any c0 / n inside the row is allowed (blocks may be partial at both ends). Requires a
// supported type (aborts otherwise: loading validates).
void DequantizeGgmlRowSpan(GgmlType t, const uint8_t* row, int64_t c0, int64_t n, float* out);

// Decodes block `b` (block_elems elements) of a supported quantized type into out.
void DequantizeGgmlBlock(GgmlType t, const uint8_t* block, float* out);

}  // namespace lucid
