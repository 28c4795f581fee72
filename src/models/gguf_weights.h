// Weights from a GGUF file: a tensor of any ggml type lucid decodes as a Weight the ops run.
//
// F32 tensors become WeightFormat::kF32 and BF16 kBF16 views; F16 and the block types (Q8_0,
// Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) become kGgml views of the mapped rows (ops/weight.h), decoded by
// core/ggml_types.h. Nothing is copied: the Weight borrows the file's mapping and keeps it alive.
// A 1-D tensor is one row. Errors: NotFound for an absent tensor, Unimplemented naming the tensor
// and type for a ggml type lucid does not decode, InvalidArgument for rank > 2.
// Thread-safety: pure function of the immutable file.
#pragma once

#include <string>

#include "core/status.h"
#include "formats/gguf.h"
#include "ops/weight.h"

namespace lucid {

StatusOr<Weight> WeightFromGguf(const GgufFile& file, const std::string& name);

}  // namespace lucid
