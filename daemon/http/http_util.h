// Small helpers shared by the HTTP handlers: JSON and error answers, and
// response ids.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "daemon/http/api_error.h"

namespace prefixd {

inline void send_json(httplib::Response& res, const nlohmann::json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

inline void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.to_json(), e.status);
}

// "prefix-" followed by 24 random hex digits.
inline std::string make_response_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  id += '-';
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

}  // namespace prefixd
