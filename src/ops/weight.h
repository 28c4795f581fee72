// Weight: a linear layer's matrix W [out, in] in whatever format the checkpoint stores it.
//
// Formats (the math of each is defined once, by DequantizeRowSpan in backends/cpu/cpu_ops.h):
// - kF32 / kBF16: `data` is [out, in] of that dtype.
// - kFp8Block: `data` f8_e4m3 [out, in], `scale` f32 or ue8m0 [ceil(out/B_r), ceil(in/B_c)]
//   (B = block_rows x block_cols, 128 x 128 in every public checkpoint; the scale multiplies:
//   W[o,i] = e4m3(data[o,i]) * scale[o/B_r, i/B_c]).
// - kNvfp4: `data` u8 [out, ceil(in/16)*8] (two e2m1 per byte, low nibble = even column; ModelOpt
//   zero-pads `in` to a multiple of the group), `scale` f8_e4m3 [out, ceil(in/16)], `scale2` f32
//   scalar: W[o,i] = (e2m1(nibble) * e4m3(scale[o, i/16])) * scale2, computed in f32 in that
//   order (the first product is exact, so W is the exact product rounded once).
// - kGgml: a GGUF tensor of ggml type `ggml_type` (core/ggml_types.h defines each type's blocks and
//   math); `data` u8 [out, row bytes], row o holding in/block_elems blocks.
// A Weight may be a row range of a bigger matrix (`RowRange`): `row_begin` is the first row of the
// parent, kept so that block scales are found at the right place. Weights never own more than a
// view: the tensors borrow the checkpoint mapping (or own converted storage).
#pragma once

#include <cstdint>
#include <string>

#include "core/ggml_types.h"
#include "core/tensor.h"

namespace lucid {

enum class WeightFormat { kF32, kBF16, kFp8Block, kNvfp4, kGgml };
const char* WeightFormatName(WeightFormat f);

struct Weight {
  WeightFormat format = WeightFormat::kF32;
  std::string name;  // checkpoint name, for errors and debug dumps
  int64_t rows = 0;  // out features of this view
  int64_t cols = 0;  // in features
  int64_t row_begin = 0;  // first row of this view within `data`'s full matrix
  int64_t block_rows = 0;  // kFp8Block: rows per scale block (128); kNvfp4: 1
  int64_t block_cols = 0;  // kFp8Block: columns per scale block (128); kNvfp4: group size (16)
  GgmlType ggml_type = GgmlType::kF32;  // kGgml only
  Tensor data;
  Tensor scale;
  Tensor scale2;

  bool valid() const { return data.valid() && rows > 0; }
  // A view of rows [begin, begin + count) of this weight.
  Weight RowRange(int64_t begin, int64_t count) const;
  // Bytes of the stored representation of this view (payload plus scales).
  size_t StoredBytes() const;
};

}  // namespace lucid
