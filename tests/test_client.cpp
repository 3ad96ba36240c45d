// Client library tests against a fake daemon (tests/fake_daemon.h: an httplib::Server on a free
// loopback port serving canned answers in the api.md format); no real daemon or model is needed.
// The bench (client/bench.*) has its own tests in test_client_bench.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <httplib.h>

#include <mutex>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/fake_daemon.h"

using nlohmann::json;
using namespace prefixd::client;
using prefixd::Result;
using prefixd::testing::FakeDaemon;
using prefixd::testing::serve_error;
using prefixd::testing::serve_sse;
using prefixd::testing::unused_port;

namespace {

const char* kCompletionJson = R"({
  "id": "cmpl-7", "object": "text_completion", "created": 0, "model": "smol",
  "choices": [{"index": 0, "text": "Paris is", "finish_reason": "length", "logprobs": null,
               "token_ids": [412, 318]}],
  "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42,
            "prompt_tokens_details": {"cached_tokens": 32}},
  "prefix_cache": {"cached_tokens": 32, "device_tokens": 16, "host_tokens": 8, "disk_tokens": 8,
                   "prefill_tokens": 8, "restore_path": "restore", "queue_ms": 0.25,
                   "restore_ms": 1.5, "prefill_ms": 3.0, "ttft_ms": 5.5, "decode_ms": 7.0}})";

std::string completion_sse(const std::string& eol) {
  std::string head = R"({"id":"cmpl-9","object":"text_completion","created":0,"model":"smol",)";
  std::string s;
  s += ": keep-alive comment" + eol + eol;
  s +=
      "data: " + head +
      R"("choices":[{"index":0,"text":"Hel","token_ids":[10],"finish_reason":null,"logprobs":null}]})" +
      eol + eol;
  s +=
      "data: " + head +
      R"("choices":[{"index":0,"text":"lo","token_ids":[11],"finish_reason":null,"logprobs":null}]})" +
      eol + eol;
  s += "data: " + head +
       "\"choices\":[{\"index\":0,\"text\":\" "
       "w\xC3\xB6rld\",\"token_ids\":[12,13],\"finish_reason\":\"length\",\"logprobs\":null}]}" +
       eol + eol;
  s +=
      "data: " + head +
      R"("choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":0}},"prefix_cache":{"cached_tokens":0,"device_tokens":0,"host_tokens":0,"disk_tokens":0,"prefill_tokens":5,"restore_path":"none","queue_ms":0.1,"restore_ms":0,"prefill_ms":2.5,"ttft_ms":3.25,"decode_ms":4.0}})" +
      eol + eol;
  s += "data: [DONE]" + eol + eol;
  return s;
}

std::string chat_sse() {
  std::string head =
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"smol",)";
  std::string s;
  s += "data: " + head +
       R"("choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]})"
       "\n\n";
  s += "data: " + head +
       R"("choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})"
       "\n\n";
  s += "data: " + head +
       R"("choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"stop"}]})"
       "\n\n";
  s += "data: [DONE]\n\n";
  return s;
}

std::vector<std::string> parse_all(const std::vector<std::string>& pieces) {
  SseParser parser;
  std::vector<std::string> events;
  auto on_event = [&](const std::string& e) {
    events.push_back(e);
    return true;
  };
  for (const std::string& p : pieces) REQUIRE(parser.feed(p.data(), p.size(), on_event));
  REQUIRE(parser.finish(on_event));
  return events;
}

}  // namespace

TEST_CASE("SseParser yields the same events for every split of the stream into three pieces") {
  for (const char* eol : {"\n", "\r\n", "\r"}) {
    std::string stream = std::string(": comment") + eol + "data: a" + eol + eol + "event: x" + eol +
                         "data:b1" + eol + "data: b2" + eol + "id: 7" + eol + eol + eol +
                         "data: [DONE]" + eol + eol;
    const std::vector<std::string> expected = {"a", "b1\nb2", "[DONE]"};
    CHECK(parse_all({stream}) == expected);
    for (size_t i = 0; i <= stream.size(); ++i) {
      for (size_t j = i; j <= stream.size(); ++j) {
        std::vector<std::string> pieces = {stream.substr(0, i), stream.substr(i, j - i),
                                           stream.substr(j)};
        REQUIRE(parse_all(pieces) == expected);
      }
    }
  }
}

TEST_CASE("SseParser dispatches a last event that lacks its blank line at finish") {
  CHECK(parse_all({"data: x\n\ndata: [DONE]"}) == std::vector<std::string>{"x", "[DONE]"});
  CHECK(parse_all({"data: y\n"}) == std::vector<std::string>{"y"});
  CHECK(parse_all({"data\n\n"}) == std::vector<std::string>{""});
  CHECK(parse_all({": only a comment\n\n"}).empty());
}

TEST_CASE("SseParser stops when the event handler returns false") {
  SseParser parser;
  int n = 0;
  std::string s = "data: 1\n\ndata: 2\n\n";
  CHECK_FALSE(parser.feed(s.data(), s.size(), [&](const std::string&) { return ++n < 1; }));
  CHECK(n == 1);
}

TEST_CASE("SseParser refuses a line or an event's data longer than its bound, then stays stopped") {
  std::vector<std::string> events;
  auto on_event = [&](const std::string& e) {
    events.push_back(e);
    return true;
  };
  // At the bound: a 64-byte line is accepted.
  SseParser ok(64);
  const std::string fits = "data: " + std::string(58, 'a') + "\n\n";
  CHECK(ok.feed(fits.data(), fits.size(), on_event));
  CHECK(events == std::vector<std::string>{std::string(58, 'a')});
  CHECK(ok.error().empty());

  // One byte over, in pieces and without a line end.
  SseParser line(64);
  const std::string head = "data: " + std::string(50, 'b');
  CHECK(line.feed(head.data(), head.size(), on_event));
  const std::string tail(9, 'b');
  CHECK_FALSE(line.feed(tail.data(), tail.size(), on_event));
  CHECK(line.error() == "SSE line longer than 64 bytes: stream aborted");
  const std::string more = "\n\ndata: x\n\n";
  CHECK_FALSE(line.feed(more.data(), more.size(), on_event));
  CHECK_FALSE(line.finish(on_event));
  CHECK(events.size() == 1);

  // Short lines whose data adds up past the bound in one event.
  SseParser event(64);
  std::string lines;
  for (int i = 0; i < 5; ++i) lines += "data: " + std::string(20, 'c') + "\n";
  CHECK_FALSE(event.feed(lines.data(), lines.size(), on_event));
  CHECK(event.error() == "SSE event longer than 64 bytes: stream aborted");
  CHECK(events.size() == 1);
}

TEST_CASE("complete_stream aborts a stream whose line grows past 16 MiB, with a clear error") {
  FakeDaemon d;
  d.server.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    // "data: aaaa..." and never a line end: 32 MiB unless the client hangs up first.
    res.set_chunked_content_provider("text/event-stream", [&](size_t, httplib::DataSink& sink) {
      const std::string block(64 << 10, 'a');
      if (!sink.write("data: ", 6)) return false;
      for (size_t n = 0; n < (size_t{32} << 20); n += block.size()) {
        if (!sink.write(block.data(), block.size())) return false;
      }
      sink.done();
      return true;
    });
  });
  d.start();
  Client client(d.options());
  CompletionRequest req;
  req.prompt = std::string("x");
  Result<Completion> r = client.complete_stream(req, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "POST /v1/completions: SSE line longer than 16 MiB: stream aborted");
  CHECK(client.last_error().http_status == 0);
}

TEST_CASE("request bodies carry exactly the fields that were set") {
  CompletionRequest req;
  req.prompt = std::vector<int32_t>{1, 2, 3};
  req.params.max_tokens = 5;
  req.params.temperature = 0.0;
  req.params.seed = 42;
  req.params.stop = {"\n"};
  req.params.cache_salt = "tenant-a";
  json expected = {{"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"temperature", 0.0},
                   {"seed", 42},          {"stop", {"\n"}},  {"cache_salt", "tenant-a"},
                   {"stream", false}};
  CHECK(completion_body(req, false) == expected);
  expected["stream"] = true;
  expected["stream_options"] = {{"include_usage", true}};
  CHECK(completion_body(req, true) == expected);

  ChatRequest chat;
  chat.messages = {{"system", "be brief"}, {"user", "hi"}};
  chat.params.top_k = 4;
  json chat_expected = {
      {"messages",
       {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}},
      {"max_tokens", 16},
      {"top_k", 4},
      {"stream", false}};
  CHECK(chat_body(chat, false) == chat_expected);

  CacheQuery q = CacheQuery::of_text("abc");
  q.cache_salt = "s";
  CHECK(cache_query_body(q) == json{{"prompt", "abc"}, {"cache_salt", "s"}});
  CHECK(cache_query_body(CacheQuery::of_messages({{"user", "x"}})) ==
        json{{"messages", {{{"role", "user"}, {"content", "x"}}}}});
}

TEST_CASE("complete parses every documented field and sends the bearer token") {
  FakeDaemon d;
  d.server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(kCompletionJson, "application/json");
  });
  d.start();
  ClientOptions opt = d.options();
  opt.api_key = "sekret";
  Client client(opt);
  CompletionRequest req;
  req.prompt = std::string("The capital of France");
  req.params.max_tokens = 2;
  Result<Completion> r = client.complete(req);
  REQUIRE(r.ok());
  CHECK(d.last_auth() == "Bearer sekret");
  CHECK(d.last_body() == completion_body(req, false));
  CHECK(r->id == "cmpl-7");
  CHECK(r->object == "text_completion");
  CHECK(r->model == "smol");
  CHECK(r->text == "Paris is");
  CHECK(r->token_ids == std::vector<int32_t>{412, 318});
  CHECK(r->finish_reason == "length");
  REQUIRE(r->usage.has_value());
  CHECK(r->usage->prompt_tokens == 40);
  CHECK(r->usage->completion_tokens == 2);
  CHECK(r->usage->total_tokens == 42);
  CHECK(r->usage->cached_tokens == 32);
  REQUIRE(r->prefix_cache.has_value());
  const PrefixCacheInfo& p = *r->prefix_cache;
  CHECK(p.cached_tokens == 32);
  CHECK(p.device_tokens == 16);
  CHECK(p.host_tokens == 8);
  CHECK(p.disk_tokens == 8);
  CHECK(p.prefill_tokens == 8);
  CHECK(p.onboard_path == "restore");
  CHECK(p.queue_ms == 0.25);
  CHECK(p.onboard_ms == 1.5);
  CHECK(p.prefill_ms == 3.0);
  CHECK(p.ttft_ms == 5.5);
  CHECK(p.decode_ms == 7.0);
  CHECK(r->raw == json::parse(kCompletionJson));
}

TEST_CASE("chat parses choices[0].message.content") {
  FakeDaemon d;
  d.server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"id":"c","object":"chat.completion","model":"smol","choices":[{"index":0,
      "message":{"role":"assistant","content":"Bonjour"},"finish_reason":"stop"}],
      "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,
               "prompt_tokens_details":{"cached_tokens":0}}})",
                    "application/json");
  });
  d.start();
  Client client(d.options());
  ChatRequest req;
  req.messages = {{"user", "hello"}};
  Result<Completion> r = client.chat(req);
  REQUIRE(r.ok());
  CHECK(d.last_body()["messages"] == json::parse(R"([{"role":"user","content":"hello"}])"));
  CHECK(r->object == "chat.completion");
  CHECK(r->text == "Bonjour");
  CHECK(r->finish_reason == "stop");
  CHECK(r->usage->completion_tokens == 1);
  CHECK_FALSE(r->prefix_cache.has_value());
}

TEST_CASE("complete_stream parses SSE chunks split at odd boundaries, LF and CRLF") {
  for (std::string eol : {"\n", "\r\n"}) {
    FakeDaemon d;
    d.server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
      d.record(req);
      serve_sse(res, completion_sse(eol));
    });
    d.start();
    Client client(d.options());
    CompletionRequest req;
    req.prompt = std::vector<int32_t>{5, 6, 7, 8, 9};
    req.params.max_tokens = 4;
    std::vector<StreamDelta> deltas;
    Result<Completion> r = client.complete_stream(req, [&](const StreamDelta& delta) {
      deltas.push_back(delta);
      return true;
    });
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK(d.last_body()["stream"] == true);
    CHECK(d.last_body()["stream_options"] == json{{"include_usage", true}});
    REQUIRE(deltas.size() == 3);
    CHECK(deltas[0].text == "Hel");
    CHECK(deltas[0].token_ids == std::vector<int32_t>{10});
    CHECK(deltas[0].finish_reason.empty());
    CHECK(deltas[1].text == "lo");
    CHECK(deltas[2].text == " w\xC3\xB6rld");
    CHECK(deltas[2].token_ids == std::vector<int32_t>{12, 13});
    CHECK(deltas[2].finish_reason == "length");
    CHECK(deltas[0].elapsed_ms <= deltas[1].elapsed_ms);
    CHECK(deltas[1].elapsed_ms <= deltas[2].elapsed_ms);
    CHECK(r->text == "Hello w\xC3\xB6rld");
    CHECK(r->token_ids == std::vector<int32_t>{10, 11, 12, 13});
    CHECK(r->finish_reason == "length");
    CHECK(r->id == "cmpl-9");
    CHECK(r->object == "text_completion");
    CHECK(r->n_chunks == 4);
    REQUIRE(r->usage.has_value());
    CHECK(r->usage->prompt_tokens == 5);
    CHECK(r->usage->completion_tokens == 4);
    CHECK(r->usage->cached_tokens == 0);
    REQUIRE(r->prefix_cache.has_value());
    CHECK(r->prefix_cache->prefill_tokens == 5);
    CHECK(r->prefix_cache->onboard_path == "none");
    CHECK(r->prefix_cache->ttft_ms == 3.25);
    CHECK(r->raw["choices"].empty());
  }
}

TEST_CASE("chat_stream reports the role delta, then content deltas") {
  FakeDaemon d;
  d.server.Post("/v1/chat/completions", [&](const httplib::Request&, httplib::Response& res) {
    serve_sse(res, chat_sse());
  });
  d.start();
  Client client(d.options());
  ChatRequest req;
  req.messages = {{"user", "hello"}};
  std::vector<StreamDelta> deltas;
  Result<Completion> r = client.chat_stream(req, [&](const StreamDelta& delta) {
    deltas.push_back(delta);
    return true;
  });
  REQUIRE_MESSAGE(r.ok(), r.message());
  REQUIRE(deltas.size() == 3);
  CHECK(deltas[0].role == "assistant");
  CHECK_FALSE(deltas[0].has_content());
  CHECK(deltas[1].text == "Hi");
  CHECK(deltas[2].text == " there");
  CHECK(deltas[2].finish_reason == "stop");
  CHECK(r->text == "Hi there");
  CHECK(r->object == "chat.completion.chunk");
  CHECK_FALSE(r->usage.has_value());
}

TEST_CASE("4xx answers carry the server's error message, type, param and code") {
  FakeDaemon d;
  d.server.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    serve_error(res, 400, "prompt (4000 tokens) + max_tokens (200) exceeds the context (2048)",
                "invalid_request_error", "max_tokens", "context_length_exceeded");
  });
  d.start();
  Client client(d.options());
  CompletionRequest req;
  req.prompt = std::string("x");
  for (bool stream : {false, true}) {
    Result<Completion> r = stream ? client.complete_stream(req, nullptr) : client.complete(req);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message() ==
          "HTTP 400: prompt (4000 tokens) + max_tokens (200) exceeds the context (2048)");
    CHECK(client.last_error().http_status == 400);
    CHECK(client.last_error().message ==
          "prompt (4000 tokens) + max_tokens (200) exceeds the context (2048)");
    CHECK(client.last_error().type == "invalid_request_error");
    CHECK(client.last_error().param == "max_tokens");
    CHECK(client.last_error().code == "context_length_exceeded");
    CHECK(client.last_error().retry_after_s == -1);
  }
}

TEST_CASE("429 answers expose Retry-After; null param and code read as empty") {
  FakeDaemon d;
  auto busy = [&](const httplib::Request&, httplib::Response& res) {
    serve_error(res, 429, "too many requests waiting", "rate_limit_error", nullptr, nullptr);
    res.set_header("Retry-After", "2");
  };
  d.server.Post("/v1/completions", busy);
  d.server.Post("/v1/cache/prefetch", busy);
  d.start();
  Client client(d.options());
  CompletionRequest req;
  req.prompt = std::string("x");
  Result<Completion> r = client.complete_stream(req, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "HTTP 429: too many requests waiting");
  CHECK(client.last_error().http_status == 429);
  CHECK(client.last_error().retry_after_s == 2.0);
  CHECK(client.last_error().type == "rate_limit_error");
  CHECK(client.last_error().param.empty());
  CHECK(client.last_error().code.empty());
  Result<PrefetchResult> p = client.prefetch(CacheQuery::of_text("x"));
  REQUIRE_FALSE(p.ok());
  CHECK(client.last_error().http_status == 429);
  CHECK(client.last_error().retry_after_s == 2.0);
}

TEST_CASE("401 without the API key; a non-JSON error body is quoted") {
  FakeDaemon d;
  d.server.Get("/v1/models", [&](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer k1") {
      serve_error(res, 401, "missing or wrong API key", "authentication_error", nullptr, nullptr);
      return;
    }
    res.set_content(R"({"object":"list","data":[{"id":"smol-135m","object":"model",
      "owned_by":"prefixd","context_length":2048,"backend":"cpu"}]})",
                    "application/json");
  });
  d.server.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content("overloaded", "text/plain");
  });
  d.start();
  Client anonymous(d.options());
  Result<std::vector<ModelInfo>> r = anonymous.models();
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "HTTP 401: missing or wrong API key");
  CHECK(anonymous.last_error().type == "authentication_error");
  Result<HealthInfo> h = anonymous.health();
  REQUIRE_FALSE(h.ok());
  CHECK(h.message() == "HTTP 503: overloaded");

  ClientOptions opt = d.options();
  opt.api_key = "k1";
  Client client(opt);
  Result<std::vector<ModelInfo>> m = client.models();
  REQUIRE(m.ok());
  REQUIRE(m->size() == 1);
  CHECK((*m)[0].id == "smol-135m");
  CHECK((*m)[0].owned_by == "prefixd");
  CHECK((*m)[0].context_length == 2048);
  CHECK((*m)[0].backend == "cpu");
  CHECK(client.last_error().http_status == 0);
}

TEST_CASE("a stream without [DONE], an in-stream error and a malformed chunk are errors") {
  FakeDaemon d;
  d.server.Post("/truncated", [&](const httplib::Request&, httplib::Response& res) {
    serve_sse(res, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n");
  });
  d.server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body);
    if (body["prompt"] == "error") {
      serve_sse(res,
                "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"
                "data: {\"error\":{\"message\":\"engine failed\",\"type\":\"server_error\","
                "\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n");
    } else if (body["prompt"] == "garbage") {
      serve_sse(res, "data: {not json\n\ndata: [DONE]\n\n");
    } else {
      // Truncated: the connection ends after one chunk.
      serve_sse(res,
                "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n");
    }
  });
  d.start();
  Client client(d.options());
  CompletionRequest req;
  req.prompt = std::string("truncated");
  Result<Completion> r = client.complete_stream(req, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "stream ended without data: [DONE]");

  req.prompt = std::string("error");
  r = client.complete_stream(req, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "HTTP 200: engine failed");
  CHECK(client.last_error().type == "server_error");

  req.prompt = std::string("garbage");
  r = client.complete_stream(req, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "malformed SSE chunk: {not json");
}

TEST_CASE("a token callback returning false cancels the stream") {
  FakeDaemon d;
  d.server.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    serve_sse(res, completion_sse("\n"));
  });
  d.start();
  Client client(d.options());
  CompletionRequest req;
  req.prompt = std::string("x");
  int n_seen = 0;
  Result<Completion> r =
      client.complete_stream(req, [&](const StreamDelta&) { return ++n_seen < 2; });
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "stream cancelled by the caller");
  CHECK(n_seen == 2);
  // The client stays usable after a cancelled stream.
  Result<Completion> again = client.complete_stream(req, nullptr);
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again->text == "Hello w\xC3\xB6rld");
}

TEST_CASE("a JSON answer to a stream request is accepted as one completion") {
  FakeDaemon d;
  d.server.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(kCompletionJson, "application/json");
  });
  d.start();
  Client client(d.options());
  CompletionRequest req;
  req.prompt = std::string("x");
  int n_seen = 0;
  Result<Completion> r = client.complete_stream(req, [&](const StreamDelta& delta) {
    ++n_seen;
    CHECK(delta.text == "Paris is");
    return true;
  });
  REQUIRE(r.ok());
  CHECK(n_seen == 1);
  CHECK(r->usage->cached_tokens == 32);
}

TEST_CASE("cache endpoints: stats, lookup, prefetch, pin, unpin, clear") {
  FakeDaemon d;
  d.server.Get("/v1/cache/stats", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"block_size":16,"tokens_saved":320,"prompt_tokens":1000,"tiers":{
      "device":{"capacity_bytes":1073741824,"used_bytes":4096,"blocks":3,"hits":20,"misses":5,"evictions":1},
      "host":{"capacity_bytes":2000000000,"used_bytes":8192,"blocks":6,"hits":2,"misses":3,"evictions":0},
      "disk":{"capacity_bytes":0,"used_bytes":0,"blocks":0,"hits":0,"misses":0,"evictions":0}}})",
                    "application/json");
  });
  d.server.Post("/v1/cache/lookup", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(
        R"({"prompt_tokens":60,"cached_tokens":48,"device_tokens":16,"host_tokens":16,"disk_tokens":0,"remote_tokens":16})",
        "application/json");
  });
  d.server.Post("/v1/cache/prefetch", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"prompt_tokens":40,"cached_tokens":16,"prefill_tokens":24,"blocks":2})",
                    "application/json");
  });
  d.server.Post("/v1/cache/pin", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"pinned_blocks":2,"pinned_tokens":32})", "application/json");
  });
  d.server.Post("/v1/cache/unpin", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"pinned_blocks":0,"pinned_tokens":0})", "application/json");
  });
  d.server.Delete("/v1/cache", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"cleared_blocks":9})", "application/json");
  });
  d.start();
  Client client(d.options());

  Result<CacheStats> s = client.stats();
  REQUIRE(s.ok());
  CHECK(d.last_method() == "GET");
  CHECK(s->block_size == 16);
  CHECK(s->tokens_saved == 320);
  CHECK(s->prompt_tokens == 1000);
  CHECK(s->device.capacity_bytes == 1073741824);
  CHECK(s->device.used_bytes == 4096);
  CHECK(s->device.blocks == 3);
  CHECK(s->device.hits == 20);
  CHECK(s->device.misses == 5);
  CHECK(s->device.evictions == 1);
  CHECK(s->host.capacity_bytes == 2000000000);
  CHECK(s->host.blocks == 6);
  CHECK(s->disk.capacity_bytes == 0);

  CacheQuery q = CacheQuery::of_ids({1, 2, 3});
  q.cache_salt = "t";
  Result<LookupResult> l = client.lookup(q);
  REQUIRE(l.ok());
  CHECK(d.last_body() == json{{"prompt", {1, 2, 3}}, {"cache_salt", "t"}});
  CHECK(l->prompt_tokens == 60);
  CHECK(l->cached_tokens == 48);
  CHECK(l->device_tokens == 16);
  CHECK(l->host_tokens == 16);
  CHECK(l->disk_tokens == 0);
  CHECK(l->remote_tokens == 16);

  Result<PrefetchResult> p = client.prefetch(CacheQuery::of_messages({{"system", "sys"}}));
  REQUIRE(p.ok());
  CHECK(d.last_body() == json{{"messages", {{{"role", "system"}, {"content", "sys"}}}}});
  CHECK(p->prompt_tokens == 40);
  CHECK(p->cached_tokens == 16);
  CHECK(p->prefill_tokens == 24);
  CHECK(p->blocks == 2);

  Result<PinResult> pin = client.pin(CacheQuery::of_text("sys"));
  REQUIRE(pin.ok());
  CHECK(d.last_body() == json{{"prompt", "sys"}});
  CHECK(pin->pinned_blocks == 2);
  CHECK(pin->pinned_tokens == 32);
  Result<PinResult> unpin = client.unpin(CacheQuery::of_text("sys"));
  REQUIRE(unpin.ok());
  CHECK(unpin->pinned_blocks == 0);

  Result<int64_t> cleared = client.clear();
  REQUIRE(cleared.ok());
  CHECK(d.last_method() == "DELETE");
  CHECK(cleared.value() == 9);
}

TEST_CASE("health, tokenize, detokenize, metrics") {
  FakeDaemon d;
  d.server.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok","backend":"cpu"})", "application/json");
  });
  d.server.Post("/tokenize", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"tokens":[1,15043,3186]})", "application/json");
  });
  d.server.Post("/detokenize", [&](const httplib::Request& req, httplib::Response& res) {
    d.record(req);
    res.set_content(R"({"content":"Hello world"})", "application/json");
  });
  d.server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content("# TYPE prefixd_requests_total counter\nprefixd_requests_total 3\n",
                    "text/plain");
  });
  d.start();
  Client client(d.options());
  Result<HealthInfo> h = client.health();
  REQUIRE(h.ok());
  CHECK(h->status == "ok");
  CHECK(h->backend == "cpu");
  Result<std::vector<int32_t>> t = client.tokenize("Hello world", true);
  REQUIRE(t.ok());
  CHECK(d.last_body() == json{{"content", "Hello world"}, {"add_special", true}});
  CHECK(t.value() == std::vector<int32_t>{1, 15043, 3186});
  Result<std::string> text = client.detokenize({15043, 3186});
  REQUIRE(text.ok());
  CHECK(d.last_body() == json{{"tokens", {15043, 3186}}});
  CHECK(text.value() == "Hello world");
  Result<std::string> m = client.metrics();
  REQUIRE(m.ok());
  CHECK(m.value() == "# TYPE prefixd_requests_total counter\nprefixd_requests_total 3\n");
}

TEST_CASE("malformed answers and refused connections are errors, not crashes") {
  FakeDaemon d;
  d.server.Get("/v1/cache/stats", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"block_size":"sixteen"})", "application/json");
  });
  d.server.Post("/tokenize", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content("not json", "application/json");
  });
  d.server.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"id":"x","choices":[]})", "application/json");
  });
  d.start();
  Client client(d.options());
  Result<CacheStats> s = client.stats();
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "malformed cache stats: field 'block_size' is not a number");
  Result<std::vector<int32_t>> t = client.tokenize("x", false);
  REQUIRE_FALSE(t.ok());
  CHECK(t.message() == "POST /tokenize: response is not JSON: not json");
  CompletionRequest req;
  req.prompt = std::string("x");
  Result<Completion> c = client.complete(req);
  REQUIRE_FALSE(c.ok());
  CHECK(c.message() == "malformed completion: no choices");

  const int dead_port = unused_port();
  ClientOptions opt;
  opt.port = dead_port;
  opt.connect_timeout_s = 1;
  Client dead(opt);
  Result<HealthInfo> h = dead.health();
  REQUIRE_FALSE(h.ok());
  CHECK(dead.last_error().http_status == 0);
  CHECK(h.message().find("GET /health to 127.0.0.1:" + std::to_string(dead_port) + " failed") == 0);
}

TEST_CASE("X-Prefix-Key: equal for prompts sharing their leading part, different otherwise, "
          "sent by completions, streams, chat and prefetch, not when turned off") {
  FakeDaemon d;
  std::mutex mu;
  std::vector<std::string> keys;  // X-Prefix-Key of each request, "-" when absent
  auto record_key = [&](const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu);
    keys.push_back(req.has_header("X-Prefix-Key") ? req.get_header_value("X-Prefix-Key") : "-");
  };
  d.server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    record_key(req);
    if (req.get_header_value("Accept") == "text/event-stream") {
      serve_sse(res, completion_sse("\n"));
    } else {
      res.set_content(kCompletionJson, "application/json");
    }
  });
  d.server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    record_key(req);
    res.set_content(kCompletionJson, "application/json");
  });
  d.server.Post("/v1/cache/prefetch", [&](const httplib::Request& req, httplib::Response& res) {
    record_key(req);
    res.set_content(R"({"prompt_tokens":4,"cached_tokens":0,"prefill_tokens":4,"blocks":0})",
                    "application/json");
  });
  d.start();

  const std::string system(kPrefixKeyTextBytes, 's');  // a shared leading part of 1024 bytes
  auto text = [](std::string s) { return CompletionRequest{Prompt(std::move(s)), {}}; };
  std::vector<int32_t> shared_ids(kPrefixKeyIds, 7), other_ids(kPrefixKeyIds, 7);
  other_ids[kPrefixKeyIds - 1] = 8;
  auto with_question = [&](std::vector<int32_t> ids, int32_t question) {
    ids.push_back(question);
    return CompletionRequest{Prompt(std::move(ids)), {}};
  };
  auto chat = [](std::string system_prompt, std::string question) {
    return ChatRequest{{{"system", std::move(system_prompt)}, {"user", std::move(question)}}, {}};
  };

  Client client(d.options());
  REQUIRE(client.complete(text(system + " question one")).ok());
  REQUIRE(client.complete_stream(text(system + " question two"), nullptr).ok());
  REQUIRE(client.complete(text("t" + system)).ok());
  REQUIRE(client.complete(with_question(shared_ids, 1)).ok());
  REQUIRE(client.complete(with_question(shared_ids, 2)).ok());
  REQUIRE(client.complete(with_question(other_ids, 1)).ok());
  REQUIRE(client.chat(chat("You are a pirate.", "Where is the gold?")).ok());
  REQUIRE(client.chat(chat("You are a pirate.", "And the ship?")).ok());
  REQUIRE(client.chat(chat("You are a poet.", "Where is the gold?")).ok());
  REQUIRE(client.prefetch(CacheQuery::of_text(system + " question three")).ok());
  ClientOptions off = d.options();
  off.prefix_key_header = false;
  Client no_key(off);
  REQUIRE(no_key.complete(text(system)).ok());
  REQUIRE(no_key.chat(chat("You are a pirate.", "Where is the gold?")).ok());

  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(keys.size() == 12);
  for (size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    CHECK(keys[i].size() == 16);
    CHECK(keys[i].find_first_not_of("0123456789abcdef") == std::string::npos);
  }
  CHECK(keys[0] == prefix_key(Prompt(system)));
  CHECK(keys[1] == keys[0]);  // the same first 1024 bytes, streamed or not
  CHECK(keys[2] != keys[0]);  // one byte more in front shifts them
  CHECK(keys[3] == prefix_key(Prompt(shared_ids)));
  CHECK(keys[4] == keys[3]);  // the same first 256 ids
  CHECK(keys[5] != keys[3]);  // the 256th id differs
  CHECK(keys[6] == keys[7]);  // the same first (system) message
  CHECK(keys[8] != keys[6]);
  CHECK(keys[9] == keys[0]);  // a prefetch goes where the completions go
  CHECK(keys[10] == "-");
  CHECK(keys[11] == "-");
}
