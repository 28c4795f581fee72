#include "ops/ops.h"

#include <cstring>
#include <string>

namespace lucid {

void CheckDevices(const Ops& ops, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->raw() == nullptr || t->device() == ops.device()) continue;
    CheckFailed(__FILE__, __LINE__, "tensor device == ops device",
                std::string(op) + ": an argument on " + DeviceName(t->device()) + ", but " +
                    ops.name() + " runs on " + DeviceName(ops.device()));
  }
}

void Ops::CopyFromHost(const void* src, void* dst, size_t bytes) const {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

Status Ops::CopyToHost(const void* src, void* dst, size_t bytes) const {
  LUCID_RETURN_IF_ERROR(Synchronize());
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return OkStatus();
}

StatusOr<Tensor> CopyTensorToHost(const Ops& ops, const Tensor& t) {
  if (!t.is_contiguous())
    return InvalidArgument("CopyTensorToHost: a strided view " + ShapeToString(t.shape()));
  Tensor host = Tensor::Empty(t.dtype(), t.shape());
  LUCID_RETURN_IF_ERROR(ops.CopyToHost(t.raw(), host.raw(), t.nbytes()));
  return host;
}

void CheckRouting(const char* op, const Tensor& idx, const Tensor& weights, int64_t T, int64_t k) {
  const Shape want = {T, k};
  LUCID_CHECK(
      idx.dtype() == DType::kI32 && idx.shape() == want,
      std::string(op) + ": idx must be i32 " + ShapeToString(want) + ", got " + idx.DebugString());
  LUCID_CHECK(weights.dtype() == DType::kF32 && weights.shape() == want,
              std::string(op) + ": weights must be f32 " + ShapeToString(want) + ", got " +
                  weights.DebugString());
}

}  // namespace lucid
