// JSON and error answers on an httplib::Response (the route table's own
// answers; handlers answer through Reply, daemon/http/reply.h).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <nlohmann/json.hpp>
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

}  // namespace prefixd
