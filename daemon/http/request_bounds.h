// What a request may carry before its body is read: the checks, run before
// routing and before the API key, that keep each request's memory bounded
// whatever route it names (daemon/api.md, "Request limits").
//
// Why they are needed (cpp-httplib 0.11.4, read in its Server::routing and
// detail::read_content): after the pre-routing handler, httplib reads the body
// of every POST, PUT, PATCH and DELETE that has no streaming (content reader)
// handler into a std::string before routing: unknown paths, /health, the
// kHttplibBody routes. Only a Content-Length is held to --max-body-bytes
// (set_payload_max_length); a chunked body, or one with neither
// Content-Length nor Transfer-Encoding (read until the connection ends), is
// read whole, and gzip/deflate/br bodies are inflated first (about 1000:1).
// The body of a GET, HEAD or chunked DELETE is not read at all and would be
// parsed as the next request. What the checks cannot bound (a request or
// header line without '\n', any number of 8 KiB header lines) is read before
// they run; ops/haproxy/ bounds it.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <optional>

#include "daemon/http/api_result.h"

namespace prefixd {

// How the route a request names (its method and path) takes a body.
enum class BodyUse : uint8_t {
  kNoRoute,   // no route has this method and path (404)
  kGetOnly,   // the path is served by GET (and HEAD) only and says so (405): /health
  kNone,      // a GET, HEAD or DELETE route: it takes no body
  kHttplib,   // a kHttplibBody route: httplib reads the whole body into memory
  kStreamed,  // read through read_body, which stops at --max-body-bytes
};

// Ok when the request may go on (to the key check and its route), else
// its refusal, checked in this order:
//   - a Content-Encoding other than `identity`: 415 (the API takes none);
//   - kGetOnly and a method other than GET or HEAD: 405;
//   - a Transfer-Encoding other than `chunked`, a Content-Length that is not
//     one number, or both headers at once (request smuggling): 400;
//   - a body (carries_body): kNoRoute 404, kNone 400 `body_not_allowed`,
//     kHttplib 411 unless it has a Content-Length; a Content-Length above
//     `max_body_bytes`: 413.
// A refusal leaves the body unread: when carries_body(req), send it with
// send_error_closing.
ApiResult<void> check_request_bounds(const httplib::Request& req, BodyUse use,
                                     int64_t max_body_bytes);

// Whether `req` has a body httplib would read, or leave on the connection: a
// Content-Length other than 0, any Transfer-Encoding, or a POST, PUT, PATCH
// (or PRI) with neither (httplib reads it until the connection ends).
bool carries_body(const httplib::Request& req);

// Sends `e` and closes the connection once the answer is written, so that a
// body left unread (or read in part) is never parsed as the next request.
// httplib 0.11.4 ignores a `Connection: close` a handler sets; it closes when
// a content provider fails, so the answer goes out through one that writes the
// whole JSON error and then reports failure. A HEAD answer has no body: httplib
// keeps that connection open.
void send_error_closing(httplib::Response& res, const ApiError& e);

// Whether `res` was made by send_error_closing (httplib's error handler and
// post-routing handler must keep it as it is).
bool is_closing_answer(const httplib::Response& res);

}  // namespace prefixd
