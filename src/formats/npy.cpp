// NumPy .npy reader/writer: a little-endian, C-order subset of the format (versions 1.0-3.0).
#include "formats/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace lucid {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;                // numpy's ARRAY_ALIGN
constexpr size_t kGrowthAxisMaxDigits = 21;  // numpy's spare space for growing axis 0
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

struct NpyType {
  DType dtype;
  const char* descr;
};
constexpr NpyType kTypes[] = {{DType::kF32, "<f4"},
                              {DType::kF64, "<f8"},
                              {DType::kI32, "<i4"},
                              {DType::kI64, "<i8"},
                              {DType::kU8, "|u1"}};


// Closes the descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status ReadExact(int fd, void* dst, size_t n, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::read(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus(errno, "cannot read " + path);
    if (r == 0) return DataLoss(path + ": unexpected end of file");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return OkStatus();
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus(errno, "cannot write " + path);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

// A tiny parser for the Python dict literal numpy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  Status Parse(std::string* descr, bool* fortran, Shape* shape) {
    bool has_descr = false, has_fortran = false, has_shape = false;
    SkipWs();
    if (!Eat('{')) return Error("expected '{'");
    while (true) {
      SkipWs();
      if (Eat('}')) break;
      std::string key;
      LUCID_RETURN_IF_ERROR(String(&key));
      SkipWs();
      if (!Eat(':')) return Error("expected ':' after '" + key + "'");
      SkipWs();
      if (key == "descr" && !has_descr) {
        if (Peek() == '[') return Unimplemented(path_ + ": structured dtypes are not supported");
        LUCID_RETURN_IF_ERROR(String(descr));
        has_descr = true;
      } else if (key == "fortran_order" && !has_fortran) {
        if (Word("True")) {
          *fortran = true;
        } else if (Word("False")) {
          *fortran = false;
        } else {
          return Error("fortran_order must be True or False");
        }
        has_fortran = true;
      } else if (key == "shape" && !has_shape) {
        LUCID_RETURN_IF_ERROR(Tuple(shape));
        has_shape = true;
      } else {
        return Error("unexpected or repeated key '" + key + "'");
      }
      SkipWs();
      if (Eat(',')) continue;
      SkipWs();
      if (Eat('}')) break;
      return Error("expected ',' or '}'");
    }
    SkipWs();
    if (pos_ != s_.size()) return Error("trailing characters after the header dict");
    if (!has_descr || !has_fortran || !has_shape)
      return Error("header must have 'descr', 'fortran_order' and 'shape'");
    return OkStatus();
  }

 private:
  Status Error(const std::string& what) const {
    return DataLoss(path_ + ": bad .npy header at offset " + std::to_string(pos_) + ": " + what);
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c || pos_ >= s_.size()) return false;
    ++pos_;
    return true;
  }
  void SkipWs() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(pos_, n, w) != 0) return false;
    pos_ += n;
    return true;
  }
  Status String(std::string* out) {
    const char q = Peek();
    if (q != '\'' && q != '"') return Error("expected a quoted string");
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) return Error("unterminated string");
    *out = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return OkStatus();
  }
  Status Tuple(Shape* shape) {
    shape->clear();
    if (!Eat('(')) return Error("shape must be a tuple");
    while (true) {
      SkipWs();
      if (Eat(')')) return OkStatus();
      if (Peek() < '0' || Peek() > '9') return Error("shape entries must be non-negative integers");
      uint64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (__builtin_mul_overflow(v, uint64_t{10}, &v) ||
            __builtin_add_overflow(v, static_cast<uint64_t>(Peek() - '0'), &v) ||
            v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return Error("shape entry too large");
        ++pos_;
      }
      Eat('L');  // Python 2 long suffix
      shape->push_back(static_cast<int64_t>(v));
      SkipWs();
      if (Eat(')')) return OkStatus();
      if (!Eat(',')) return Error("expected ',' or ')' in shape");
    }
  }

  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

std::string ShapeRepr(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

Status WriteNpy(const std::string& path, const Tensor& t) {
  const std::string where = "WriteNpy(" + path + ")";
  const NpyType* type = nullptr;
  for (const auto& k : kTypes)
    if (k.dtype == t.dtype()) type = &k;
  if (type == nullptr) {
    return InvalidArgument(where + ": dtype " + DTypeName(t.dtype()) +
                           " is not supported (f32, f64, i32, i64, u8)");
  }
  if (!t.valid()) return InvalidArgument(where + ": tensor has no data");
  if (!t.is_contiguous()) return InvalidArgument(where + ": tensor is not contiguous");
  for (int64_t d : t.shape())
    if (d < 0)
      return InvalidArgument(where + ": negative dimension in " + ShapeToString(t.shape()));

  std::string dict = std::string("{'descr': '") + type->descr +
                     "', 'fortran_order': False, 'shape': " + ShapeRepr(t.shape()) + ", }";
  if (!t.shape().empty()) {  // numpy leaves room to grow axis 0 in place
    const size_t digits = std::to_string(t.shape()[0]).size();
    dict.append(kGrowthAxisMaxDigits > digits ? kGrowthAxisMaxDigits - digits : 0, ' ');
  }
  // Version 1.0 has a u16 header length; numpy switches to 2.0 (u32) when it overflows.
  size_t len_bytes = 2;
  size_t total = kMagicLen + 2 + len_bytes + dict.size() + 1;
  total = (total + kAlign - 1) / kAlign * kAlign;
  if (total - kMagicLen - 2 - len_bytes > 0xFFFF) {
    len_bytes = 4;
    total = (kMagicLen + 2 + len_bytes + dict.size() + 1 + kAlign - 1) / kAlign * kAlign;
  }
  const size_t hlen = total - kMagicLen - 2 - len_bytes;
  std::string head(kMagic, kMagicLen);
  head.push_back(static_cast<char>(len_bytes == 2 ? 1 : 2));
  head.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i)
    head.push_back(static_cast<char>((hlen >> (8 * i)) & 0xFF));
  head += dict;
  head.append(total - head.size() - 1, ' ');
  head.push_back('\n');

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, where + ": cannot create " + tmp);
  Status s = WriteAll(fd, head.data(), head.size(), tmp);
  if (s.ok() && t.nbytes() > 0) s = WriteAll(fd, t.raw(), t.nbytes(), tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(errno, where + ": cannot close " + tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoStatus(errno, where + ": cannot rename " + tmp + " to " + path);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

StatusOr<Tensor> ReadNpy(const std::string& path) {
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return ErrnoStatus(errno, "cannot open .npy file " + path);
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) return ErrnoStatus(errno, "cannot stat " + path);
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kMagicLen + 4)
    return DataLoss(path + ": " + std::to_string(size) + " bytes is too short for a .npy file");
  uint8_t pre[kMagicLen + 2];
  LUCID_RETURN_IF_ERROR(ReadExact(fd.fd, pre, sizeof(pre), path));
  if (std::memcmp(pre, kMagic, kMagicLen) != 0) return DataLoss(path + ": not a .npy file");
  const int major = pre[kMagicLen], minor = pre[kMagicLen + 1];
  if (major < 1 || major > 3 || minor != 0) {
    return Unimplemented(path + ": unsupported .npy format version " + std::to_string(major) + "." +
                         std::to_string(minor));
  }
  const size_t len_bytes = major == 1 ? 2 : 4;
  uint8_t lb[4] = {0, 0, 0, 0};
  LUCID_RETURN_IF_ERROR(ReadExact(fd.fd, lb, len_bytes, path));
  const uint64_t hlen = lb[0] | (lb[1] << 8) | (uint64_t{lb[2]} << 16) | (uint64_t{lb[3]} << 24);
  const uint64_t data_start = kMagicLen + 2 + len_bytes + hlen;
  if (hlen > kMaxHeaderBytes || data_start > size) {
    return DataLoss(path + ": header length " + std::to_string(hlen) + " exceeds the file (" +
                    std::to_string(size) + " bytes)");
  }
  std::string text(hlen, '\0');
  LUCID_RETURN_IF_ERROR(ReadExact(fd.fd, text.data(), hlen, path));
  std::string descr;
  bool fortran = false;
  Shape shape;
  LUCID_RETURN_IF_ERROR(HeaderParser(text, path).Parse(&descr, &fortran, &shape));
  const NpyType* type = nullptr;
  for (const auto& k : kTypes)
    if (descr == k.descr || (k.dtype == DType::kU8 && (descr == "<u1" || descr == "=u1")))
      type = &k;
  if (type == nullptr) {
    return Unimplemented(path + ": dtype '" + descr +
                         "' is not supported (little-endian f4, f8, i4, i8 or u1)");
  }
  if (fortran) return Unimplemented(path + ": Fortran-order arrays are not supported");
  uint64_t numel = 1, bytes = 0;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      return DataLoss(path + ": shape " + ShapeToString(shape) + " is too large");
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeBits(type->dtype) / 8), &bytes))
    return DataLoss(path + ": shape " + ShapeToString(shape) + " is too large");
  if (bytes != size - data_start) {
    return DataLoss(path + ": shape " + ShapeToString(shape) + " of '" + descr + "' needs " +
                    std::to_string(bytes) + " data bytes, the file has " +
                    std::to_string(size - data_start));
  }
  Tensor t = Tensor::Empty(type->dtype, shape);
  LUCID_RETURN_IF_ERROR(ReadExact(fd.fd, t.raw(), bytes, path));
  return t;
}

}  // namespace lucid
