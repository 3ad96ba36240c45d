// The Anthropic Messages API: POST /v1/messages (one JSON message, or
// Anthropic's server-sent event sequence) and /v1/messages/count_tokens.
// Same engine, keys, tenants and limits as the OpenAI routes; errors in
// Anthropic's shape. After an answer, each cache breakpoint's prefix is
// pinned for its TTL (daemon/api/ttl_pins.h) and the usage says what was read
// and written (daemon/api.md, "Anthropic Messages").
#pragma once

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"
#include "daemon/http/reply.h"

namespace prefixd {

// Streaming answers keep a reference to `ctx`, which must outlive the server.
void handle_messages(DaemonContext& ctx, const Call& call, Reply& res);
void handle_count_tokens(DaemonContext& ctx, const Call& call, Reply& res);

}  // namespace prefixd
