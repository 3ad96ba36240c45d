// Refusals before the body is read, and the answer that closes the
// connection (see request_bounds.h).
#include "daemon/http/request_bounds.h"

#include <cctype>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

namespace prefixd {
namespace {

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// A header value as it may appear in a message (values are up to 8 KiB).
std::string quoted(const std::string& value) {
  return "'" + (value.size() <= 64 ? value : value.substr(0, 64) + "...") + "'";
}

// ApiError has factories for the statuses handlers answer; 405 and 411 are
// answered only here.
ApiError refusal(int status, std::string message, std::string code) {
  ApiError e = ApiError::from_status(status);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// The request's Content-Length: nullopt when absent, -1 when it is not one
// decimal number (every copy of the header the same), saturating at INT64_MAX.
std::optional<int64_t> content_length(const httplib::Request& req) {
  const size_t n = req.get_header_value_count("Content-Length");
  if (n == 0) return std::nullopt;
  int64_t first = -1;
  for (size_t i = 0; i < n; ++i) {
    const std::string v = lower_trimmed(req.get_header_value("Content-Length", i));
    if (v.empty()) return -1;
    int64_t len = 0;
    for (char ch : v) {
      if (ch < '0' || ch > '9') return -1;
      const int64_t digit = ch - '0';
      len = len > (std::numeric_limits<int64_t>::max() - digit) / 10
                ? std::numeric_limits<int64_t>::max()
                : len * 10 + digit;
    }
    if (i > 0 && len != first) return -1;
    first = len;
  }
  return first;
}

// httplib inflates gzip, deflate and br bodies before any reader sees them:
// only "identity" is accepted.
ApiResult<void> check_content_encoding(const httplib::Request& req) {
  for (size_t i = 0; i < req.get_header_value_count("Content-Encoding"); ++i) {
    const std::string encoding = req.get_header_value("Content-Encoding", i);
    if (lower_trimmed(encoding) != "identity") {
      return ApiError::unsupported_media_type("Content-Encoding " + quoted(encoding) +
                                              " is not accepted: send the request body "
                                              "uncompressed, without a Content-Encoding header");
    }
  }
  return {};
}

// How the body is framed: Transfer-Encoding "chunked" alone, or one
// Content-Length (*length; repeats must agree), never both.
ApiResult<void> check_framing(const httplib::Request& req, std::optional<int64_t>* length) {
  // httplib takes a body as chunked only when the first Transfer-Encoding is
  // exactly "chunked"; any other value would be read until the connection ends.
  const size_t n_transfer_encodings = req.get_header_value_count("Transfer-Encoding");
  const bool chunked = n_transfer_encodings > 0;
  if (n_transfer_encodings > 1 ||
      (chunked && lower_trimmed(req.get_header_value("Transfer-Encoding")) != "chunked")) {
    return ApiError::bad_request(
        "",
        "Transfer-Encoding " + quoted(req.get_header_value("Transfer-Encoding")) +
            " is not accepted: send the body with a Content-Length, or as 'chunked' alone",
        "unsupported_transfer_encoding");
  }
  *length = content_length(req);
  if (*length && **length < 0) {
    return ApiError::bad_request(
        "",
        "Content-Length " + quoted(req.get_header_value("Content-Length")) + " is not one number",
        "invalid_content_length");
  }
  if (*length && chunked) {
    return ApiError::bad_request("",
                                 "a request may not have both Content-Length and Transfer-Encoding",
                                 "conflicting_body_length");
  }
  return {};
}

// Whether `endpoint`, read as `use`, takes the body the request carries
// (with a Content-Length when has_length).
ApiResult<void> check_body_use(const std::string& endpoint, BodyUse use, bool has_length,
                               int64_t max_body_bytes) {
  switch (use) {
    case BodyUse::kNoRoute:
    case BodyUse::kGetOnly:  // (GET and HEAD on its path are kNone)
      return ApiError::not_found("", "no endpoint " + endpoint);
    case BodyUse::kNone:
      return ApiError::bad_request("", endpoint + " takes no request body; it was not read",
                                   "body_not_allowed");
    case BodyUse::kHttplib:
      if (!has_length) {
        return refusal(411,
                       endpoint + " needs a Content-Length of at most " +
                           std::to_string(max_body_bytes) +
                           " bytes: a chunked body, or one without a length, is not accepted here",
                       "length_required");
      }
      break;
    case BodyUse::kStreamed:
      break;
  }
  return {};
}

}  // namespace

ApiResult<void> check_request_bounds(const httplib::Request& req, BodyUse use,
                                     int64_t max_body_bytes) {
  if (ApiResult<void> r = check_content_encoding(req); !r.ok()) return r;
  if (use == BodyUse::kGetOnly && req.method != "GET" && req.method != "HEAD") {
    return refusal(405, req.path + " answers GET and HEAD only", "method_not_allowed");
  }
  std::optional<int64_t> length;
  if (ApiResult<void> r = check_framing(req, &length); !r.ok()) return r;
  if (!carries_body(req)) return {};
  const std::string endpoint = req.method + " " + req.path;
  if (ApiResult<void> r = check_body_use(endpoint, use, length.has_value(), max_body_bytes); !r.ok())
    return r;
  if (length && *length > max_body_bytes) return ApiError::payload_too_large(max_body_bytes);
  return {};
}

bool carries_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  if (req.has_header("Content-Length")) return content_length(req) != 0;
  // httplib reads a POST, PUT, PATCH or PRI without either header until the
  // connection ends (a DELETE without Content-Length it does not read).
  return req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
         req.method == "PRI";
}

void send_error_closing(httplib::Response& res, const ApiError& e) {
  auto body = std::make_shared<const std::string>(
      e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  res.status = e.status;
  res.body.clear();
  res.set_header("Connection", "close");
  res.set_content_provider(body->size(), "application/json",
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
                             return false;  // written: now make httplib close the connection
                           });
}

bool is_closing_answer(const httplib::Response& res) {
  return res.content_provider_ != nullptr && res.get_header_value("Connection") == "close";
}

}  // namespace prefixd
