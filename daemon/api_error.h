// ApiError: an HTTP error answer in the OpenAI shape
// {"error": {"message", "type", "param", "code"}} with its status code.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace prefixd {

struct ApiError {
  int status = 400;  // HTTP status
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> null
  std::string code;   // empty -> null

  nlohmann::json to_json() const {
    nlohmann::json e;
    e["message"] = message;
    e["type"] = type;
    e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
    e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
    return nlohmann::json{{"error", e}};
  }

  static ApiError invalid(std::string message, std::string param = "", std::string code = "") {
    return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                    std::move(code)};
  }
};

}  // namespace prefixd
