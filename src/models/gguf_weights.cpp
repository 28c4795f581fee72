#include "models/gguf_weights.h"

namespace lucid {

StatusOr<Weight> WeightFromGguf(const GgufFile& file, const std::string& name) {
  LUCID_ASSIGN_OR_RETURN(const GgufTensorInfo* ti, file.Info(name));
  if (ti->dims.size() > 2) {
    return InvalidArgument(file.path() + ": tensor " + name + " has rank " +
                           std::to_string(ti->dims.size()) + "; a weight is a matrix or a vector");
  }
  LUCID_ASSIGN_OR_RETURN(Tensor t, file.Get(name));
  Weight w;
  w.name = name;
  w.cols = ti->dims[0];
  w.rows = ti->dims.size() == 2 ? ti->dims[1] : 1;
  if (ti->type == GgmlType::kF32 || ti->type == GgmlType::kBF16) {
    w.format = ti->type == GgmlType::kF32 ? WeightFormat::kF32 : WeightFormat::kBF16;
    w.data = t.Reshape({w.rows, w.cols});
    return w;
  }
  w.format = WeightFormat::kGgml;
  w.ggml_type = ti->type;
  const int64_t row_bytes = GgmlRowBytes(ti->type, w.cols);
  auto* data = const_cast<uint8_t*>(file.TensorData(*ti));
  w.data = Tensor::Borrow(DType::kU8, {w.rows, row_bytes}, data, file.keepalive());
  return w;
}

}  // namespace lucid
