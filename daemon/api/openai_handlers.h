// The OpenAI-compatible endpoints: POST /v1/completions and
// /v1/chat/completions (plain JSON or server-sent events), GET /v1/models,
// POST /tokenize and /detokenize. Handlers run on HTTP worker threads: they
// validate, submit to the engine and read the request's channel; they never
// touch the model.
#pragma once

#include "daemon/api/call.h"
#include "daemon/api/daemon_context.h"
#include "daemon/http/reply.h"

namespace prefixd {

// Streaming answers keep a reference to `ctx`, which must outlive the server.
void handle_completions(DaemonContext& ctx, const Call& call, Reply& res);
void handle_chat_completions(DaemonContext& ctx, const Call& call, Reply& res);

void handle_models(DaemonContext& ctx, const Call& call, Reply& res);
void handle_tokenize(DaemonContext& ctx, const Call& call, Reply& res);
void handle_detokenize(DaemonContext& ctx, const Call& call, Reply& res);

}  // namespace prefixd
