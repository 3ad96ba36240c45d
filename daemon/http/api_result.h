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

template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  // value() and error() abort when called on the other alternative.
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const ApiError& error() const { return std::get<ApiError>(v_); }
  ApiError& error() { return std::get<ApiError>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, ApiError> v_;
};

// Ok (default-constructed) or an ApiError.
template <>
class ApiResult<void> {
 public:
  ApiResult() = default;
  ApiResult(ApiError error) : ok_(false), error_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return ok_; }
  const ApiError& error() const { return checked_error(); }
  ApiError& error() { return const_cast<ApiError&>(checked_error()); }

 private:
  const ApiError& checked_error() const {
    if (ok_) {
      std::fprintf(stderr, "ApiResult<void>::error() called on an ok result\n");
      std::abort();
    }
    return error_;
  }
  bool ok_ = true;
  ApiError error_;
};

}  // namespace prefixd
