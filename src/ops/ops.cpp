#include "ops/ops.h"

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
