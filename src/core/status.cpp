#include "tensorhub/status.hpp"

namespace tensorhub {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kVerifyFailed: return "verification failed";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kAlreadyExists: return "already exists";
    case StatusCode::kPermissionDenied: return "permission denied";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kAborted: return "aborted";
  }
  return "unknown";
}

std::string_view status_code_id(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kVerifyFailed: return "verify_failed";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kAborted: return "aborted";
  }
  return "internal";
}

StatusCode status_code_from_id(std::string_view id) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kAborted); ++c) {
    if (status_code_id(static_cast<StatusCode>(c)) == id) return static_cast<StatusCode>(c);
  }
  return StatusCode::kInternal;
}

Status::Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
  // One line, always: a newline would break CLIs and logs that print it.
  for (char& c : message_) {
    if (c == '\n' || c == '\r') c = ' ';
  }
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string out(status_code_name(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

}  // namespace tensorhub
