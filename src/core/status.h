// Status and StatusOr<T>: the error currency at every module boundary.
//
// A Status is OK or carries a code and a human-readable message that names what was wrong (a file,
// a tensor, a flag). Functions that can fail return Status or StatusOr<T>; both are [[nodiscard]].
// Exceptions are not used for control flow; internal invariants use LUCID_CHECK (aborts).
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace lucid {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kDataLoss,       // corrupt or truncated file contents
  kUnimplemented,  // valid input that this build does not support
  kFailedPrecondition,
  kResourceExhausted,
  kInternal,
  kUnavailable,
  kCancelled,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message" (keeps the code). OK stays OK.
  Status WithContext(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Holds either a T or a non-OK Status. Accessing value() of an error aborts (a programming error).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& s) : status_(s) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("StatusOr constructed from OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { CheckOk(); return *value_; }
  const T& value() const& { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    if (!status_.ok()) {
      std::fprintf(stderr, "StatusOr::value() on error: %s\n", status_.ToString().c_str());
      std::abort();
    }
  }
  Status status_;
  std::optional<T> value_;
};

// A Status for a failed system call: "what: strerror(err)", with a code that fits the errno
// (ENOENT -> NotFound, permission and not-a-file errors -> FailedPrecondition, no space or memory ->
// ResourceExhausted, anything else Internal).
Status ErrnoStatus(int err, const std::string& what);

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace lucid

#define LUCID_CONCAT_INNER_(a, b) a##b
#define LUCID_CONCAT_(a, b) LUCID_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define LUCID_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::lucid::Status lucid_status_ = (expr);         \
    if (!lucid_status_.ok()) return lucid_status_;  \
  } while (0)

// `LUCID_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr or returns its error.
#define LUCID_ASSIGN_OR_RETURN(lhs, rexpr) \
  LUCID_ASSIGN_OR_RETURN_IMPL_(LUCID_CONCAT_(lucid_statusor_, __LINE__), lhs, rexpr)
#define LUCID_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                 \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

// Internal invariant: aborts with a message when false. Not for validating input.
#define LUCID_CHECK(cond, ...) \
  ((cond) ? (void)0 : ::lucid::CheckFailed(__FILE__, __LINE__, #cond, std::string(__VA_ARGS__)))
