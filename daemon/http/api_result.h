// ApiResult<T>: the daemon's one idiom for "a value or an ApiError", and
// ApiResult<void> for "ok or an ApiError" (a check). Request parsing,
// validation and the handlers return these; a failure is an answer to the
// client (4xx/5xx), never an exception.
//
// Which idiom is used where: daemon/ code that answers a request uses
// ApiResult. Where daemon/ calls engine/, storage/ or common/ code, that code
// returns the lower floors' Status / Result<T> (common/result.h), which the
// daemon turns into an ApiError (or a startup error) at the call.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <variant>

#include "daemon/http/api_error.h"

namespace prefixd {

// Reading the alternative a result does not hold is a broken invariant: it
// aborts with a message (STYLE.md rule 5), as ApiResult<void>::error() does.
inline void api_result_check(bool holds, const char* what) {
  if (!holds) {
    std::fprintf(stderr, "ApiResult: %s called on the other alternative\n", what);
    std::abort();
  }
}

template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  T& value() & { return *value_of(*this); }
  const T& value() const& { return *value_of(*this); }
  T&& value() && { return std::move(*value_of(*this)); }
  ApiError& error() { return *error_of(*this); }
  const ApiError& error() const { return *error_of(*this); }
  T* operator->() { return value_of(*this); }
  const T* operator->() const { return value_of(*this); }

 private:
  // The held alternative of a const or non-const result (aborts on the other).
  template <class Self>
  static auto* value_of(Self& self) {
    api_result_check(self.ok(), "value()");
    return std::get_if<T>(&self.v_);
  }
  template <class Self>
  static auto* error_of(Self& self) {
    api_result_check(!self.ok(), "error()");
    return std::get_if<ApiError>(&self.v_);
  }
  std::variant<T, ApiError> v_;
};

// Ok (default-constructed) or an ApiError.
template <>
class ApiResult<void> {
 public:
  ApiResult() = default;
  ApiResult(ApiError error) : ok_(false), error_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return ok_; }
  const ApiError& error() const {
    api_result_check(!ok_, "error()");
    return error_;
  }
  ApiError& error() {
    api_result_check(!ok_, "error()");
    return error_;
  }

 private:
  bool ok_ = true;
  ApiError error_;
};

}  // namespace prefixd
