// DType metadata: sizes and names. The numeric conversions live in dtype.cpp.
#include <string>

#include "core/dtype.h"

namespace lucid {
namespace {

struct DTypeRow {
  DType type;
  int bits;
  const char* name;
  const char* safetensors;
  bool floating;
};

constexpr DTypeRow kRows[] = {
    {DType::kF64, 64, "f64", "F64", true},         {DType::kF32, 32, "f32", "F32", true},
    {DType::kF16, 16, "f16", "F16", true},         {DType::kBF16, 16, "bf16", "BF16", true},
    {DType::kF8E4M3, 8, "f8_e4m3", "F8_E4M3", true}, {DType::kF8E5M2, 8, "f8_e5m2", "F8_E5M2", true},
    {DType::kF4E2M1, 4, "f4_e2m1", "F4", true},    {DType::kUE8M0, 8, "ue8m0", "F8_E8M0", true},
    {DType::kI64, 64, "i64", "I64", false},        {DType::kI32, 32, "i32", "I32", false},
    {DType::kI16, 16, "i16", "I16", false},        {DType::kI8, 8, "i8", "I8", false},
    {DType::kU8, 8, "u8", "U8", false},            {DType::kBool, 8, "bool", "BOOL", false},
};

const DTypeRow& Row(DType t) {
  for (const auto& r : kRows)
    if (r.type == t) return r;
  return kRows[1];
}

}  // namespace

int DTypeBits(DType t) { return Row(t).bits; }
const char* DTypeName(DType t) { return Row(t).name; }
bool IsFloatingPoint(DType t) { return Row(t).floating; }
const char* SafetensorsName(DType t) { return Row(t).safetensors; }

StatusOr<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const auto& r : kRows)
    if (name == r.safetensors) return r.type;
  std::string known;
  for (const auto& r : kRows) known += std::string(known.empty() ? "" : ", ") + r.safetensors;
  return InvalidArgument("unknown safetensors dtype \"" + std::string(name) + "\" (known: " + known +
                         ")");
}

}  // namespace lucid
