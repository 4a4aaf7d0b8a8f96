#pragma once
// Status and Result<T>: errors are values.
//
// The codes are a small subset of gRPC's, so that they map 1:1 to gRPC status
// codes and to HTTP status codes (see HttpStatusFor). Messages are lower-case
// and name the thing: "job 'j-000042' not found".

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace drover {

enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kUnauthenticated = 16,
};

const char* CodeName(Code code);
int HttpStatusFor(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "not found: job 'j-1' not found"
  std::string ToString() const;
  // Drops this status on purpose; `why` says why no error here can matter
  // (the model: RocksDB's PermitUncheckedError). Never a bare (void) cast:
  //   dir.WriteExit(e).IgnoreError("best effort: the caller reports the exit itself");
  void IgnoreError(const char* why) const { static_cast<void>(why); }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }

// Result<T>: a T or a non-OK Status. GCC 12 has no std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::move(v)) {}                // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // Drops the value or the error on purpose; see Status::IgnoreError.
  void IgnoreError(const char* why) const { static_cast<void>(why); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace drover

// Propagates a non-OK Status from an expression returning Status.
#define DROVER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::drover::Status drover_status_ = (expr);        \
    if (!drover_status_.ok()) return drover_status_; \
  } while (0)

#define DROVER_CONCAT_INNER(a, b) a##b
#define DROVER_CONCAT(a, b) DROVER_CONCAT_INNER(a, b)
// DROVER_ASSIGN_OR_RETURN(auto x, F()); declares x from a Result or returns its Status.
#define DROVER_ASSIGN_OR_RETURN(lhs, expr) \
  DROVER_ASSIGN_OR_RETURN_IMPL(DROVER_CONCAT(drover_result_, __LINE__), lhs, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): tmp is a name and lhs a declaration
#define DROVER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
