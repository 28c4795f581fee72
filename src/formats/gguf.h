// GGUF reading (llama.cpp's checkpoint format, versions 2 and 3), memory-mapped and zero-copy.
//
// File layout (little-endian): magic "GGUF", u32 version, u64 tensor count, u64 metadata count;
// the metadata key/value pairs (key: u64 length + bytes; u32 value type; the value: an integer,
// float, bool, string or an array of one element type, arrays nesting); the tensor infos (name,
// u32 rank, u64 dims innermost first, u32 ggml type, u64 offset); padding to `general.alignment`
// (default 32); the data section, in which each offset is relative to the section start.
// Validation on open (every failure is a one-line Status naming the file and what is wrong): the
// magic, the version (1 and big-endian files refused by name), counts, string and array lengths
// that fit the bytes left, value types, a nesting depth of at most 8, keys and tensor names unique,
// `general.alignment` an unsigned power of two, each tensor's rank 1..4 with dims >= 1 and an
// element count that does not overflow, a type id ggml defines, a first dimension that is a
// multiple of the type's block, an aligned offset, bytes inside the data section, and no two
// tensors' bytes overlapping.
// Status codes: NotFound for a missing file, DataLoss for anything corrupt or truncated,
// Unimplemented for a version, or (from Get) a tensor type, that lucid does not read,
// FailedPrecondition for a non-regular file.
// Shapes: GGUF dims are innermost first (ne[0] is the row length); `shape` here is the row-major
// order lucid uses (reversed), so a GGUF [576, 49152] token embedding is shape [49152, 576].
// Tensors handed out are read-only views into the mapping that keep it alive (shared ownership).
// Thread-safety: after Open, all const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "core/status.h"
#include "core/tensor.h"

namespace lucid {

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* GgufValueTypeName(GgufValueType t);  // "u32", "string", "array", ...

// One metadata value. Integers keep their value in `i` (signed types) or `u` (unsigned types and
// bool), floats in `f` (f32 widened exactly), strings in `s`; an array has `elem_type` and `items`.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufValueType elem_type = GgufValueType::kU8;
  std::vector<GgufValue> items;

  bool IsInteger() const;
  bool IsFloat() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // as stored: innermost first
  Shape shape;                // row-major: dims reversed
  uint64_t offset = 0;        // relative to the data section
  uint64_t bytes = 0;
};

class GgufFile {
 public:
  // Maps `path` read-only and validates it (see file comment).
  static StatusOr<std::shared_ptr<GgufFile>> Open(const std::string& path);
  // The same over bytes already in memory (the fuzz target, tests); `keepalive` owns them.
  static StatusOr<std::shared_ptr<GgufFile>> Parse(const std::string& name, const uint8_t* data,
                                                   uint64_t size,
                                                   std::shared_ptr<const void> keepalive);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }  // file offset of the data section
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::map<std::string, GgufTensorInfo>& tensors() const { return tensors_; }
  // Tensor infos in file order.
  const std::vector<std::string>& tensor_order() const { return order_; }

  const GgufValue* Find(const std::string& key) const;
  // Typed metadata getters: NotFound naming the key when absent, InvalidArgument naming the key
  // and the type found when it has another type. GetUint accepts any integer type holding a
  // non-negative value; GetFloat any float or integer.
  StatusOr<std::string> GetString(const std::string& key) const;
  StatusOr<uint64_t> GetUint(const std::string& key) const;
  StatusOr<double> GetFloat(const std::string& key) const;
  StatusOr<bool> GetBool(const std::string& key) const;
  StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  StatusOr<std::vector<double>> GetFloatArray(const std::string& key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(const std::string& key) const;

  // A view of the named tensor: F32 / F16 / BF16 as that dtype with `shape`; a block-quantized
  // type as U8 [shape without the last dim..., row bytes]. NotFound if absent, Unimplemented
  // naming the tensor and its type if lucid cannot decode the type.
  StatusOr<Tensor> Get(const std::string& name) const;
  // The raw bytes of a tensor, and its info; NotFound if absent.
  StatusOr<const GgufTensorInfo*> Info(const std::string& name) const;
  const uint8_t* TensorData(const GgufTensorInfo& info) const {
    return base_ + data_start_ + info.offset;
  }
  std::shared_ptr<const void> keepalive() const { return keepalive_; }

 private:
  GgufFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_start_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, GgufTensorInfo> tensors_;
  std::vector<std::string> order_;
  std::shared_ptr<const void> keepalive_;
  friend struct GgufParser;
};

}  // namespace lucid
