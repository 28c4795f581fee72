// NumPy .npy files (format version 1.0/2.0), little-endian, C order. Used for --dump-logits and for
// reading reference arrays in tests.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace lucid {

// Supports dtypes f32, f64, i32, i64, u8 ('<f4', '<f8', '<i4', '<i8', '|u1'). Atomic (temp + rename).
// Writes version 1.0 headers byte-identical to numpy's (64-byte aligned), 2.0 only if needed.
// Other dtypes or non-contiguous tensors: InvalidArgument naming the path.
Status WriteNpy(const std::string& path, const Tensor& t);
// Reads a whole file into an owned contiguous Tensor. Fortran order or other dtypes: error naming it.
// Reads versions 1.0, 2.0 and 3.0; '|u1', '<u1' and '=u1' all read as u8. Errors name the path:
// NotFound (missing), DataLoss (bad magic/header, data size != shape x dtype size), Unimplemented
// (big-endian or other dtypes, structured dtypes, Fortran order, unknown version).
StatusOr<Tensor> ReadNpy(const std::string& path);

}  // namespace lucid
