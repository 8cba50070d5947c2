#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvgov {

/// The closed set of error categories every kvgov library call can report.
/// Codes say what kind of failure happened; the message says what and where.
enum class StatusCode {
  kOk,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kConflict,
  kCorruption,
  kIOError,
  kUnavailable,
  kUnauthenticated,
  kPermissionDenied,
  kResourceExhausted,
  kDeadlineExceeded,
  kCancelled,
  kInternal,
};

/// Stable lowercase spelling of a code ("invalid_argument"), used in logs and
/// in HTTP error bodies.
std::string_view StatusCodeName(StatusCode code);

/// A value-type error: a code plus a human-readable message naming what is
/// wrong. Success carries no message. Cheap to copy; immutable; thread-safe as
/// any value type.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status AlreadyExists(std::string msg) {
    return Status(StatusCode::kAlreadyExists, std::move(msg));
  }
  static Status FailedPrecondition(std::string msg) {
    return Status(StatusCode::kFailedPrecondition, std::move(msg));
  }
  static Status Conflict(std::string msg) { return Status(StatusCode::kConflict, std::move(msg)); }
  static Status Corruption(std::string msg) {
    return Status(StatusCode::kCorruption, std::move(msg));
  }
  static Status IOError(std::string msg) { return Status(StatusCode::kIOError, std::move(msg)); }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }
  static Status Unauthenticated(std::string msg) {
    return Status(StatusCode::kUnauthenticated, std::move(msg));
  }
  static Status PermissionDenied(std::string msg) {
    return Status(StatusCode::kPermissionDenied, std::move(msg));
  }
  static Status ResourceExhausted(std::string msg) {
    return Status(StatusCode::kResourceExhausted, std::move(msg));
  }
  static Status DeadlineExceeded(std::string msg) {
    return Status(StatusCode::kDeadlineExceeded, std::move(msg));
  }
  static Status Cancelled(std::string msg) { return Status(StatusCode::kCancelled, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// "invalid_argument: $.plane: unknown value 'x'"; "ok" for success.
  std::string ToString() const;

  /// The same status with "context: " put before the message, for callers
  /// that add where an error happened as it travels up. OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// Either a T or a non-OK Status. Constructing a Result from an OK Status is a
/// programming error and is turned into an Internal error rather than UB.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)                           // NOLINT(google-explicit-constructor)
      : state_(status.ok() ? Status::Internal("Result constructed from an OK status")
                           : std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(state_); }

  /// OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }

  /// REQUIRES: ok().
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace kvgov

#define KVGOV_STATUS_CONCAT_INNER_(a, b) a##b
#define KVGOV_STATUS_CONCAT_(a, b) KVGOV_STATUS_CONCAT_INNER_(a, b)

/// Returns the status from the enclosing function when `expr` is not OK.
#define KVGOV_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::kvgov::Status kvgov_status_ = (expr);         \
    if (!kvgov_status_.ok()) return kvgov_status_;  \
  } while (false)

/// `KVGOV_ASSIGN_OR_RETURN(auto x, Foo());` binds the value or returns the
/// error from the enclosing function.
#define KVGOV_ASSIGN_OR_RETURN(lhs, expr) \
  KVGOV_ASSIGN_OR_RETURN_IMPL_(KVGOV_STATUS_CONCAT_(kvgov_result_, __LINE__), lhs, expr)
#define KVGOV_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                 \
  if (!result.ok()) return result.status();             \
  lhs = std::move(result).value()
