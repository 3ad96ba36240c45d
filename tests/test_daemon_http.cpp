// Integration tests of the prefixd daemon: start the real binary on a free
// loopback port and talk HTTP to it (completions, chat, SSE, prefix-cache
// reporting, errors, disconnects, concurrency, cache endpoints, metrics,
// graceful shutdown).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"

using nlohmann::json;
using namespace prefixd::testing;

namespace {

// stories260K's greedy 64-token continuation of "Once upon a time"
// (shared/models/README.md; the same with llama2.c and llama.cpp).
const char* kStoriesReference =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";

std::vector<std::string> demo_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--model", "demo", "--threads", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string metrics_text(httplib::Client& c) {
  auto r = c.Get("/metrics");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

// Waits until /metrics shows no running or waiting request (or 30 s pass).
bool wait_engine_idle(httplib::Client& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string m = metrics_text(c);
    if (metric(m, "prefixd_requests_running") == 0 && metric(m, "prefixd_requests_waiting") == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

json completion(const json& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// A good request answered correctly: the daemon is still serving.
void check_still_serving(httplib::Client& c) {
  HttpAnswer h = get(c, "/health");
  CHECK(h.status == 200);
  HttpAnswer a = post_json(c, "/v1/completions", completion("Once upon a time", 4));
  CHECK(a.status == 200);
  CHECK(a.body["usage"]["completion_tokens"] == 4);
}

void check_error(const HttpAnswer& a, int status, const std::string& code,
                 const std::string& param) {
  CHECK(a.status == status);
  REQUIRE(a.body.is_object());
  REQUIRE(a.body.contains("error"));
  const json& e = a.body["error"];
  CHECK(e["message"].is_string());
  CHECK(!e["message"].get<std::string>().empty());
  CHECK(e["type"].is_string());
  CHECK(e.contains("param"));
  CHECK(e.contains("code"));
  if (!code.empty()) CHECK(e["code"] == code);
  if (!param.empty()) CHECK(e["param"] == param);
}

}  // namespace

TEST_CASE("greedy completion of 'Once upon a time' on stories260K is the reference sentence") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  HttpAnswer a = post_json(*c, "/v1/completions", completion("Once upon a time", 64));
  REQUIRE(a.status == 200);
  CHECK(a.body["object"] == "text_completion");
  CHECK(a.body["model"] == "stories260K");
  CHECK(a.body["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  const json& choice = a.body["choices"][0];
  CHECK(std::string("Once upon a time") + choice["text"].get<std::string>() == kStoriesReference);
  CHECK(choice["finish_reason"] == "length");
  CHECK(choice["token_ids"].size() == 64);
  CHECK(a.body["usage"]["prompt_tokens"] == 5);  // BOS + 4 (golden tokenization)
  CHECK(a.body["usage"]["completion_tokens"] == 64);
  CHECK(a.body["usage"]["total_tokens"] == 69);
  CHECK(a.body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  const json& pc = a.body["prefix_cache"];
  for (const char* k :
       {"cached_tokens", "device_tokens", "host_tokens", "disk_tokens", "prefill_tokens",
        "restore_path", "queue_ms", "restore_ms", "prefill_ms", "ttft_ms", "decode_ms"}) {
    CHECK_MESSAGE(pc.contains(k), k);
  }
  CHECK(pc["prefill_tokens"] == 5);

  // The same prompt as token ids gives the same tokens.
  HttpAnswer b =
      post_json(*c, "/v1/completions", completion(json::array({1, 403, 407, 261, 378}), 64));
  REQUIRE(b.status == 200);
  CHECK(b.body["choices"][0]["token_ids"] == choice["token_ids"]);
  CHECK(b.body["choices"][0]["text"] == choice["text"]);
  CHECK(d->stop() == 0);
}

TEST_CASE("without --model the daemon serves the bundled stories260K: the README's request") {
  // Only --threads (and the helper's --port 0 --cache-dir): the model and every engine setting
  // are the defaults, and the body is the README's first request (temperature 0: greedy).
  auto d = start_or_fail({"--threads", "1"});
  auto c = d->client();
  HttpAnswer a =
      post_json(*c, "/v1/completions",
                json{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}});
  REQUIRE(a.status == 200);
  CHECK(a.body["model"] == "stories260K");
  const std::string text = a.body["choices"][0]["text"].get<std::string>();
  CHECK_MESSAGE(text.rfind(", there was a little girl named Lily", 0) == 0, text);
  CHECK(std::string("Once upon a time") + text ==
        std::string(kStoriesReference).substr(0, 16 + text.size()));
  CHECK(a.body["usage"]["completion_tokens"] == 16);
  HttpAnswer m = get(*c, "/v1/models");
  REQUIRE(m.status == 200);
  CHECK(m.body["data"][0]["id"] == "stories260K");
  CHECK(d->stop() == 0);
}

TEST_CASE("models, tokenize, detokenize and health endpoints") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  HttpAnswer m = get(*c, "/v1/models");
  REQUIRE(m.status == 200);
  CHECK(m.body["object"] == "list");
  CHECK(m.body["data"][0]["id"] == "stories260K");
  CHECK(m.body["data"][0]["context_length"] == 512);
  CHECK(m.body["data"][0]["backend"] == "cpu");
  HttpAnswer t =
      post_json(*c, "/tokenize", json{{"content", "Once upon a time"}, {"add_special", true}});
  REQUIRE(t.status == 200);
  CHECK(t.body["tokens"] == json::array({1, 403, 407, 261, 378}));
  HttpAnswer t2 = post_json(*c, "/tokenize", json{{"content", "Once upon a time"}});
  CHECK(t2.body["tokens"] == json::array({403, 407, 261, 378}));
  HttpAnswer dt = post_json(*c, "/detokenize", json{{"tokens", {403, 407, 261, 378}}});
  REQUIRE(dt.status == 200);
  CHECK(dt.body["content"].get<std::string>().find("Once upon a time") != std::string::npos);
  HttpAnswer h = get(*c, "/health");
  CHECK(h.status == 200);
  CHECK(h.body["status"] == "ok");
  CHECK(d->stop() == 0);
}

TEST_CASE("streamed completion equals the plain one and ends with [DONE] after the usage chunk") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  HttpAnswer plain = post_json(*c, "/v1/completions", completion("Once upon a time", 40));
  REQUIRE(plain.status == 200);
  json body = completion("Once upon a time", 40);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  SseAnswer s = post_sse(*c, "/v1/completions", body);
  REQUIRE(s.status == 200);
  CHECK(s.content_type.find("text/event-stream") == 0);
  REQUIRE(s.data.size() >= 3);
  CHECK(s.data.back() == "[DONE]");
  std::string text;
  json ids = json::array();
  std::string finish;
  for (size_t i = 0; i + 1 < s.json.size(); ++i) {
    const json& ch = s.json[i];
    REQUIRE(ch["choices"].size() == 1);
    CHECK(ch["object"] == "text_completion");
    text += ch["choices"][0]["text"].get<std::string>();
    for (const json& id : ch["choices"][0]["token_ids"]) ids.push_back(id);
    if (!ch["choices"][0]["finish_reason"].is_null()) finish = ch["choices"][0]["finish_reason"];
  }
  CHECK(text == plain.body["choices"][0]["text"]);
  CHECK(ids == plain.body["choices"][0]["token_ids"]);
  CHECK(finish == "length");
  const json& usage_chunk = s.json.back();
  CHECK(usage_chunk["choices"].empty());
  CHECK(usage_chunk["usage"]["completion_tokens"] == 40);
  CHECK(usage_chunk["usage"]["prompt_tokens"] == 5);
  CHECK(usage_chunk["prefix_cache"].is_object());

  // Without include_usage there is no usage chunk.
  body.erase("stream_options");
  SseAnswer s2 = post_sse(*c, "/v1/completions", body);
  REQUIRE(s2.status == 200);
  CHECK(s2.data.back() == "[DONE]");
  for (const json& ch : s2.json) CHECK(!ch.contains("usage"));
  CHECK(d->stop() == 0);
}

TEST_CASE("stop strings end the completion before the stop text") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  json body = completion("Once upon a time", 64);
  body["stop"] = json::array({"Lily"});
  HttpAnswer a = post_json(*c, "/v1/completions", body);
  REQUIRE(a.status == 200);
  CHECK(a.body["choices"][0]["text"] == ", there was a little girl named ");
  CHECK(a.body["choices"][0]["finish_reason"] == "stop");
  CHECK(d->stop() == 0);
}

TEST_CASE("chat completions on the demo model (chatml), plain and streamed") {
  auto d = start_or_fail(demo_args());
  auto c = d->client();
  json msgs = json::array({{{"role", "system"}, {"content", "You are brief."}},
                           {{"role", "user"}, {"content", "Say something about the sea."}}});
  json body{{"model", "demo"}, {"messages", msgs}, {"max_tokens", 12}, {"temperature", 0}};
  HttpAnswer a = post_json(*c, "/v1/chat/completions", body);
  REQUIRE(a.status == 200);
  CHECK(a.body["object"] == "chat.completion");
  CHECK(a.body["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  const json& choice = a.body["choices"][0];
  CHECK(choice["message"]["role"] == "assistant");
  CHECK(choice["message"]["content"].is_string());
  CHECK(a.body["usage"]["completion_tokens"].get<int>() ==
        static_cast<int>(choice["token_ids"].size()));
  // The lookup endpoint tokenizes messages exactly as chat does.
  HttpAnswer l = post_json(*c, "/v1/cache/lookup", json{{"messages", msgs}});
  REQUIRE(l.status == 200);
  CHECK(l.body["prompt_tokens"] == a.body["usage"]["prompt_tokens"]);

  body["stream"] = true;
  SseAnswer s = post_sse(*c, "/v1/chat/completions", body);
  REQUIRE(s.status == 200);
  REQUIRE(s.json.size() >= 2);
  CHECK(s.data.back() == "[DONE]");
  CHECK(s.json[0]["object"] == "chat.completion.chunk");
  CHECK(s.json[0]["choices"][0]["delta"]["role"] == "assistant");
  std::string content;
  std::string finish;
  for (const json& ch : s.json) {
    const json& delta = ch["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!ch["choices"][0]["finish_reason"].is_null()) finish = ch["choices"][0]["finish_reason"];
  }
  CHECK(content == choice["message"]["content"]);
  CHECK(finish == choice["finish_reason"]);
  CHECK(d->stop() == 0);
}

TEST_CASE("a second request with the same prefix reports cached tokens") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, "
      "she saw a big, red ball.";
  HttpAnswer t = post_json(*c, "/tokenize", json{{"content", prompt}, {"add_special", true}});
  REQUIRE(t.status == 200);
  const int n = static_cast<int>(t.body["tokens"].size());
  REQUIRE(n > 33);
  HttpAnswer first = post_json(*c, "/v1/completions", completion(prompt, 8));
  REQUIRE(first.status == 200);
  CHECK(first.body["usage"]["prompt_tokens"] == n);
  CHECK(first.body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  HttpAnswer second = post_json(*c, "/v1/completions", completion(prompt, 8));
  REQUIRE(second.status == 200);
  // Full 16-token blocks are reused; the block holding the last prompt token
  // is always computed so the first output token has logits.
  const int expected_cached = ((n - 1) / 16) * 16;
  CHECK(second.body["usage"]["prompt_tokens_details"]["cached_tokens"] == expected_cached);
  CHECK(second.body["prefix_cache"]["device_tokens"] == expected_cached);
  CHECK(second.body["prefix_cache"]["prefill_tokens"] == n - expected_cached);
  CHECK(second.body["choices"][0]["token_ids"] == first.body["choices"][0]["token_ids"]);
  // A different cache_salt never shares blocks.
  json salted = completion(prompt, 8);
  salted["cache_salt"] = "tenant-b";
  HttpAnswer third = post_json(*c, "/v1/completions", salted);
  REQUIRE(third.status == 200);
  CHECK(third.body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  std::string m = metrics_text(*c);
  CHECK(metric(m, "prefixd_cached_tokens_total{tier=\"device\"}") == expected_cached);
  CHECK(metric(m, "prefixd_prompt_tokens_total") == 3 * n);
  CHECK(metric(m, "prefixd_generated_tokens_total") == 24);
  CHECK(metric(m, "prefixd_requests_total{status=\"completed\"}") == 3);
  CHECK(d->stop() == 0);
}

TEST_CASE("invalid requests get JSON errors with the right status, and the daemon keeps serving") {
  auto d = start_or_fail(stories_args({"--max-body-bytes", "65536"}));
  auto c = d->client();

  SUBCASE("malformed JSON") {
    check_error(post_raw(*c, "/v1/completions", "{\"prompt\": \"abc\", "), 400, "invalid_json", "");
    check_error(post_raw(*c, "/v1/completions", "[1, 2]"), 400, "invalid_json", "");
    CHECK(metric(metrics_text(*c), "prefixd_requests_total{status=\"invalid\"}") == 2);
  }
  SUBCASE("JSON nested deeper than 64 levels and an over-long cache_salt") {
    // 60000 open brackets (within the 64 KiB body limit): refused at level 65.
    HttpAnswer a = post_raw(*c, "/v1/completions", "{\"prompt\": " + std::string(60000, '[') + "0");
    check_error(a, 400, "json_too_deep", "");
    CHECK(a.body["error"]["message"] == "the body has JSON nesting deeper than 64 levels");
    json b = completion("Once", 4);
    b["cache_salt"] = std::string(1024, 's');
    HttpAnswer salt = post_json(*c, "/v1/completions", b);
    check_error(salt, 400, "invalid_value", "cache_salt");
    CHECK(salt.body["error"]["message"] ==
          "'cache_salt' is 1024 bytes; at most 256 bytes are accepted");
    check_error(post_json(*c, "/v1/cache/lookup",
                          json{{"prompt", "Once"}, {"cache_salt", std::string(257, 's')}}),
                400, "invalid_value", "cache_salt");
    CHECK(metric(metrics_text(*c), "prefixd_requests_total{status=\"invalid\"}") == 2);
  }
  SUBCASE("wrong types") {
    json b = completion("Once", 4);
    b["max_tokens"] = "ten";
    check_error(post_json(*c, "/v1/completions", b), 400, "invalid_type", "max_tokens");
    b = completion("Once", 4);
    b["temperature"] = "hot";
    check_error(post_json(*c, "/v1/completions", b), 400, "invalid_type", "temperature");
    b = completion("Once", 4);
    b["prompt"] = 42;
    check_error(post_json(*c, "/v1/completions", b), 400, "invalid_type", "prompt");
    b = completion("Once", 4);
    b["stream"] = "yes";
    check_error(post_json(*c, "/v1/completions", b), 400, "invalid_type", "stream");
    check_error(post_json(*c, "/v1/chat/completions", json{{"messages", "hi"}}), 400,
                "invalid_type", "messages");
  }
  SUBCASE("unknown model") {
    json b = completion("Once", 4);
    b["model"] = "gpt-9";
    HttpAnswer a = post_json(*c, "/v1/completions", b);
    check_error(a, 404, "model_not_found", "model");
    CHECK(a.body["error"]["message"].get<std::string>().find("gpt-9") != std::string::npos);
  }
  SUBCASE("empty prompt") {
    check_error(post_json(*c, "/v1/completions", completion("", 4)), 400, "empty_prompt", "prompt");
    check_error(post_json(*c, "/v1/completions", completion(json::array(), 4)), 400, "empty_prompt",
                "prompt");
    check_error(post_json(*c, "/v1/completions", json{{"max_tokens", 4}}), 400, "missing_field",
                "prompt");
  }
  SUBCASE("prompt + max_tokens beyond the context names both numbers") {
    json ids = json::array();
    for (int i = 0; i < 500; ++i) ids.push_back(400);
    HttpAnswer a = post_json(*c, "/v1/completions", completion(ids, 100));
    check_error(a, 400, "context_length_exceeded", "max_tokens");
    const std::string msg = a.body["error"]["message"];
    CHECK(msg.find("500") != std::string::npos);
    CHECK(msg.find("100") != std::string::npos);
    CHECK(msg.find("512") != std::string::npos);
    json long_ids = json::array();
    for (int i = 0; i < 600; ++i) long_ids.push_back(400);
    check_error(post_json(*c, "/v1/completions", completion(long_ids, 1)), 400,
                "context_length_exceeded", "prompt");
  }
  SUBCASE("token ids outside the vocabulary") {
    HttpAnswer a = post_json(*c, "/v1/completions", completion(json::array({1, 99999}), 4));
    check_error(a, 400, "invalid_token_id", "prompt");
    CHECK(a.body["error"]["message"].get<std::string>().find("99999") != std::string::npos);
    check_error(post_json(*c, "/v1/completions", completion(json::array({1, -3}), 4)), 400,
                "invalid_token_id", "prompt");
    check_error(post_json(*c, "/detokenize", json{{"tokens", {512}}}), 400, "invalid_token_id",
                "tokens");
  }
  SUBCASE("oversized body") {
    std::string big(70000, 'a');
    HttpAnswer a = post_json(*c, "/v1/completions", completion(big, 4));
    check_error(a, 413, "request_too_large", "");
    CHECK(metric(metrics_text(*c), "prefixd_requests_total{status=\"invalid\"}") == 1);
  }
  SUBCASE("unsupported values") {
    json b = completion("Once", 4);
    b["n"] = 2;
    check_error(post_json(*c, "/v1/completions", b), 400, "unsupported_value", "n");
    b = completion("Once", 4);
    b["max_tokens"] = 0;
    check_error(post_json(*c, "/v1/completions", b), 400, "invalid_value", "max_tokens");
    b = completion("Once", 4);
    b["top_p"] = 1.5;
    check_error(post_json(*c, "/v1/completions", b), 400, "invalid_value", "");
    check_error(post_json(*c, "/v1/chat/completions",
                          json{{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}}),
                400, "invalid_value", "messages[0].role");
  }
  SUBCASE("unknown endpoint") { check_error(get(*c, "/v2/nothing"), 404, "not_found", ""); }
  check_still_serving(*c);
  CHECK(d->stop() == 0);
}

TEST_CASE("with an API key, every endpoint but /health needs the bearer token") {
  auto d = start_or_fail(stories_args({"--api-key", "s3cret"}));
  auto c = d->client();
  CHECK(get(*c, "/health").status == 200);
  check_error(get(*c, "/v1/models"), 401, "invalid_api_key", "");
  check_error(get(*c, "/metrics"), 401, "invalid_api_key", "");
  check_error(post_json(*c, "/v1/completions", completion("Once", 2)), 401, "invalid_api_key", "");
  check_error(
      post_json(*c, "/v1/completions", completion("Once", 2), {{"Authorization", "Bearer wrong"}}),
      401, "invalid_api_key", "");
  HttpAnswer ok =
      post_json(*c, "/v1/completions", completion("Once", 2), {{"Authorization", "Bearer s3cret"}});
  CHECK(ok.status == 200);
  CHECK(get(*c, "/v1/cache/stats", {{"Authorization", "Bearer s3cret"}}).status == 200);
  CHECK(d->stop() == 0);
}

TEST_CASE("a client that disconnects mid-stream cancels its request and its blocks are released") {
  auto d = start_or_fail(demo_args());
  auto c = d->client();
  json body{{"prompt", "The sea is"},
            {"max_tokens", 3000},
            {"temperature", 0},
            {"stream", true},
            {"ignore_eos", true}};
  SseAnswer s = post_sse(*c, "/v1/completions", body, [](size_t n_events) { return n_events < 5; });
  CHECK(s.aborted);
  CHECK(s.status == 200);
  auto c2 = d->client();
  REQUIRE(wait_engine_idle(*c2));
  std::string m = metrics_text(*c2);
  CHECK(metric(m, "prefixd_requests_total{status=\"cancelled\"}") == 1);
  CHECK(metric(m, "prefixd_requests_total{status=\"completed\"}") == 0);
  CHECK(metric(m, "prefixd_generated_tokens_total") < 3000);
  // Its published blocks are referenced until the write-through copies have
  // run on the idle-priority offload thread (slow on a busy machine): wait.
  HttpAnswer st;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    st = get(*c2, "/v1/cache/stats");
    REQUIRE(st.status == 200);
    if (st.body["tiers"]["device"]["blocks_referenced"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  CHECK(st.body["tiers"]["device"]["blocks_referenced"] == 0);
  CHECK(st.body["requests_running"] == 0);
  check_still_serving(*c2);
  CHECK(d->stop() == 0);
}

TEST_CASE("requests beyond max-concurrent + max-queued get 429 with Retry-After") {
  auto d = start_or_fail(demo_args({"--max-concurrent", "1", "--max-queued", "0"}));
  auto c = d->client();
  std::atomic<bool> first_token{false};
  std::atomic<bool> release{false};
  std::thread holder([&] {
    auto hc = d->client();
    json body{{"prompt", "The sea is"},
              {"max_tokens", 3000},
              {"temperature", 0},
              {"stream", true},
              {"ignore_eos", true}};
    post_sse(*hc, "/v1/completions", body, [&](size_t) {
      first_token = true;
      return !release.load();
    });
  });
  while (!first_token.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  HttpAnswer a = post_json(*c, "/v1/completions", completion("Once", 2));
  check_error(a, 429, "queue_full", "");
  auto retry = a.headers.find("Retry-After");
  REQUIRE(retry != a.headers.end());
  CHECK(retry->second == "1");
  release = true;
  holder.join();
  REQUIRE(wait_engine_idle(*c));
  // The slot is free again once the stream was cancelled.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  HttpAnswer b;
  do {
    b = post_json(*c, "/v1/completions", completion("Once", 2));
  } while (b.status == 429 && std::chrono::steady_clock::now() < deadline);
  CHECK(b.status == 200);
  CHECK(metric(metrics_text(*c), "prefixd_requests_total{status=\"rejected\"}") >= 1);
  CHECK(d->stop() == 0);
}

TEST_CASE("32 concurrent streaming clients each get the single-request output") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Tom", "The little dog",
                                            "One day, a girl"};
  const int kTokens = 48;
  std::vector<json> expected;
  for (const std::string& p : prompts) {
    HttpAnswer a = post_json(*c, "/v1/completions", completion(p, kTokens));
    REQUIRE(a.status == 200);
    expected.push_back(a.body["choices"][0]);
  }
  const int kClients = 32;
  std::vector<std::string> texts(kClients);
  std::vector<json> ids(kClients, json::array());
  std::vector<bool> done(kClients, false);
  std::vector<int> statuses(kClients, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto tc = d->client();
      json body = completion(prompts[i % prompts.size()], kTokens);
      body["stream"] = true;
      SseAnswer s = post_sse(*tc, "/v1/completions", body);
      statuses[i] = s.status == 0 ? -100 - static_cast<int>(s.error) : s.status;
      if (s.status != 200 || s.data.empty() || s.data.back() != "[DONE]") return;
      for (const json& ch : s.json) {
        texts[i] += ch["choices"][0]["text"].get<std::string>();
        for (const json& id : ch["choices"][0]["token_ids"]) ids[i].push_back(id);
      }
      done[i] = true;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    CAPTURE(i);
    CAPTURE(statuses[i]);
    CHECK(done[i]);
    CHECK(texts[i] == expected[i % prompts.size()]["text"]);
    CHECK(ids[i] == expected[i % prompts.size()]["token_ids"]);
  }
  REQUIRE(wait_engine_idle(*c));
  CHECK(d->stop() == 0);
}

TEST_CASE("cache endpoints: lookup, prefetch, pin, unpin, clear and stats") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, "
      "she saw a big, red ball.";
  HttpAnswer t = post_json(*c, "/tokenize", json{{"content", prompt}, {"add_special", true}});
  const int n = static_cast<int>(t.body["tokens"].size());
  const int full = (n / 16) * 16;

  HttpAnswer l0 = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt}});
  REQUIRE(l0.status == 200);
  CHECK(l0.body["prompt_tokens"] == n);
  CHECK(l0.body["cached_tokens"] == 0);

  HttpAnswer p = post_json(*c, "/v1/cache/prefetch", json{{"prompt", prompt}});
  REQUIRE(p.status == 200);
  CHECK(p.body["prompt_tokens"] == n);
  CHECK(p.body["cached_tokens"] == 0);
  CHECK(p.body["blocks"] == n / 16);

  HttpAnswer l1 = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt}});
  CHECK(l1.body["cached_tokens"] == full);
  CHECK(l1.body["device_tokens"] == full);
  // Another salt sees nothing.
  HttpAnswer l2 = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt}, {"cache_salt", "x"}});
  CHECK(l2.body["cached_tokens"] == 0);

  // A completion after the prefetch reuses its blocks.
  HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt, 4));
  CHECK(a.body["usage"]["prompt_tokens_details"]["cached_tokens"] == ((n - 1) / 16) * 16);

  HttpAnswer pin = post_json(*c, "/v1/cache/pin", json{{"prompt", prompt}});
  REQUIRE(pin.status == 200);
  CHECK(pin.body["pinned_blocks"] == n / 16);
  CHECK(pin.body["pinned_tokens"] == full);
  HttpAnswer st = get(*c, "/v1/cache/stats");
  REQUIRE(st.status == 200);
  CHECK(st.body["block_size"] == 16);
  CHECK(st.body["tiers"]["device"]["blocks_pinned"] == n / 16);
  CHECK(st.body["tiers"]["device"]["capacity_bytes"].get<int64_t>() > 0);
  for (const char* tier : {"device", "host", "disk"}) {
    for (const char* k :
         {"capacity_bytes", "used_bytes", "blocks", "hits", "misses", "evictions"}) {
      CHECK_MESSAGE(st.body["tiers"][tier].contains(k), tier << "." << k);
    }
  }
  // Pinned blocks survive a clear; unpinned ones do not.
  HttpAnswer cl = to_answer(c->Delete("/v1/cache"));
  REQUIRE(cl.status == 200);
  HttpAnswer l3 = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt}});
  CHECK(l3.body["cached_tokens"] == full);
  HttpAnswer unpin = post_json(*c, "/v1/cache/unpin", json{{"prompt", prompt}});
  REQUIRE(unpin.status == 200);
  HttpAnswer cl2 = to_answer(c->Delete("/v1/cache"));
  REQUIRE(cl2.status == 200);
  CHECK(cl2.body["cleared_blocks"].get<int>() >= n / 16);
  HttpAnswer l4 = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt}});
  CHECK(l4.body["cached_tokens"] == 0);
  check_error(post_json(*c, "/v1/cache/lookup", json{{"prompt", 7}}), 400, "invalid_type",
              "prompt");
  CHECK(d->stop() == 0);
}

TEST_CASE("pins and prefetches through the cache API show in /v1/cache/prefixes") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  std::vector<int32_t> pinned_prompt = {1}, prefetched_prompt = {1};
  for (int t = 1; t < 40; ++t) {
    pinned_prompt.push_back(3 + (t * 17) % 400);
    prefetched_prompt.push_back(5 + (t * 29) % 400);
  }
  REQUIRE(post_json(*c, "/v1/cache/prefetch", json{{"prompt", prefetched_prompt}}).status == 200);
  REQUIRE(post_json(*c, "/v1/cache/prefetch", json{{"prompt", prefetched_prompt}}).status == 200);
  // A pin of a prompt with nothing cached pins nothing and is not listed.
  HttpAnswer none = post_json(*c, "/v1/cache/pin", json{{"prompt", pinned_prompt}, {"cache_salt", "s"}});
  REQUIRE(none.status == 200);
  CHECK(none.body["pinned_blocks"] == 0);
  CHECK(get(*c, "/v1/cache/prefixes").body["prefixes"].size() == 1);
  REQUIRE(post_json(*c, "/v1/completions",
                    json{{"prompt", pinned_prompt}, {"cache_salt", "s"}, {"max_tokens", 1}})
              .status == 200);
  REQUIRE(post_json(*c, "/v1/cache/pin", json{{"prompt", pinned_prompt}, {"cache_salt", "s"}}).status == 200);
  HttpAnswer list = get(*c, "/v1/cache/prefixes");
  REQUIRE(list.status == 200);
  REQUIRE(list.body["prefixes"].size() == 2);
  json pinned_row, prefetched_row;
  for (const json& row : list.body["prefixes"]) {
    (row["cache_salt"] == "s" ? pinned_row : prefetched_row) = row;
  }
  CHECK(pinned_row["pinned"] == true);
  CHECK(pinned_row["prefetches"] == 0);
  CHECK(pinned_row["requests"] == 1);
  CHECK(pinned_row["tokens"] == 32);
  CHECK(pinned_row["tier"] == "device");
  CHECK(prefetched_row["pinned"] == false);
  CHECK(prefetched_row["prefetches"] == 2);
  CHECK(prefetched_row["prompt"] == json(std::vector<int32_t>(prefetched_prompt.begin(),
                                                              prefetched_prompt.begin() + 32)));
  // Unpinned through the API: the row says so.
  REQUIRE(post_json(*c, "/v1/cache/unpin", json{{"prompt", pinned_prompt}, {"cache_salt", "s"}}).status == 200);
  for (const json& row : get(*c, "/v1/cache/prefixes").body["prefixes"]) {
    if (row["cache_salt"] == "s") CHECK(row["pinned"] == false);
  }
  CHECK(d->stop() == 0);
}

TEST_CASE("metrics exposition has HELP and TYPE lines and histograms count requests") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  HttpAnswer a = post_json(*c, "/v1/completions", completion("Once upon a time", 10));
  REQUIRE(a.status == 200);
  auto r = c->Get("/metrics");
  REQUIRE(r);
  CHECK(r->get_header_value("Content-Type").find("text/plain") == 0);
  const std::string& m = r->body;
  for (const char* name :
       {"prefixd_prompt_tokens_total", "prefixd_cached_tokens_total",
        "prefixd_prefill_tokens_total", "prefixd_generated_tokens_total", "prefixd_requests_total",
        "prefixd_evictions_total", "prefixd_pool_used_bytes", "prefixd_pool_capacity_bytes",
        "prefixd_requests_running", "prefixd_requests_waiting", "prefixd_ttft_seconds",
        "prefixd_inter_token_latency_seconds", "prefixd_queue_time_seconds"}) {
    CHECK_MESSAGE(m.find(std::string("# HELP ") + name + " ") != std::string::npos, name);
    CHECK_MESSAGE(m.find(std::string("# TYPE ") + name + " ") != std::string::npos, name);
  }
  CHECK(metric(m, "prefixd_generated_tokens_total") == 10);
  CHECK(metric(m, "prefixd_prompt_tokens_total") == 5);
  CHECK(metric(m, "prefixd_prefill_tokens_total") == 5);
  CHECK(metric(m, "prefixd_ttft_seconds_count") == 1);
  CHECK(metric(m, "prefixd_ttft_seconds_bucket{le=\"+Inf\"}") == 1);
  CHECK(metric(m, "prefixd_inter_token_latency_seconds_count") == 9);
  CHECK(metric(m, "prefixd_queue_time_seconds_count") == 1);
  CHECK(metric(m, "prefixd_requests_running") == 0);
  CHECK(metric(m, "prefixd_pool_capacity_bytes") > 0);
  CHECK(d->stop() == 0);
}

TEST_CASE("TTFT is also split by cache hit and miss in prefixd_ttft_by_cache_seconds") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  std::vector<int32_t> prompt = {1};
  for (int t = 1; t < 40; ++t) prompt.push_back(3 + (t * 17) % 400);
  const json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
  HttpAnswer cold = post_json(*c, "/v1/completions", body);
  REQUIRE(cold.status == 200);
  REQUIRE(cold.body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  json stream_body = body;
  stream_body["stream"] = true;
  SseAnswer warm = post_sse(*c, "/v1/completions", stream_body);  // streamed: counted the same
  REQUIRE(warm.status == 200);
  const std::string m = c->Get("/metrics")->body;
  CHECK(m.find("# TYPE prefixd_ttft_by_cache_seconds histogram\n") != std::string::npos);
  CHECK(metric(m, "prefixd_ttft_by_cache_seconds_count{cache=\"miss\"}") == 1);
  CHECK(metric(m, "prefixd_ttft_by_cache_seconds_count{cache=\"hit\"}") == 1);
  CHECK(metric(m, "prefixd_ttft_by_cache_seconds_bucket{cache=\"hit\",le=\"+Inf\"}") == 1);
  CHECK(metric(m, "prefixd_ttft_seconds_count") == 2);
  CHECK(d->stop() == 0);
}

TEST_CASE("SIGTERM during a stream ends it and the daemon exits 0") {
  auto d = start_or_fail(demo_args({"--shutdown-grace-s", "1"}));
  std::atomic<bool> started{false};
  SseAnswer s;
  std::thread client([&] {
    auto c = d->client();
    json body{{"prompt", "The sea is"},
              {"max_tokens", 4000},
              {"temperature", 0},
              {"stream", true},
              {"ignore_eos", true}};
    s = post_sse(*c, "/v1/completions", body, [&](size_t) {
      started = true;
      return true;
    });
  });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(d->stop() == 0);
  client.join();
  // The stream either finished or was cut by shutdown; it ended with [DONE].
  REQUIRE(!s.data.empty());
  CHECK(s.data.back() == "[DONE]");
}

TEST_CASE("a JSON body sent as form-urlencoded (curl -d without -H) gets 415 naming application/json") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  json ids = json::array({1, 403, 407, 261, 378});
  std::string body = completion(ids, 4).dump();
  body.insert(1, std::string(20000, ' '));  // JSON whitespace: 20 KB body
  auto r = c->Post("/v1/completions", body, "application/x-www-form-urlencoded");
  REQUIRE(r);
  CHECK(r->status == 415);
  json j = json::parse(r->body, nullptr, false);
  CHECK(j["error"]["message"].get<std::string>().find("application/json") != std::string::npos);
  r = c->Post("/v1/completions", body, "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  j = json::parse(r->body, nullptr, false);
  CHECK(j["usage"]["completion_tokens"] == 4);
  CHECK(d->stop() == 0);
}
