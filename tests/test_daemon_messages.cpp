// Integration tests of the Anthropic Messages API (/v1/messages,
// /v1/messages/count_tokens) on the real daemon with the demo model (chatml):
// the message and its event stream, both key headers, Anthropic's error
// shape for every bad input, cache breakpoints pinned for their TTL with the
// usage they report turn by turn, the minimum, the pin budget and expiry; and
// the OpenAI side's prompt_cache_retention / prompt_cache_key.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd::testing;

namespace {

constexpr int kBlock = 16;  // the daemon's default --block-size

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

int pinned_blocks(httplib::Client& c) {
  HttpAnswer s = get(c, "/v1/cache/stats");
  REQUIRE(s.status == 200);
  return s.body["tiers"]["device"]["blocks_pinned"].get<int>();
}

// A system prompt long enough for a breakpoint at --min-cache-tokens 32.
const std::string kSystem =
    "You are a patient guide to the sea. You answer questions about tides, waves, currents, "
    "reefs, harbours and the animals of the open ocean in plain words, one short paragraph at "
    "a time, and you never invent facts about ships or storms.";

json text_block(const std::string& text, const char* ttl = nullptr) {
  json b{{"type", "text"}, {"text", text}};
  if (ttl) b["cache_control"] = {{"type", "ephemeral"}, {"ttl", ttl}};
  return b;
}

json messages_body(json messages, int max_tokens = 8) {
  return json{{"model", "demo"},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"messages", std::move(messages)}};
}

// An Anthropic event stream: the event names and their data, in order.
struct EventStream {
  int status = 0;
  std::vector<std::string> names;
  std::vector<json> data;
};

EventStream post_events(httplib::Client& c, const std::string& path, const json& body) {
  EventStream s;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    s.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("event: ", 0) != 0) continue;  // keep-alive comments
      const size_t nl = event.find('\n');
      REQUIRE(event.compare(nl + 1, 6, "data: ") == 0);
      s.names.push_back(event.substr(7, nl - 7));
      s.data.push_back(json::parse(event.substr(nl + 7)));
    }
    return true;
  };
  auto r = c.send(req);
  if (r && s.status == 0) s.status = r->status;
  return s;
}

// A 400 in Anthropic's shape whose message starts with `field`.
void check_invalid(const HttpAnswer& a, const std::string& field) {
  CHECK_MESSAGE(a.status == 400, a.raw);
  CHECK(a.body["type"] == "error");
  CHECK(a.body["error"]["type"] == "invalid_request_error");
  const std::string message = a.body["error"]["message"].get<std::string>();
  CHECK_MESSAGE(message.rfind(field + ": ", 0) == 0, message);
}

int usage_total(const json& usage) {
  return usage["input_tokens"].get<int>() + usage["cache_read_input_tokens"].get<int>() +
         usage["cache_creation_input_tokens"].get<int>();
}

int count_tokens(httplib::Client& c, json body) {
  body.erase("max_tokens");
  HttpAnswer a = post_json(c, "/v1/messages/count_tokens", body);
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  return a.body["input_tokens"].get<int>();
}

}  // namespace

TEST_CASE("/v1/messages answers a message rendered as chat completions renders it") {
  auto d = start_or_fail(demo_args());
  auto c = d->client();
  const json msgs = json::array({json{{"role", "user"}, {"content", "Tell me about the tides."}}});
  json body = messages_body(msgs);
  body["system"] = "Answer briefly.";
  HttpAnswer a = post_json(*c, "/v1/messages", body, {{"anthropic-version", "2023-06-01"}});
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  CHECK(a.body["type"] == "message");
  CHECK(a.body["role"] == "assistant");
  CHECK(a.body["model"] == "demo");
  CHECK(a.body["id"].get<std::string>().rfind("msg_", 0) == 0);
  REQUIRE(a.body["content"].size() == 1);
  CHECK(a.body["content"][0]["type"] == "text");
  const std::string reason = a.body["stop_reason"].get<std::string>();
  CHECK((reason == "end_turn" || reason == "max_tokens"));
  const json& u = a.body["usage"];
  if (reason == "max_tokens") CHECK(u["output_tokens"] == 8);
  CHECK(usage_total(u) == count_tokens(*c, body));
  CHECK(u["cache_creation"]["ephemeral_5m_input_tokens"] == 0);
  CHECK(u["cache_creation"]["ephemeral_1h_input_tokens"] == 0);

  // The same conversation through /v1/chat/completions: the same prompt, the same greedy text.
  json chat{{"model", "demo"},
            {"max_tokens", 8},
            {"temperature", 0},
            {"messages",
             json::array({json{{"role", "system"}, {"content", "Answer briefly."}}, msgs[0]})}};
  HttpAnswer o = post_json(*c, "/v1/chat/completions", chat);
  REQUIRE(o.status == 200);
  CHECK(o.body["usage"]["prompt_tokens"] == usage_total(u));
  CHECK(o.body["choices"][0]["message"]["content"] == a.body["content"][0]["text"]);
}

TEST_CASE("stop_sequences: the answer stops before the sequence and names it") {
  auto d = start_or_fail(demo_args());
  auto c = d->client();
  json body =
      messages_body(json::array({json{{"role", "user"}, {"content", "Tell me a story."}}}), 24);
  HttpAnswer full = post_json(*c, "/v1/messages", body);
  REQUIRE(full.status == 200);
  const std::string text = full.body["content"][0]["text"].get<std::string>();
  REQUIRE(text.size() >= 12);
  // A piece of the greedy answer's middle, cut at ASCII so it is whole characters.
  size_t from = text.size() / 2;
  while (from < text.size() && static_cast<unsigned char>(text[from]) >= 0x80) ++from;
  std::string stop = text.substr(from, 3);
  REQUIRE(stop.size() == 3);
  const size_t first = text.find(stop);
  body["stop_sequences"] = json::array({"never-in-this-text", stop});
  HttpAnswer cut = post_json(*c, "/v1/messages", body);
  REQUIRE_MESSAGE(cut.status == 200, cut.raw);
  CHECK(cut.body["stop_reason"] == "stop_sequence");
  CHECK(cut.body["stop_sequence"] == stop);
  CHECK(cut.body["content"][0]["text"] == text.substr(0, first));
}

TEST_CASE("a streamed message follows Anthropic's event order and matches the plain answer") {
  auto d = start_or_fail(demo_args());
  auto c = d->client();
  json body = messages_body(json::array({json{{"role", "user"}, {"content", "Waves?"}}}), 10);
  HttpAnswer plain = post_json(*c, "/v1/messages", body);
  REQUIRE(plain.status == 200);
  body["stream"] = true;
  EventStream s = post_events(*c, "/v1/messages", body);
  REQUIRE(s.status == 200);
  REQUIRE(s.names.size() >= 5);
  CHECK(s.names[0] == "message_start");
  CHECK(s.data[0]["message"]["role"] == "assistant");
  CHECK(s.data[0]["message"]["content"] == json::array());
  CHECK(s.names[1] == "content_block_start");
  CHECK(s.data[1]["content_block"] == json{{"type", "text"}, {"text", ""}});
  const size_t n = s.names.size();
  CHECK(s.names[n - 3] == "content_block_stop");
  CHECK(s.names[n - 2] == "message_delta");
  CHECK(s.names[n - 1] == "message_stop");
  std::string text;
  for (size_t i = 2; i + 3 < n; ++i) {
    CHECK(s.names[i] == "content_block_delta");
    CHECK(s.data[i]["delta"]["type"] == "text_delta");
    text += s.data[i]["delta"]["text"].get<std::string>();
  }
  for (size_t i = 0; i < n; ++i) CHECK(s.data[i]["type"] == s.names[i]);
  CHECK(text == plain.body["content"][0]["text"]);
  CHECK(s.data[n - 2]["delta"]["stop_reason"] == plain.body["stop_reason"]);
  CHECK(s.data[n - 2]["usage"]["output_tokens"] == plain.body["usage"]["output_tokens"]);
  CHECK(usage_total(s.data[n - 2]["usage"]) == usage_total(plain.body["usage"]));
}

TEST_CASE("x-api-key and Authorization: Bearer reach the same key; errors in Anthropic's shape") {
  auto d = start_or_fail(demo_args({"--api-key", "k-123"}));
  auto c = d->client();
  const json body = messages_body(json::array({json{{"role", "user"}, {"content", "Hi"}}}), 2);
  HttpAnswer none = post_json(*c, "/v1/messages", body);
  CHECK(none.status == 401);
  CHECK(none.body == json{{"type", "error"},
                          {"error",
                           {{"type", "authentication_error"},
                            {"message",
                             "missing API key: send 'Authorization: Bearer KEY' (or "
                             "'x-api-key: KEY')"}}}});
  HttpAnswer wrong = post_json(*c, "/v1/messages", body, {{"x-api-key", "nope"}});
  CHECK(wrong.status == 401);
  CHECK(wrong.body["error"]["type"] == "authentication_error");
  CHECK(post_json(*c, "/v1/messages", body, {{"x-api-key", "k-123"}}).status == 200);
  CHECK(post_json(*c, "/v1/messages", body, {{"Authorization", "Bearer k-123"}}).status == 200);
  // x-api-key works on the OpenAI routes too; the OpenAI routes keep their shape.
  CHECK(get(*c, "/v1/models", {{"x-api-key", "k-123"}}).status == 200);
  HttpAnswer openai = get(*c, "/v1/models");
  CHECK(openai.status == 401);
  CHECK(openai.body["error"]["code"] == "invalid_api_key");
  // No such path under /v1/messages: Anthropic's not_found_error.
  HttpAnswer missing = post_json(*c, "/v1/messages/batches", body, {{"x-api-key", "k-123"}});
  CHECK(missing.status == 404);
  CHECK(missing.body["error"]["type"] == "not_found_error");
}

TEST_CASE("every bad input is a 400 naming its field, and nothing is pinned") {
  auto d = start_or_fail(demo_args({"--min-cache-tokens", "1"}));
  auto c = d->client();
  const json user = json{{"role", "user"}, {"content", json::array({text_block("Hi", "5m")})}};
  auto one_user = [](json blocks) {
    return messages_body(json::array({json{{"role", "user"}, {"content", std::move(blocks)}}}));
  };
  auto with_cc = [&](json cc) {
    json b = text_block("Hi");
    b["cache_control"] = std::move(cc);
    return one_user(json::array({b}));
  };
  check_invalid(post_json(*c, "/v1/messages", with_cc(json{{"type", "persistent"}})),
                "messages.0.content.0.cache_control.type");
  check_invalid(post_json(*c, "/v1/messages", with_cc(json{{"type", "ephemeral"}, {"ttl", "10m"}})),
                "messages.0.content.0.cache_control.ttl");
  json five = json::array();
  for (int i = 0; i < 5; ++i) five.push_back(text_block("part " + std::to_string(i), "5m"));
  check_invalid(post_json(*c, "/v1/messages", one_user(five)),
                "messages.0.content.4.cache_control");
  check_invalid(post_json(*c, "/v1/messages",
                          one_user(json::array({text_block("a", "5m"), text_block("b", "1h")}))),
                "messages.0.content.1.cache_control.ttl");
  json no_max = messages_body(json::array({user}));
  no_max.erase("max_tokens");
  check_invalid(post_json(*c, "/v1/messages", no_max), "max_tokens");
  json zero_max = messages_body(json::array({user}));
  zero_max["max_tokens"] = 0;
  check_invalid(post_json(*c, "/v1/messages", zero_max), "max_tokens");
  for (const char* type : {"image", "document", "tool_use", "tool_result"}) {
    CAPTURE(type);
    check_invalid(post_json(*c, "/v1/messages",
                            one_user(json::array({text_block("see"), json{{"type", type}}}))),
                  "messages.0.content.1.type");
  }
  json tools = messages_body(json::array({user}));
  tools["tools"] = json::array({json{{"name", "get_weather"}}});
  check_invalid(post_json(*c, "/v1/messages", tools), "tools");
  check_invalid(post_json(*c, "/v1/messages",
                          messages_body(json::array({json{{"role", "system"}, {"content", "x"}}}))),
                "messages.0.role");
  json sys = messages_body(json::array({user}));
  sys["system"] = json::array({json{{"type", "image"}}});
  check_invalid(post_json(*c, "/v1/messages", sys), "system.0.type");
  check_invalid(post_json(*c, "/v1/messages/count_tokens", tools), "tools");
  HttpAnswer not_json = post_raw(*c, "/v1/messages", "{");
  CHECK(not_json.status == 400);
  CHECK(not_json.body["type"] == "error");
  CHECK(not_json.body["error"]["type"] == "invalid_request_error");

  CHECK(pinned_blocks(*c) == 0);
  CHECK(metric(metrics_text(*c), "prefixd_ttl_pins{ttl=\"5m\"}") == 0);
  CHECK(post_json(*c, "/v1/messages", messages_body(json::array({user}))).status == 200);
}

TEST_CASE("breakpoints on system and the last user turn: three turns of usage") {
  auto d = start_or_fail(demo_args({"--min-cache-tokens", "32"}));
  auto c = d->client();
  json system = json::array({text_block(kSystem, "1h")});
  json msgs = json::array();
  std::vector<std::string> questions = {"What makes the tide rise twice a day near the coast?",
                                        "And why are some waves taller than others out at sea?",
                                        "Which animals live on a coral reef in warm water?"};
  int previous_pinned_end = 0;  // tokens pinned under the last-turn breakpoint of the previous turn
  for (size_t turn = 0; turn < questions.size(); ++turn) {
    CAPTURE(turn);
    // The breakpoint moves to the newest user turn; earlier turns are plain.
    for (json& m : msgs) {
      if (m["role"] == "user") m["content"] = json::array({text_block(m["content"][0]["text"])});
    }
    msgs.push_back(
        {{"role", "user"}, {"content", json::array({text_block(questions[turn], "5m")})}});
    json body = messages_body(msgs);
    body["system"] = system;
    HttpAnswer a = post_json(*c, "/v1/messages", body);
    REQUIRE_MESSAGE(a.status == 200, a.raw);
    const json& u = a.body["usage"];
    CHECK(usage_total(u) == count_tokens(*c, body));
    const json& bps = u["cache_breakpoints"];
    REQUIRE(bps.size() == 2);
    CHECK(bps[0]["field"] == "system.0.cache_control");
    CHECK(bps[1]["field"] ==
          "messages." + std::to_string(msgs.size() - 1) + ".content.0.cache_control");
    const int sys_end = bps[0]["position_tokens"].get<int>();
    const int user_end = bps[1]["position_tokens"].get<int>();
    CHECK(sys_end >= 32);
    CHECK(user_end > sys_end);
    CHECK(bps[0]["pinned_tokens"] == sys_end / kBlock * kBlock);
    CHECK(bps[1]["pinned_tokens"] == user_end / kBlock * kBlock);
    const int read = u["cache_read_input_tokens"].get<int>();
    if (turn == 0) {
      CHECK(bps[0]["status"] == "pinned");
      CHECK(read == 0);
      CHECK(u["cache_creation"]["ephemeral_1h_input_tokens"] == sys_end / kBlock * kBlock);
      CHECK(u["cache_creation"]["ephemeral_5m_input_tokens"] ==
            user_end / kBlock * kBlock - sys_end / kBlock * kBlock);
    } else {
      // Turn n reads what turn n-1 pinned (and the blocks it cached after it).
      CHECK(bps[0]["status"] == "refreshed");
      CHECK(read >= previous_pinned_end);
      CHECK(read % kBlock == 0);
      CHECK(u["cache_creation"]["ephemeral_1h_input_tokens"] == 0);
      CHECK(u["cache_creation"]["ephemeral_5m_input_tokens"] ==
            std::max(0, user_end / kBlock * kBlock - read));
    }
    CHECK(bps[1]["status"] == "pinned");
    CHECK(u["cache_creation_input_tokens"] ==
          u["cache_creation"]["ephemeral_5m_input_tokens"].get<int>() +
              u["cache_creation"]["ephemeral_1h_input_tokens"].get<int>());
    previous_pinned_end = user_end / kBlock * kBlock;
    msgs.push_back({{"role", "assistant"}, {"content", a.body["content"][0]["text"]}});
    const std::string m = metrics_text(*c);
    CHECK(metric(m, "prefixd_ttl_pins{ttl=\"1h\"}") == 1);
    CHECK(metric(m, "prefixd_ttl_pins{ttl=\"5m\"}") == static_cast<double>(turn + 1));
  }
  // Every turn's last-user prefix holds its blocks: the longest one's blocks are pinned.
  CHECK(pinned_blocks(*c) == previous_pinned_end / kBlock);
  const std::string m = metrics_text(*c);
  // Hits: the system prefix on turns 2 and 3; misses: both on turn 1, the new turn's after.
  CHECK(metric(m, "prefixd_cache_breakpoints_total{result=\"hit\"}") == 2);
  CHECK(metric(m, "prefixd_cache_breakpoints_total{result=\"miss\"}") == 4);
  HttpAnswer list = get(*c, "/v1/cache/prefixes");
  REQUIRE(list.status == 200);
  CHECK(list.body["ttl_pins"].size() == 4);
}

TEST_CASE("below --min-cache-tokens nothing is cached, and the usage says so") {
  auto d = start_or_fail(demo_args());  // the default minimum: 1024 tokens
  auto c = d->client();
  json body = messages_body(
      json::array({json{{"role", "user"}, {"content", json::array({text_block(kSystem, "5m")})}}}));
  HttpAnswer a = post_json(*c, "/v1/messages", body);
  REQUIRE(a.status == 200);
  const json& bp = a.body["usage"]["cache_breakpoints"][0];
  CHECK(bp["status"] == "below_min_cache_tokens");
  CHECK(bp["pinned_tokens"] == 0);
  CHECK(a.body["usage"]["cache_creation_input_tokens"] == 0);
  CHECK(pinned_blocks(*c) == 0);
}

TEST_CASE("a full pin budget answers 200 with the breakpoint not pinned") {
  auto d = start_or_fail(demo_args({"--min-cache-tokens", "32", "--max-pinned-blocks", "1"}));
  auto c = d->client();
  json body = messages_body(
      json::array({json{{"role", "user"}, {"content", json::array({text_block(kSystem, "5m")})}}}));
  HttpAnswer a = post_json(*c, "/v1/messages", body);
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  const json& bp = a.body["usage"]["cache_breakpoints"][0];
  CHECK(bp["status"] == "pin_budget_full");
  CHECK(a.body["usage"]["cache_creation_input_tokens"] == 0);
  CHECK(usage_total(a.body["usage"]) == count_tokens(*c, body));
  CHECK(pinned_blocks(*c) == 0);
}

TEST_CASE("a pin is released when its TTL passes (--cache-ttl-scale)") {
  // 5m -> 0.6 s, 1h -> 7.2 s.
  auto d = start_or_fail(demo_args({"--min-cache-tokens", "32", "--cache-ttl-scale", "0.002"}));
  auto c = d->client();
  json body = messages_body(json::array({json{
      {"role", "user"},
      {"content",
       json::array({text_block(kSystem, "1h"),
                    text_block(" How deep is the ocean at its deepest point, and what lives down "
                               "there in the cold dark water far below the waves?",
                               "5m")})}}}));
  HttpAnswer a = post_json(*c, "/v1/messages", body);
  REQUIRE(a.status == 200);
  const json& bps = a.body["usage"]["cache_breakpoints"];
  REQUIRE(bps.size() == 2);
  CHECK(bps[0]["status"] == "pinned");
  CHECK(bps[1]["status"] == "pinned");
  const int long_blocks = bps[1]["pinned_tokens"].get<int>() / kBlock;
  const int short_blocks = bps[0]["pinned_tokens"].get<int>() / kBlock;
  REQUIRE(long_blocks > short_blocks);
  // Bounded wait for the 5m pin to go; the 1h pin's blocks stay pinned.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline &&
         metric(metrics_text(*c), "prefixd_ttl_pins{ttl=\"5m\"}") != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string m = metrics_text(*c);
  CHECK(metric(m, "prefixd_ttl_pins{ttl=\"5m\"}") == 0);
  HttpAnswer list = get(*c, "/v1/cache/prefixes");
  if (metric(m, "prefixd_ttl_pins{ttl=\"1h\"}") == 1) {
    CHECK(pinned_blocks(*c) == short_blocks);
    REQUIRE(list.body["ttl_pins"].size() == 1);
    CHECK(list.body["ttl_pins"][0]["ttl"] == "1h");
  }
  // Then the 1h pin goes too, and the pool holds nothing pinned.
  const auto deadline2 = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline2 && pinned_blocks(*c) != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(pinned_blocks(*c) == 0);
  CHECK(metric(metrics_text(*c), "prefixd_ttl_pins{ttl=\"1h\"}") == 0);
}

TEST_CASE("OpenAI's prompt_cache_retention \"24h\" pins the prompt; prompt_cache_key is accepted") {
  auto d = start_or_fail(demo_args({"--min-cache-tokens", "32"}));
  auto c = d->client();
  json body{{"model", "demo"},
            {"max_tokens", 4},
            {"temperature", 0},
            {"prompt_cache_key", "caller-7"},
            {"prompt_cache_retention", "24h"},
            {"messages", json::array({json{{"role", "system"}, {"content", kSystem}},
                                      json{{"role", "user"}, {"content", "Tides?"}}})}};
  HttpAnswer a = post_json(*c, "/v1/chat/completions", body);
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  const int prompt_tokens = a.body["usage"]["prompt_tokens"].get<int>();
  const json& kept = a.body["prefix_cache"]["retention"];
  CHECK(kept["ttl"] == "24h");
  CHECK(kept["status"] == "pinned");
  CHECK(kept["pinned_tokens"] == prompt_tokens / kBlock * kBlock);
  CHECK(pinned_blocks(*c) == prompt_tokens / kBlock);
  CHECK(metric(metrics_text(*c), "prefixd_ttl_pins{ttl=\"24h\"}") == 1);
  // The same prompt again reads it and refreshes the pin.
  HttpAnswer again = post_json(*c, "/v1/chat/completions", body);
  REQUIRE(again.status == 200);
  CHECK(again.body["prefix_cache"]["retention"]["status"] == "refreshed");
  CHECK(again.body["usage"]["prompt_tokens_details"]["cached_tokens"] ==
        prompt_tokens / kBlock * kBlock);
  // "in_memory" (OpenAI's default) pins nothing and reports nothing.
  body["prompt_cache_retention"] = "in_memory";
  HttpAnswer plain = post_json(*c, "/v1/chat/completions", body);
  REQUIRE(plain.status == 200);
  CHECK(!plain.body["prefix_cache"].contains("retention"));
  // Bad values: 400 in the OpenAI shape naming the field.
  body["prompt_cache_retention"] = "7d";
  HttpAnswer bad = post_json(*c, "/v1/chat/completions", body);
  CHECK(bad.status == 400);
  CHECK(bad.body["error"]["param"] == "prompt_cache_retention");
  body["prompt_cache_retention"] = "24h";
  body["prompt_cache_key"] = 7;
  bad = post_json(*c, "/v1/chat/completions", body);
  CHECK(bad.status == 400);
  CHECK(bad.body["error"]["param"] == "prompt_cache_key");
  CHECK(pinned_blocks(*c) == prompt_tokens / kBlock);
}

namespace {

// One message with a 5m breakpoint on the system prompt.
json pinned_conversation() {
  json body = messages_body(json::array({json{{"role", "user"}, {"content", "Tides?"}}}), 1);
  body["system"] = json::array({text_block(kSystem, "5m")});
  return body;
}

// Ten times the pool's blocks of other prompts, each one distinct from its first token.
void burst(httplib::Client& c, int pool_blocks) {
  int sent_blocks = 0;
  for (int i = 0; sent_blocks < 10 * pool_blocks; ++i) {
    std::string text = "Request " + std::to_string(i) + ":";
    for (int w = 0; w < 40; ++w) text += " word" + std::to_string(i * 40 + w);
    json body = messages_body(json::array({json{{"role", "user"}, {"content", text}}}), 1);
    HttpAnswer a = post_json(c, "/v1/messages", body);
    REQUIRE_MESSAGE(a.status == 200, a.raw);
    sent_blocks += usage_total(a.body["usage"]) / kBlock;
  }
}

}  // namespace

TEST_CASE("a pinned prefix survives ten pools of other traffic; once its TTL passed it does not") {
  // A 1 MiB device pool (32 blocks of the demo model) and no host tier: what
  // is evicted from the pool is gone.
  const std::vector<std::string> small = {"--kv-pool-mib",      "1", "--host-cache-gb", "0",
                                          "--min-cache-tokens", "32"};
  for (const bool expire : {false, true}) {
    CAPTURE(expire);
    std::vector<std::string> args = small;
    if (expire) args.insert(args.end(), {"--cache-ttl-scale", "0.002"});  // 5m -> 0.6 s
    auto d = start_or_fail(demo_args(args));
    auto c = d->client();
    const int pool_blocks =
        get(*c, "/v1/cache/stats").body["tiers"]["device"]["blocks_total"].get<int>();
    HttpAnswer first = post_json(*c, "/v1/messages", pinned_conversation());
    REQUIRE_MESSAGE(first.status == 200, first.raw);
    const json& bp = first.body["usage"]["cache_breakpoints"][0];
    REQUIRE(bp["status"] == "pinned");
    const int pinned = bp["pinned_tokens"].get<int>();
    if (expire) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < deadline && pinned_blocks(*c) != 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      REQUIRE(pinned_blocks(*c) == 0);
    }
    burst(*c, pool_blocks);
    HttpAnswer again = post_json(*c, "/v1/messages", pinned_conversation());
    REQUIRE(again.status == 200);
    const int read = again.body["usage"]["cache_read_input_tokens"].get<int>();
    if (expire) {
      CHECK(read == 0);  // evicted with the rest once unpinned
    } else {
      CHECK(read >= pinned);
      CHECK(again.body["usage"]["cache_breakpoints"][0]["status"] == "refreshed");
    }
  }
}

TEST_CASE("tenants: x-api-key selects the tenant, its namespace, its pin budget and its limits") {
  TempDir dir;
  const std::string path = dir.path + "/keys.json";
  std::ofstream(path) << json{{"keys",
                               {{{"key", "alice-key"},
                                 {"tenant", "alice"},
                                 {"role", "user"},
                                 {"limits", {{"max_pinned_blocks", 2}}}},
                                {{"key", "bob-key"},
                                 {"tenant", "bob"},
                                 {"role", "user"},
                                 {"limits", {{"requests_per_minute", 2}}}}}}}
                             .dump();
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  auto d = start_or_fail(demo_args({"--api-keys", path, "--min-cache-tokens", "32"}));
  auto c = d->client();
  const httplib::Headers alice{{"x-api-key", "alice-key"}}, bob{{"x-api-key", "bob-key"}};
  const json body = pinned_conversation();
  HttpAnswer a = post_json(*c, "/v1/messages", body, alice);
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  CHECK(a.body["usage"]["cache_breakpoints"][0]["status"] == "tenant_pin_limit");
  CHECK(a.body["usage"]["cache_creation_input_tokens"] == 0);
  // Bob's namespace is his own: nothing of Alice's is read, and his pin is his.
  HttpAnswer b = post_json(*c, "/v1/messages", body, bob);
  REQUIRE(b.status == 200);
  CHECK(b.body["usage"]["cache_read_input_tokens"] == 0);
  CHECK(b.body["usage"]["cache_breakpoints"][0]["status"] == "pinned");
  HttpAnswer b2 = post_json(*c, "/v1/messages", body, {{"Authorization", "Bearer bob-key"}});
  REQUIRE(b2.status == 200);
  CHECK(b2.body["usage"]["cache_breakpoints"][0]["status"] == "refreshed");
  // Bob's requests_per_minute (2) is spent: 429 in Anthropic's shape.
  HttpAnswer limited = post_json(*c, "/v1/messages", body, bob);
  CHECK(limited.status == 429);
  CHECK(limited.body["type"] == "error");
  CHECK(limited.body["error"]["type"] == "rate_limit_error");
  // A user key on an admin route, by x-api-key: 403 (an OpenAI-shaped route).
  HttpAnswer admin = get(*c, "/metrics", alice);
  CHECK(admin.status == 403);
  CHECK(admin.body["error"]["code"] == "insufficient_role");
}
