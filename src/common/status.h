// Status and Result<T>: the one cheap error type used across Tessera's modules.
//
// Errors never cross a module boundary as exceptions. A Status is either OK (costs one enum)
// or carries a code and a message meant for a person: it names what is wrong. Result<T> holds
// a value or a non-OK Status.
//
// Both are [[nodiscard]]: an error is handled, passed up or logged, never dropped by accident.
// Where dropping one is meant, the call site says why (a comment next to a cast to void, or a log
// line).
//
// Thread-safety: value types, no shared state.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tessera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // malformed input: a bad quantity, an unknown name, a broken file
  kNotFound,            // a named thing does not exist
  kFailedPrecondition,  // the request is well formed but the current state forbids it
  kResourceExhausted,   // no room: the request cannot be satisfied with what is there
  kUnauthenticated,     // no or unknown credentials
  kPermissionDenied,    // known caller, not allowed to do this
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard("a Status is an error to handle, pass up or log")]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "ok".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or an error. REQUIRES: value() only when ok().
template <typename T>
class [[nodiscard("a Result may hold an error to handle, pass up or log")]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result built from an OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T& value()& {
    assert(ok());
    return *value_;
  }
  T&& value()&& {
    assert(ok());
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*()& { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tessera
