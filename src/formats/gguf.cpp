// GGUF reader: a bounds-checked cursor over the mapping; every check of the file comment in
// gguf.h is made while parsing, before anything is handed out.
#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace lucid {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDepth = 8;
constexpr int kMaxDims = 4;

// A printable, length-capped rendering of file bytes for error messages.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > 80) out += "...";
  return out + "\"";
}

// Smallest encoded size of one value of type t (used to bound counts before allocating).
uint64_t MinEncodedSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kString:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 1;
}

bool KnownValueType(uint32_t t) { return t <= 12; }

}  // namespace

const char* GgufValueTypeName(GgufValueType t) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i <= 12 ? names[i] : "?";
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

struct GgufParser {
  GgufFile* f;
  uint64_t pos = 0;

  Status Fail(const std::string& what) const {
    return DataLoss(f->path_ + ": " + what + " (at byte " + std::to_string(pos) + ")");
  }
  uint64_t Left() const { return f->size_ - pos; }

  template <typename T>
  Status Read(T* v, const char* what) {
    if (Left() < sizeof(T)) return Fail(std::string("file ends inside ") + what + " (truncated?)");
    std::memcpy(v, f->base_ + pos, sizeof(T));
    pos += sizeof(T);
    return OkStatus();
  }

  Status ReadString(std::string* s, const char* what) {
    uint64_t n;
    LUCID_RETURN_IF_ERROR(Read(&n, what));
    if (n > Left()) {
      return Fail(std::string(what) + " length " + std::to_string(n) + " exceeds the " +
                  std::to_string(Left()) + " bytes left");
    }
    s->assign(reinterpret_cast<const char*>(f->base_ + pos), n);
    pos += n;
    return OkStatus();
  }

  Status ReadValue(GgufValueType t, GgufValue* v, int depth, const std::string& key) {
    v->type = t;
    switch (t) {
      case GgufValueType::kU8: {
        uint8_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "a u8 value"));
        v->u = x;
        break;
      }
      case GgufValueType::kI8: {
        int8_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "an i8 value"));
        v->i = x;
        break;
      }
      case GgufValueType::kU16: {
        uint16_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "a u16 value"));
        v->u = x;
        break;
      }
      case GgufValueType::kI16: {
        int16_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "an i16 value"));
        v->i = x;
        break;
      }
      case GgufValueType::kU32: {
        uint32_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "a u32 value"));
        v->u = x;
        break;
      }
      case GgufValueType::kI32: {
        int32_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "an i32 value"));
        v->i = x;
        break;
      }
      case GgufValueType::kU64: {
        uint64_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "a u64 value"));
        v->u = x;
        break;
      }
      case GgufValueType::kI64: {
        int64_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "an i64 value"));
        v->i = x;
        break;
      }
      case GgufValueType::kF32: {
        float x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "an f32 value"));
        v->f = x;
        break;
      }
      case GgufValueType::kF64: {
        double x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "an f64 value"));
        v->f = x;
        break;
      }
      case GgufValueType::kBool: {
        uint8_t x = 0;
        LUCID_RETURN_IF_ERROR(Read(&x, "a bool value"));
        if (x > 1)
          return Fail("metadata " + Quote(key) + ": bool value " + std::to_string(x) +
                      " is not 0 or 1");
        v->u = x;
        break;
      }
      case GgufValueType::kString:
        return ReadString(&v->s, "a string value");
      case GgufValueType::kArray: {
        if (depth >= kMaxDepth)
          return Fail("metadata " + Quote(key) + ": arrays nest deeper than 8");
        uint32_t et;
        uint64_t n;
        LUCID_RETURN_IF_ERROR(Read(&et, "an array element type"));
        if (!KnownValueType(et)) {
          return Fail("metadata " + Quote(key) + ": unknown array element type " +
                      std::to_string(et));
        }
        LUCID_RETURN_IF_ERROR(Read(&n, "an array length"));
        v->elem_type = static_cast<GgufValueType>(et);
        if (n > Left() / MinEncodedSize(v->elem_type)) {
          return Fail("metadata " + Quote(key) + ": array of " + std::to_string(n) + " " +
                      GgufValueTypeName(v->elem_type) + " cannot fit the " +
                      std::to_string(Left()) + " bytes left");
        }
        v->items.resize(n);
        for (uint64_t k = 0; k < n; ++k) {
          LUCID_RETURN_IF_ERROR(ReadValue(v->elem_type, &v->items[k], depth + 1, key));
        }
        break;
      }
    }
    return OkStatus();
  }

  Status ParseHeader(uint64_t* n_tensors, uint64_t* n_kv) {
    uint32_t magic, version;
    if (f->size_ < 24) {
      return DataLoss(f->path_ + ": file is " + std::to_string(f->size_) +
                      " bytes, shorter than the 24-byte GGUF header (truncated?)");
    }
    LUCID_RETURN_IF_ERROR(Read(&magic, "the magic"));
    if (magic != kMagic)
      return DataLoss(f->path_ + ": not a GGUF file (the magic is not \"GGUF\")");
    LUCID_RETURN_IF_ERROR(Read(&version, "the version"));
    if (version == 1)
      return Unimplemented(f->path_ + ": GGUF version 1 is not supported (only 2 and 3)");
    if (version == 0x02000000 || version == 0x03000000) {
      return Unimplemented(f->path_ + ": big-endian GGUF is not supported");
    }
    if (version != 2 && version != 3) {
      return Unimplemented(f->path_ + ": GGUF version " + std::to_string(version) +
                           " is not supported (only 2 and 3)");
    }
    f->version_ = version;
    LUCID_RETURN_IF_ERROR(Read(n_tensors, "the tensor count"));
    LUCID_RETURN_IF_ERROR(Read(n_kv, "the metadata count"));
    // Each metadata entry takes >= 8 + 4 + 1 bytes, each tensor info >= 8 + 4 + 8 + 4 + 8.
    if (*n_kv > Left() / 13)
      return Fail("metadata count " + std::to_string(*n_kv) + " cannot fit the file");
    if (*n_tensors > Left() / 32)
      return Fail("tensor count " + std::to_string(*n_tensors) + " cannot fit the file");
    return OkStatus();
  }

  Status ParseMetadata(uint64_t n_kv) {
    for (uint64_t k = 0; k < n_kv; ++k) {
      std::string key;
      LUCID_RETURN_IF_ERROR(ReadString(&key, "a metadata key"));
      uint32_t t;
      LUCID_RETURN_IF_ERROR(Read(&t, "a metadata value type"));
      if (!KnownValueType(t))
        return Fail("metadata " + Quote(key) + ": unknown value type " + std::to_string(t));
      GgufValue v;
      LUCID_RETURN_IF_ERROR(ReadValue(static_cast<GgufValueType>(t), &v, 0, key));
      if (!f->metadata_.emplace(key, std::move(v)).second)
        return Fail("metadata key " + Quote(key) + " appears twice");
    }
    if (const GgufValue* a = f->Find("general.alignment")) {
      if (!a->IsInteger() || a->type == GgufValueType::kI8 || a->type == GgufValueType::kI16 ||
          a->type == GgufValueType::kI32 || a->type == GgufValueType::kI64) {
        return DataLoss(f->path_ + ": general.alignment must be an unsigned integer, got " +
                        GgufValueTypeName(a->type));
      }
      if (a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 30)) {
        return DataLoss(f->path_ + ": general.alignment " + std::to_string(a->u) +
                        " is not a power of two");
      }
      f->alignment_ = a->u;
    }
    return OkStatus();
  }

  Status ParseTensorInfo(GgufTensorInfo* ti) {
    LUCID_RETURN_IF_ERROR(ReadString(&ti->name, "a tensor name"));
    const std::string where = "tensor " + Quote(ti->name);
    uint32_t rank, type;
    LUCID_RETURN_IF_ERROR(Read(&rank, "a tensor rank"));
    if (rank < 1 || rank > kMaxDims)
      return Fail(where + ": rank " + std::to_string(rank) + " is not 1..4");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      uint64_t n;
      LUCID_RETURN_IF_ERROR(Read(&n, "a tensor dimension"));
      if (n == 0 || n > (uint64_t{1} << 40) || numel > (uint64_t{1} << 50) / n) {
        return Fail(where + ": dimension " + std::to_string(n) + " is zero or too large");
      }
      numel *= n;
      ti->dims.push_back(static_cast<int64_t>(n));
    }
    ti->shape.assign(ti->dims.rbegin(), ti->dims.rend());
    LUCID_RETURN_IF_ERROR(Read(&type, "a tensor type"));
    auto traits = GgmlTypeInfo(type);
    if (!traits) return Fail(where + ": unknown ggml type id " + std::to_string(type));
    ti->type = static_cast<GgmlType>(type);
    if (ti->dims[0] % traits->block_elems != 0) {
      return Fail(where + ": row length " + std::to_string(ti->dims[0]) + " is not a multiple of " +
                  traits->name + "'s block of " + std::to_string(traits->block_elems));
    }
    ti->bytes = numel / traits->block_elems * traits->block_bytes;
    LUCID_RETURN_IF_ERROR(Read(&ti->offset, "a tensor offset"));
    if (ti->offset % f->alignment_ != 0) {
      return Fail(where + ": offset " + std::to_string(ti->offset) +
                  " is not a multiple of the alignment " + std::to_string(f->alignment_));
    }
    return OkStatus();
  }

  Status ParseTensors(uint64_t n_tensors) {
    std::vector<GgufTensorInfo> infos(n_tensors);
    for (auto& ti : infos) LUCID_RETURN_IF_ERROR(ParseTensorInfo(&ti));
    const uint64_t a = f->alignment_;
    const uint64_t start = (pos + a - 1) / a * a;
    if (n_tensors > 0 && start > f->size_)
      return Fail("the data section starts past the end of the file");
    f->data_start_ = std::min(start, f->size_);
    const uint64_t data_size = f->size_ - f->data_start_;
    std::vector<const GgufTensorInfo*> by_offset;
    for (auto& ti : infos) {
      if (ti.offset > data_size || ti.bytes > data_size - ti.offset) {
        return DataLoss(f->path_ + ": tensor " + Quote(ti.name) + " (" + std::to_string(ti.bytes) +
                        " bytes at offset " + std::to_string(ti.offset) +
                        ") runs past the end of the " + std::to_string(data_size) +
                        "-byte data section (truncated?)");
      }
      const std::string name = ti.name;
      f->order_.push_back(name);
      if (!f->tensors_.emplace(name, std::move(ti)).second) {
        return DataLoss(f->path_ + ": tensor name " + Quote(name) + " appears twice");
      }
    }
    for (const auto& [name, ti] : f->tensors_) by_offset.push_back(&ti);
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* x, auto* y) { return x->offset < y->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const auto* p = by_offset[k - 1];
      if (p->offset + p->bytes > by_offset[k]->offset) {
        return DataLoss(f->path_ + ": tensors " + Quote(p->name) + " and " +
                        Quote(by_offset[k]->name) + " overlap");
      }
    }
    return OkStatus();
  }

  Status Parse() {
    uint64_t n_tensors = 0, n_kv = 0;
    LUCID_RETURN_IF_ERROR(ParseHeader(&n_tensors, &n_kv));
    LUCID_RETURN_IF_ERROR(ParseMetadata(n_kv));
    return ParseTensors(n_tensors);
  }
};

StatusOr<std::shared_ptr<GgufFile>> GgufFile::Parse(const std::string& name, const uint8_t* data,
                                                    uint64_t size,
                                                    std::shared_ptr<const void> keepalive) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->base_ = data;
  f->size_ = size;
  f->keepalive_ = std::move(keepalive);
  GgufParser p{f.get()};
  LUCID_RETURN_IF_ERROR(p.Parse());
  return f;
}

StatusOr<std::shared_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open GGUF file " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPrecondition(path + ": not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return DataLoss(path + ": file is empty, not a GGUF file");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return ErrnoStatus(err, "cannot mmap " + path);
  std::shared_ptr<const void> keep(p,
                                   [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return Parse(path, static_cast<const uint8_t*>(p), size, std::move(keep));
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

Status WrongType(const std::string& path, const std::string& key, const char* want,
                 const GgufValue& v) {
  std::string got = GgufValueTypeName(v.type);
  if (v.type == GgufValueType::kArray) got += std::string(" of ") + GgufValueTypeName(v.elem_type);
  return InvalidArgument(path + ": metadata " + key + " must be " + want + ", got " + got);
}

bool AsUint(const GgufValue& v, uint64_t* out) {
  if (!v.IsInteger()) return false;
  if (v.type == GgufValueType::kI8 || v.type == GgufValueType::kI16 ||
      v.type == GgufValueType::kI32 || v.type == GgufValueType::kI64) {
    if (v.i < 0) return false;
    *out = static_cast<uint64_t>(v.i);
  } else {
    *out = v.u;
  }
  return true;
}

bool AsInt(const GgufValue& v, int64_t* out) {
  uint64_t u;
  if (v.type == GgufValueType::kI8 || v.type == GgufValueType::kI16 ||
      v.type == GgufValueType::kI32 || v.type == GgufValueType::kI64) {
    *out = v.i;
    return true;
  }
  if (!AsUint(v, &u) || u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return false;
  *out = static_cast<int64_t>(u);
  return true;
}

bool AsFloat(const GgufValue& v, double* out) {
  if (v.IsFloat()) {
    *out = v.f;
    return true;
  }
  int64_t i;
  if (v.type == GgufValueType::kU64) {
    *out = static_cast<double>(v.u);
    return true;
  }
  if (!AsInt(v, &i)) return false;
  *out = static_cast<double>(i);
  return true;
}

}  // namespace

#define LUCID_GGUF_FIND_(key)     \
  const GgufValue* v = Find(key); \
  if (v == nullptr) return NotFound(path_ + ": no metadata key " + key)

StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  if (v->type != GgufValueType::kString) return WrongType(path_, key, "a string", *v);
  return v->s;
}

StatusOr<uint64_t> GgufFile::GetUint(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  uint64_t u;
  if (!AsUint(*v, &u)) return WrongType(path_, key, "a non-negative integer", *v);
  return u;
}

StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  double d;
  if (!AsFloat(*v, &d)) return WrongType(path_, key, "a number", *v);
  return d;
}

StatusOr<bool> GgufFile::GetBool(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  if (v->type != GgufValueType::kBool) return WrongType(path_, key, "a bool", *v);
  return v->u != 0;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  if (v->type != GgufValueType::kArray || v->elem_type != GgufValueType::kString) {
    return WrongType(path_, key, "an array of string", *v);
  }
  std::vector<std::string> out;
  out.reserve(v->items.size());
  for (const auto& it : v->items) out.push_back(it.s);
  return out;
}

StatusOr<std::vector<double>> GgufFile::GetFloatArray(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  if (v->type != GgufValueType::kArray) return WrongType(path_, key, "an array of numbers", *v);
  std::vector<double> out(v->items.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (!AsFloat(v->items[k], &out[k])) return WrongType(path_, key, "an array of numbers", *v);
  }
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(const std::string& key) const {
  LUCID_GGUF_FIND_(key);
  if (v->type != GgufValueType::kArray) return WrongType(path_, key, "an array of integers", *v);
  std::vector<int64_t> out(v->items.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (!AsInt(v->items[k], &out[k])) return WrongType(path_, key, "an array of integers", *v);
  }
  return out;
}

#undef LUCID_GGUF_FIND_

StatusOr<const GgufTensorInfo*> GgufFile::Info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound(path_ + ": no tensor " + Quote(name));
  return &it->second;
}

StatusOr<Tensor> GgufFile::Get(const std::string& name) const {
  LUCID_ASSIGN_OR_RETURN(const GgufTensorInfo* ti, Info(name));
  auto* data = const_cast<uint8_t*>(TensorData(*ti));
  switch (ti->type) {
    case GgmlType::kF32:
      return Tensor::Borrow(DType::kF32, ti->shape, data, keepalive_);
    case GgmlType::kF16:
      return Tensor::Borrow(DType::kF16, ti->shape, data, keepalive_);
    case GgmlType::kBF16:
      return Tensor::Borrow(DType::kBF16, ti->shape, data, keepalive_);
    default:
      break;
  }
  if (!IsSupported(ti->type)) {
    return Unimplemented(
        path_ + ": tensor " + Quote(name) + " has ggml type " + GgmlTypeName(ti->type) +
        ", which lucid does not decode (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
        "Q4_K, Q5_K, Q6_K)");
  }
  Shape s = ti->shape;
  s.back() = GgmlRowBytes(ti->type, ti->dims[0]);
  return Tensor::Borrow(DType::kU8, s, data, keepalive_);
}

}  // namespace lucid
