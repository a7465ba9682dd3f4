// The one error type of TensorHub.
//
// Every fallible operation returns a Status, or a Result<T> that holds either a
// T or a non-ok Status. A Status carries a coarse code, for programs to branch
// on, and a one-line message, for people to read. Messages never end with a
// newline and never span lines: a CLI prints them as they are.
//
// Nothing in the library throws across its public API.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tensorhub {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller passed something unusable
  kCorrupt,           // bytes that do not decode: malformed, truncated, out of bounds
  kVerifyFailed,      // well-formed, but a hash, signature or chain check failed
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,  // including key files that others can read
  kIoError,
  kUnavailable,       // no peer can serve it (now)
  kTimeout,
  kCancelled,
  kInternal,
  kResourceExhausted,  // a limit of this peer would be crossed (the message names it)
  kAborted,            // work of several peers cannot complete (a group's commit: the message names the ranks)
};

std::string_view status_code_name(StatusCode code);
// The code as an identifier, for programs: "invalid_argument", "io_error",
// ... (what the control protocol's "code" and Python's Error.code carry).
std::string_view status_code_id(StatusCode code);
// The code an identifier names; kInternal for one that names none.
StatusCode status_code_from_id(std::string_view id);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message);

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
  static Status verify_failed(std::string m) { return {StatusCode::kVerifyFailed, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status already_exists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status permission_denied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "corrupt: manifest truncated at byte 12"; "ok" for success.
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(state_).is_ok() && "a Result holding a Status must hold an error");
  }

  bool is_ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return is_ok(); }

  // REQUIRES: is_ok()
  T& value() & { assert(is_ok()); return std::get<T>(state_); }
  const T& value() const& { assert(is_ok()); return std::get<T>(state_); }
  T&& value() && { assert(is_ok()); return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // The value, or `fallback` when this holds an error.
  T value_or(T fallback) const& { return is_ok() ? value() : std::move(fallback); }

  // The error, or ok when a value is held. The reference lives as long as
  // this Result.
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(state_);
  }

 private:
  std::variant<T, Status> state_;
};

}  // namespace tensorhub

// Returns early from the enclosing function when `expr` yields a non-ok Status.
#define TENSORHUB_RETURN_IF_ERROR(expr)            \
  do {                                             \
    ::tensorhub::Status tensorhub_status_ = (expr); \
    if (!tensorhub_status_.is_ok()) return tensorhub_status_; \
  } while (0)
