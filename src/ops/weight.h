// Weight: a linear layer's matrix W [out, in] in whatever format the checkpoint stores it.
//
// Formats (the packed ones arrive with the quantization work; the struct is ready for them):
// - kF32 / kBF16: `data` is [out, in] of that dtype.
// - kFp8Block: `data` f8_e4m3 [out, in], `scale` f32 [ceil(out/128), ceil(in/128)] (multiplies).
// - kNvfp4: `data` u8 [out, in/2] (two e2m1 per byte, low nibble even), `scale` f8_e4m3
//   [out, in/16], `scale2` f32 scalar.
// A Weight may be a row range of a bigger matrix (`RowRange`): `row_begin` is the first row of the
// parent, kept so that block scales are found at the right place. Weights never own more than a
// view: the tensors borrow the checkpoint mapping (or own converted storage).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace lucid {

enum class WeightFormat { kF32, kBF16, kFp8Block, kNvfp4 };
const char* WeightFormatName(WeightFormat f);

struct Weight {
  WeightFormat format = WeightFormat::kF32;
  std::string name;  // checkpoint name, for errors and debug dumps
  int64_t rows = 0;  // out features of this view
  int64_t cols = 0;  // in features
  int64_t row_begin = 0;  // first row of this view within `data`'s full matrix
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
