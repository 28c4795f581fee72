// NumPy .npy files (format version 1.0/2.0), little-endian, C order. Used for --dump-logits and for
// reading reference arrays in tests.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace lucid {

// Supports dtypes f32, f64, i32, i64, u8 ('<f4', '<f8', '<i4', '<i8', '|u1'). Atomic (temp + rename).
Status WriteNpy(const std::string& path, const Tensor& t);
// Reads a whole file into an owned contiguous Tensor. Fortran order or other dtypes: error naming it.
StatusOr<Tensor> ReadNpy(const std::string& path);

}  // namespace lucid
