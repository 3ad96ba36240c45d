// ApiError: an HTTP error answer in the OpenAI shape
// {"error": {"message", "type", "param", "code"}} with its status code, or,
// on the Anthropic routes (/v1/messages...), in Anthropic's shape
// {"type": "error", "error": {"type", "message"}} (in_dialect_of).
// Handlers build one with the named factory of its status (bad_request,
// not_found, too_many_requests, ...), never field by field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace prefixd {

// Which API's error shape an answer takes.
enum class ErrorDialect : uint8_t { kOpenAI, kAnthropic };

// Anthropic's error type for an HTTP status (invalid_request_error,
// authentication_error, permission_error, not_found_error,
// request_too_large, rate_limit_error, api_error, overloaded_error).
inline const char* anthropic_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

// The routes that answer in Anthropic's shape: /v1/messages and below.
inline bool is_anthropic_path(std::string_view path) {
  return path == "/v1/messages" || path.starts_with("/v1/messages/");
}

struct ApiError {
  int status = 400;  // HTTP status
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> null
  std::string code;   // empty -> null
  ErrorDialect dialect = ErrorDialect::kOpenAI;

  nlohmann::json to_json() const {
    if (dialect == ErrorDialect::kAnthropic) {
      // The field (param) leads the message, as Anthropic writes it.
      return nlohmann::json{
          {"type", "error"},
          {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
    }
    nlohmann::json e;
    e["message"] = message;
    e["type"] = type;
    e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
    e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
    return nlohmann::json{{"error", e}};
  }

  // This error in the shape of the API that `path` belongs to.
  ApiError in_dialect_of(std::string_view path) const {
    ApiError e = *this;
    e.dialect = is_anthropic_path(path) ? ErrorDialect::kAnthropic : ErrorDialect::kOpenAI;
    return e;
  }

  // 400: the body or a field of it (`param`, empty when the whole body) is wrong.
  static ApiError bad_request(std::string param, std::string message, std::string code = "") {
    return make(400, "invalid_request_error", std::move(param), std::move(message),
                std::move(code));
  }
  // 401: no API key, or the wrong one.
  static ApiError unauthorized(std::string message) {
    return make(401, "authentication_error", "", std::move(message), "invalid_api_key");
  }
  // 404: no such endpoint, model or tracked prefix.
  static ApiError not_found(std::string param, std::string message,
                            std::string code = "not_found") {
    return make(404, "invalid_request_error", std::move(param), std::move(message),
                std::move(code));
  }
  // 409: the request was valid but the engine refused it (pin_failed, unpin_failed).
  static ApiError conflict(std::string param, std::string message, std::string code) {
    return make(409, "invalid_request_error", std::move(param), std::move(message),
                std::move(code));
  }
  // 413: the body is larger than --max-body-bytes.
  static ApiError forbidden(std::string message, std::string code) {
    return make(403, "permission_error", "", std::move(message), std::move(code));
  }

  static ApiError misdirected(std::string message) {
    return make(421, "invalid_request_error", "", std::move(message), "host_not_allowed");
  }

  static ApiError payload_too_large(int64_t limit_bytes) {
    return make(
        413, "invalid_request_error", "",
        "the request body is larger than the limit of " + std::to_string(limit_bytes) + " bytes",
        "request_too_large");
  }
  // 415: a body that is not JSON text (multipart).
  static ApiError unsupported_media_type(std::string message) {
    return make(415, "invalid_request_error", "", std::move(message), "unsupported_media_type");
  }
  // 429: the admission gate is full (queue_full), or a tenant's limit is
  // reached (daemon/auth/tenant_limits.h); the caller sets Retry-After.
  static ApiError too_many_requests(std::string message, std::string code = "queue_full") {
    return make(429, "rate_limit_error", "", std::move(message), std::move(code));
  }
  // 500: the engine failed the request, or a handler threw.
  static ApiError internal_error(std::string message) {
    return make(500, "server_error", "", std::move(message), "");
  }
  // 503: the server is shutting down (code "shutting_down"; empty -> null).
  static ApiError service_unavailable(std::string message, std::string code = "shutting_down") {
    return make(503, "unavailable", "", std::move(message), std::move(code));
  }
  // Any other status httplib answered by itself: "HTTP error N".
  static ApiError from_status(int status) {
    return make(status, status >= 500 ? "server_error" : "invalid_request_error", "",
                "HTTP error " + std::to_string(status), "");
  }

 private:
  static ApiError make(int status, std::string type, std::string param, std::string message,
                       std::string code) {
    ApiError e;
    e.status = status;
    e.message = std::move(message);
    e.type = std::move(type);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
  }
};

}  // namespace prefixd
