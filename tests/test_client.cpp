// Client library and bench tests against a fake daemon (an httplib::Server on a free loopback
// port serving canned answers in the api.md format); no real daemon or model is needed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/bench.h"
#include "client/client.h"

using nlohmann::json;
using namespace prefixd;

namespace {

// Writes `text` to the sink in pieces of 1, 2, 3, 5, 7, 11, 13 bytes (cycling), so SSE events
// and line ends straddle HTTP chunks.
void write_odd_chunks(httplib::DataSink& sink, const std::string& text) {
  static const size_t kSizes[] = {1, 2, 3, 5, 7, 11, 13};
  size_t pos = 0;
  for (size_t k = 0; pos < text.size(); ++k) {
    size_t n = std::min(kSizes[k % 7], text.size() - pos);
    if (!sink.write(text.data() + pos, n)) return;
    pos += n;
  }
}

void serve_sse(httplib::Response& res, std::string text) {
  res.set_chunked_content_provider("text/event-stream",
                                   [text](size_t /*offset*/, httplib::DataSink& sink) {
                                     write_odd_chunks(sink, text);
                                     sink.done();
                                     return true;
                                   });
}

void serve_error(httplib::Response& res, int status, const std::string& message,
                 const std::string& type, const json& param, const json& code) {
  res.status = status;
  json body = {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}};
  res.set_content(body.dump(), "application/json");
}

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

// A fake daemon: routes are added by each test before start().
class FakeDaemon {
 public:
  httplib::Server server;

  void start() {
    port_ = server.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server.listen_after_bind(); });
    for (int i = 0; i < 500 && !server.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    REQUIRE(server.is_running());
  }
  ~FakeDaemon() {
    server.stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  ClientOptions options() const {
    ClientOptions o;
    o.port = port_;
    o.read_timeout_s = 10;
    return o;
  }
  // The last request body and Authorization header seen by a handler that calls record().
  void record(const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    last_body_ = req.body;
    last_auth_ = req.get_header_value("Authorization");
    last_method_ = req.method;
  }
  json last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_.empty() ? json(nullptr) : json::parse(last_body_);
  }
  std::string last_auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_auth_;
  }
  std::string last_method() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_method_;
  }

 private:
  int port_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::string last_body_, last_auth_, last_method_;
};

// A loopback port nobody listens on: bound (never listened) and closed again.
int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
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
  CHECK(p.restore_path == "restore");
  CHECK(p.queue_ms == 0.25);
  CHECK(p.restore_ms == 1.5);
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
    CHECK(r->prefix_cache->restore_path == "none");
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
        R"({"prompt_tokens":40,"cached_tokens":32,"device_tokens":16,"host_tokens":16,"disk_tokens":0})",
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
  CHECK(l->prompt_tokens == 40);
  CHECK(l->cached_tokens == 32);
  CHECK(l->device_tokens == 16);
  CHECK(l->host_tokens == 16);
  CHECK(l->disk_tokens == 0);

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

TEST_CASE("percentile_sorted interpolates linearly between closest ranks") {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK(percentile_sorted(v, 0) == 1.0);
  CHECK(percentile_sorted(v, 100) == 10.0);
  CHECK(percentile_sorted(v, 50) == doctest::Approx(5.5).epsilon(1e-12));
  CHECK(percentile_sorted(v, 95) == doctest::Approx(9.55).epsilon(1e-12));
  CHECK(percentile_sorted(v, 99) == doctest::Approx(9.91).epsilon(1e-12));
  CHECK(percentile_sorted({7}, 99) == 7.0);
  CHECK(percentile_sorted({10, 20}, 25) == 12.5);

  Distribution d = summarize({30, 10, 20, 40});  // unsorted on purpose
  CHECK(d.n == 4);
  CHECK(d.mean == 25.0);
  CHECK(d.min == 10.0);
  CHECK(d.max == 40.0);
  CHECK(d.p50 == 25.0);
  CHECK(d.p95 == doctest::Approx(38.5).epsilon(1e-12));
  CHECK(d.p99 == doctest::Approx(39.7).epsilon(1e-12));
  Distribution empty = summarize({});
  CHECK(empty.n == 0);
  CHECK(empty.p50 == -1);
}

TEST_CASE("summarize_records splits TTFT by hit/miss and computes ratios by tier") {
  std::vector<BenchRecord> records(4);
  // 0: miss
  records[0].ok = true;
  records[0].ttft_ms = 100;
  records[0].server_ttft_ms = 98;
  records[0].latency_ms = 200;
  records[0].itl_ms = {10, 20};
  records[0].prompt_tokens = 100;
  records[0].completion_tokens = 3;
  // 1: hit, 64 device + 16 host
  records[1].ok = true;
  records[1].ttft_ms = 20;
  records[1].server_ttft_ms = 19;
  records[1].latency_ms = 50;
  records[1].itl_ms = {30};
  records[1].prompt_tokens = 100;
  records[1].completion_tokens = 2;
  records[1].cached_tokens = 80;
  records[1].device_tokens = 64;
  records[1].host_tokens = 16;
  // 2: hit from disk, retried once
  records[2].ok = true;
  records[2].ttft_ms = 40;
  records[2].server_ttft_ms = 37;
  records[2].latency_ms = 60;
  records[2].prompt_tokens = 100;
  records[2].completion_tokens = 1;
  records[2].cached_tokens = 48;
  records[2].disk_tokens = 48;
  records[2].retries = 1;
  // 3: failed
  records[3].ok = false;
  records[3].error = "HTTP 500: boom";
  records[3].retries = 2;

  BenchSummary s = summarize_records(records, 2.0);
  CHECK(s.n_requests == 4);
  CHECK(s.n_ok == 3);
  CHECK(s.n_failed == 1);
  CHECK(s.n_retries == 3);
  CHECK(s.first_error == "HTTP 500: boom");
  CHECK(s.requests_per_s == 1.5);
  CHECK(s.output_tokens_per_s == 3.0);
  CHECK(s.prompt_tokens == 300);
  CHECK(s.cached_tokens == 128);
  CHECK(s.hit_ratio == doctest::Approx(128.0 / 300.0).epsilon(1e-12));
  CHECK(s.device_hit_ratio == doctest::Approx(64.0 / 300.0).epsilon(1e-12));
  CHECK(s.host_hit_ratio == doctest::Approx(16.0 / 300.0).epsilon(1e-12));
  CHECK(s.disk_hit_ratio == doctest::Approx(48.0 / 300.0).epsilon(1e-12));
  CHECK(s.n_hits == 2);
  CHECK(s.n_misses == 1);
  CHECK(s.ttft_ms.n == 3);
  CHECK(s.ttft_ms.p50 == 40.0);
  CHECK(s.ttft_hit_ms.n == 2);
  CHECK(s.ttft_hit_ms.p50 == 30.0);
  CHECK(s.ttft_miss_ms.n == 1);
  CHECK(s.ttft_miss_ms.p50 == 100.0);
  CHECK(s.server_ttft_ms.mean == doctest::Approx((98.0 + 19 + 37) / 3).epsilon(1e-12));
  CHECK(s.ttft_overhead_ms.n == 3);
  CHECK(s.ttft_overhead_ms.p50 == 2.0);
  CHECK(s.ttft_overhead_ms.max == 3.0);
  CHECK(s.itl_ms.n == 3);
  CHECK(s.itl_ms.p50 == 20.0);
  CHECK(s.latency_ms.max == 200.0);
}

TEST_CASE("build_workload is deterministic, sized exactly and round-robins system prompts") {
  BenchOptions o;
  o.n_system_prompts = 3;
  o.system_tokens = 50;
  o.question_tokens = 7;
  o.n_requests = 10;
  o.seed = 11;
  o.vocab_lo = 100;
  o.vocab_hi = 120;
  BenchWorkload a = build_workload(o);
  BenchWorkload b = build_workload(o);
  REQUIRE(a.system_prompts.size() == 3);
  REQUIRE(a.requests.size() == 10);
  std::set<std::vector<int32_t>> questions;
  for (int32_t i = 0; i < 10; ++i) {
    const BenchPlanEntry& e = a.requests[static_cast<size_t>(i)];
    CHECK(e.system_prompt == i % 3);
    const auto& ids = std::get<std::vector<int32_t>>(e.prompt);
    REQUIRE(ids.size() == 57);
    for (int32_t id : ids) REQUIRE((id >= 100 && id < 120));
    const auto& sys =
        std::get<std::vector<int32_t>>(a.system_prompts[static_cast<size_t>(e.system_prompt)]);
    CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + 50) == sys);
    questions.insert(std::vector<int32_t>(ids.begin() + 50, ids.end()));
    CHECK(std::get<std::vector<int32_t>>(b.requests[static_cast<size_t>(i)].prompt) == ids);
  }
  CHECK(questions.size() == 10);
  CHECK(a.system_prompts[0] != a.system_prompts[1]);

  // More requests or another order never change the system prompts; another seed does.
  BenchOptions more = o;
  more.n_requests = 40;
  more.order = BenchOrder::kRandom;
  BenchWorkload c = build_workload(more);
  CHECK(c.system_prompts == a.system_prompts);
  std::set<int32_t> used;
  for (const BenchPlanEntry& e : c.requests) {
    REQUIRE((e.system_prompt >= 0 && e.system_prompt < 3));
    used.insert(e.system_prompt);
  }
  CHECK(used.size() == 3);
  BenchOptions other = o;
  other.seed = 12;
  CHECK(build_workload(other).system_prompts != a.system_prompts);
}

TEST_CASE("text workloads join pseudo-words; bench_word is injective on the default range") {
  std::set<std::string> words;
  for (int32_t id = 0; id < 1000; ++id) words.insert(bench_word(id));
  CHECK(words.size() == 1000);
  CHECK(bench_word(0) == "ba");
  CHECK(bench_word(80) == "baca");
  BenchOptions o;
  o.n_system_prompts = 1;
  o.system_tokens = 4;
  o.question_tokens = 3;
  o.n_requests = 2;
  o.text_prompts = true;
  BenchWorkload w = build_workload(o);
  const std::string& sys = std::get<std::string>(w.system_prompts[0]);
  const std::string& full = std::get<std::string>(w.requests[1].prompt);
  CHECK(std::count(sys.begin(), sys.end(), ' ') == 3);
  CHECK(std::count(full.begin(), full.end(), ' ') == 6);
  CHECK(full.rfind(sys + " ", 0) == 0);
}

TEST_CASE("BenchOptions::validate refuses impossible workloads") {
  BenchOptions o;
  CHECK(o.validate().ok());
  BenchOptions bad = o;
  bad.vocab_hi = bad.vocab_lo;
  CHECK_FALSE(bad.validate().ok());
  bad = o;
  bad.concurrency = 0;
  CHECK_FALSE(bad.validate().ok());
  bad = o;
  bad.system_tokens = 0;
  bad.question_tokens = 0;
  CHECK_FALSE(bad.validate().ok());
}

namespace {

// A fake daemon for the bench: streams O one-token chunks; a prompt whose first S ids were seen
// before (by a completion or a prefetch) gets S cached device tokens. The first completion
// request is answered 429 once.
struct BenchFake {
  FakeDaemon d;
  int32_t system_tokens;
  std::mutex mu;
  std::set<std::vector<int32_t>> seen;
  std::atomic<int> n_completion_posts{0};
  std::atomic<int> n_prefetch{0};

  explicit BenchFake(int32_t s) : system_tokens(s) {
    d.server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok","backend":"cpu"})", "application/json");
    });
    d.server.Post(
        "/v1/cache/prefetch", [this](const httplib::Request& req, httplib::Response& res) {
          std::vector<int32_t> ids = json::parse(req.body)["prompt"].get<std::vector<int32_t>>();
          ++n_prefetch;
          {
            std::lock_guard<std::mutex> lock(mu);
            seen.insert(ids);
          }
          res.set_content(json{{"prompt_tokens", ids.size()},
                               {"cached_tokens", 0},
                               {"prefill_tokens", ids.size()},
                               {"blocks", ids.size() / 16}}
                              .dump(),
                          "application/json");
        });
    d.server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      if (n_completion_posts.fetch_add(1) == 0) {
        serve_error(res, 429, "queue full", "rate_limit_error", nullptr, nullptr);
        res.set_header("Retry-After", "0");
        return;
      }
      json body = json::parse(req.body);
      std::vector<int32_t> ids = body["prompt"].get<std::vector<int32_t>>();
      int o = body["max_tokens"].get<int>();
      std::vector<int32_t> sys(ids.begin(), ids.begin() + system_tokens);
      int64_t cached = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (seen.count(sys)) cached = system_tokens;
        seen.insert(sys);
      }
      std::string sse;
      for (int k = 0; k < o; ++k) {
        json chunk = {{"object", "text_completion"},
                      {"choices",
                       {{{"index", 0},
                         {"text", "t"},
                         {"token_ids", {k}},
                         {"finish_reason", k + 1 == o ? json("length") : json(nullptr)}}}}};
        sse += "data: " + chunk.dump() + "\n\n";
      }
      int64_t n_prompt = static_cast<int64_t>(ids.size());
      json usage_chunk = {{"object", "text_completion"},
                          {"choices", json::array()},
                          {"usage",
                           {{"prompt_tokens", n_prompt},
                            {"completion_tokens", o},
                            {"total_tokens", n_prompt + o},
                            {"prompt_tokens_details", {{"cached_tokens", cached}}}}},
                          {"prefix_cache",
                           {{"cached_tokens", cached},
                            {"device_tokens", cached},
                            {"host_tokens", 0},
                            {"disk_tokens", 0},
                            {"prefill_tokens", n_prompt - cached},
                            {"restore_path", "none"},
                            {"queue_ms", 0.0},
                            {"restore_ms", 0.0},
                            {"prefill_ms", 0.5},
                            {"ttft_ms", 0.75},
                            {"decode_ms", 1.0}}}};
      sse += "data: " + usage_chunk.dump() + "\n\ndata: [DONE]\n\n";
      serve_sse(res, sse);
    });
    d.start();
  }
};

}  // namespace

TEST_CASE("run_bench against a fake daemon: exact hit ratio, token counts and a 429 retry") {
  BenchFake fake(40);
  BenchOptions o;
  o.n_system_prompts = 2;
  o.system_tokens = 40;
  o.question_tokens = 8;
  o.concurrency = 1;
  o.n_requests = 6;
  o.output_tokens = 5;
  int32_t last_done = 0;
  Result<BenchReport> r = run_bench(fake.d.options(), o, [&](int32_t done, int32_t total) {
    CHECK(total == 6);
    CHECK(done == last_done + 1);
    last_done = done;
  });
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(last_done == 6);
  const BenchSummary& s = r->summary;
  CHECK(s.n_ok == 6);
  CHECK(s.n_failed == 0);
  CHECK(s.n_retries == 1);
  CHECK(r->records[0].retries == 1);
  CHECK(r->records[0].http_status == 200);
  CHECK(s.prompt_tokens == 6 * 48);
  CHECK(s.completion_tokens == 30);
  CHECK(s.n_misses == 2);
  CHECK(s.n_hits == 4);
  CHECK(s.cached_tokens == 4 * 40);
  CHECK(s.hit_ratio == doctest::Approx(160.0 / 288.0).epsilon(1e-12));
  CHECK(s.device_hit_ratio == s.hit_ratio);
  CHECK(s.host_hit_ratio == 0.0);
  CHECK(s.ttft_ms.n == 6);
  CHECK(s.ttft_hit_ms.n == 4);
  CHECK(s.ttft_miss_ms.n == 2);
  CHECK(s.itl_ms.n == 6 * 4);
  CHECK(s.server_ttft_ms.p50 == 0.75);
  for (int32_t i = 0; i < 6; ++i) {
    const BenchRecord& rec = r->records[static_cast<size_t>(i)];
    CHECK(rec.index == i);
    CHECK(rec.system_prompt == i % 2);
    CHECK(rec.cache_hit() == (i >= 2));
    CHECK(rec.n_content_chunks == 5);
    CHECK(rec.finish_reason == "length");
    CHECK(rec.prefill_tokens == (i >= 2 ? 8 : 48));
    CHECK(rec.ttft_ms >= 0);
    CHECK(rec.latency_ms >= rec.ttft_ms);
  }

  json j = bench_report_json(r.value());
  json round = json::parse(j.dump());
  CHECK(round["format"] == "prefixd-bench/1");
  CHECK(round["options"]["system_prompts"] == 2);
  CHECK(round["options"]["order"] == "round-robin");
  CHECK(round["summary"]["hits"] == 4);
  CHECK(round["summary"]["retries"] == 1);
  CHECK(round["summary"]["first_error"].is_null());
  CHECK(round["summary"]["hit_ratio"]["device"].get<double>() == s.device_hit_ratio);
  CHECK(round["summary"]["ttft_ms"]["n"] == 6);
  CHECK(round["requests"].size() == 6);
  CHECK(round["requests"][3]["cache_hit"] == true);
  CHECK(round["requests"][3]["itl_ms"].size() == 4);
  CHECK(round["requests"][3]["error"].is_null());
  CHECK(round["warmup"].empty());
  std::string table = format_bench_summary(r.value());
  CHECK(table.find("6 ok, 0 failed, 1 retries") != std::string::npos);
  CHECK(table.find("hit ratio 55.6% (device 55.6%, host 0.0%, disk 0.0%)") != std::string::npos);
}

TEST_CASE("run_bench with warmup prefetches every system prompt; concurrency keeps all records") {
  BenchFake fake(32);
  BenchOptions o;
  o.n_system_prompts = 3;
  o.system_tokens = 32;
  o.question_tokens = 4;
  o.concurrency = 4;
  o.n_requests = 12;
  o.output_tokens = 3;
  o.warmup = true;
  o.order = BenchOrder::kRandom;
  Result<BenchReport> r = run_bench(fake.d.options(), o);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(fake.n_prefetch == 3);
  REQUIRE(r->warmup.size() == 3);
  CHECK(r->warmup[2].result.prefill_tokens == 32);
  CHECK(r->summary.n_ok == 12);
  CHECK(r->summary.n_hits == 12);  // every system prompt was warmed
  CHECK(r->summary.hit_ratio == doctest::Approx(32.0 / 36.0).epsilon(1e-12));
  CHECK(r->summary.completion_tokens == 36);
  for (int32_t i = 0; i < 12; ++i) CHECK(r->records[static_cast<size_t>(i)].index == i);
  json j = bench_report_json(r.value());
  CHECK(j["warmup"].size() == 3);
  CHECK(j["warmup"][0]["prefill_tokens"] == 32);
  CHECK(j["options"]["order"] == "random");
}

TEST_CASE("run_bench fails fast when the daemon is unreachable and records failed requests") {
  const int dead_port = unused_port();
  ClientOptions opt;
  opt.port = dead_port;
  opt.connect_timeout_s = 1;
  BenchOptions o;
  o.n_requests = 2;
  Result<BenchReport> r = run_bench(opt, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("bench: daemon not healthy: ") == 0);

  FakeDaemon d;
  d.server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok","backend":"cpu"})", "application/json");
  });
  d.server.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    serve_error(res, 400, "token id 999 is outside the vocabulary (0..500)",
                "invalid_request_error", "prompt", nullptr);
  });
  d.start();
  o.n_system_prompts = 1;
  o.system_tokens = 4;
  o.question_tokens = 2;
  Result<BenchReport> failed = run_bench(d.options(), o);
  REQUIRE(failed.ok());
  CHECK(failed->summary.n_failed == 2);
  CHECK(failed->summary.n_ok == 0);
  CHECK(failed->records[0].http_status == 400);
  CHECK(failed->summary.first_error == "HTTP 400: token id 999 is outside the vocabulary (0..500)");
  json j = bench_report_json(failed.value());
  CHECK(j["summary"]["ttft_ms"]["p50"].is_null());
  CHECK(j["requests"][0]["ttft_ms"].is_null());
  CHECK(j["requests"][1]["error"] == "HTTP 400: token id 999 is outside the vocabulary (0..500)");
}
