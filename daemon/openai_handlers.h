// The OpenAI-compatible generation endpoints: POST /v1/completions and
// POST /v1/chat/completions, plain JSON or server-sent events. Handlers run
// on HTTP worker threads: they validate, submit to the engine and read the
// request's channel; they never touch the model.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "daemon/daemon_context.h"
#include "engine/request.h"

namespace prefixd {

// Answers one generation request (chat selects the endpoint's shapes).
// Streaming answers keep a reference to `ctx`, which must outlive the server.
void handle_generation(DaemonContext& ctx, const httplib::Request& req, httplib::Response& res,
                       bool chat);

// The `usage` and `prefix_cache` objects of a response.
nlohmann::json usage_json(const Usage& u);
nlohmann::json prefix_cache_json(const Usage& u);

}  // namespace prefixd
