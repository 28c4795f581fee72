#include "ops/weight.h"

#include "core/status.h"

namespace lucid {

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kFp8Block: return "fp8-block";
    case WeightFormat::kNvfp4: return "nvfp4";
    case WeightFormat::kGgml: return "ggml";
  }
  return "?";
}

Weight Weight::RowRange(int64_t begin, int64_t count) const {
  LUCID_CHECK(begin >= 0 && count >= 0 && begin + count <= rows, "Weight::RowRange out of range");
  Weight w = *this;
  w.row_begin = row_begin + begin;
  w.rows = count;
  return w;
}

size_t Weight::StoredBytes() const {
  const size_t full_rows = static_cast<size_t>(data.valid() && data.rank() > 0 ? data.size(0) : 1);
  const double frac = static_cast<double>(rows) / static_cast<double>(full_rows);
  // A default (absent) Tensor is rank 0 but holds nothing: count only tensors with storage.
  auto bytes = [](const Tensor& t) { return t.raw() != nullptr ? t.nbytes() : size_t{0}; };
  size_t total = bytes(data) + bytes(scale) + bytes(scale2);
  return static_cast<size_t>(static_cast<double>(total) * frac + 0.5);
}

}  // namespace lucid
