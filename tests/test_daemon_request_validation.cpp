// Unit tests of request validation: JSON bodies (bounded parse) into engine
// Requests or ApiErrors (daemon/validation/request_validation.h).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "daemon/validation/request_validation.h"
#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/shared_dir.h"

using nlohmann::json;
using namespace prefixd;

namespace {

ModelInfo ids_only_model() {
  ModelInfo m;
  m.id = "m";
  m.n_ctx = 512;
  m.n_vocab = 512;
  return m;
}

// The ApiError of a failed validation (fails the test when it succeeded).
ApiError error_of(const ApiResult<GenerationRequest>& r) {
  REQUIRE(!r.ok());
  return r.error();
}

}  // namespace

TEST_CASE("parse_json_body refuses malformed JSON and non-objects") {
  CHECK(parse_json_body("{\"a\": 1}").ok());
  auto bad = parse_json_body("{\"a\": ");
  REQUIRE(!bad.ok());
  CHECK(bad.error().status == 400);
  CHECK(bad.error().code == "invalid_json");
  CHECK(!parse_json_body("[1]").ok());
  CHECK(!parse_json_body("").ok());
  // A number beyond double range is malformed input, not an exception (found by fuzzing).
  auto overflow = parse_json_body("{\"top_p\": 1e400}");
  REQUIRE(!overflow.ok());
  CHECK(overflow.error().code == "invalid_json");
}

namespace {

// The ApiError of a body that parse_json_body refuses.
ApiError body_error(const std::string& body) {
  auto r = parse_json_body(body);
  REQUIRE(!r.ok());
  return r.error();
}

// `{"a": ` + levels - 1 arrays, closed: `levels` containers deep in all.
std::string nested_body(int levels) {
  return "{\"a\": " + std::string(static_cast<size_t>(levels - 1), '[') +
         std::string(static_cast<size_t>(levels - 1), ']') + "}";
}

// `{"p": [0, 0, ...]}` with n zeros: n + 2 values (the object and the array count).
std::string zeros_body(int64_t n) {
  std::string b = "{\"p\": [";
  b.reserve(static_cast<size_t>(2 * n + 16));
  for (int64_t i = 0; i < n; ++i) b += i == 0 ? "0" : ",0";
  return b + "]}";
}

}  // namespace

TEST_CASE("parse_json_body refuses an 8 MiB deeply nested body once it is 64 levels deep") {
  // {"a":[[[[... for 8 MiB, never closed: refused at the 65th level, not parsed further.
  const std::string body = "{\"a\":" + std::string(8u << 20, '[');
  ApiError e = body_error(body);
  CHECK(e.status == 400);
  CHECK(e.code == "json_too_deep");
  CHECK(e.param.empty());
  CHECK(e.message == "the body has JSON nesting deeper than 64 levels");
  // Closed, the same depth is still refused before its syntax matters.
  CHECK(body_error("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}").code ==
        "json_too_deep");
}

TEST_CASE("parse_json_body accepts 64 levels of nesting and refuses 65") {
  static_assert(kMaxJsonDepth == 64);
  CHECK(parse_json_body(nested_body(64)).ok());
  ApiError e = body_error(nested_body(65));
  CHECK(e.status == 400);
  CHECK(e.message == "the body has JSON nesting deeper than 64 levels");
  // Objects count as levels as arrays do.
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\":";
  objects += "1" + std::string(65, '}');
  CHECK(body_error(objects).message == "the body has JSON nesting deeper than 64 levels");
}

TEST_CASE("parse_json_body accepts 1,000,000 values and refuses one more") {
  static_assert(kMaxJsonValues == 1000000);
  auto ok = parse_json_body(zeros_body(kMaxJsonValues - 2));
  REQUIRE(ok.ok());
  CHECK(ok.value()["p"].size() == static_cast<size_t>(kMaxJsonValues - 2));
  ApiError e = body_error(zeros_body(kMaxJsonValues - 1));
  CHECK(e.status == 400);
  CHECK(e.code == "json_too_many_values");
  CHECK(e.param.empty());
  CHECK(e.message == "the body is JSON with more than 1000000 values");
  // Empty containers are values too.
  std::string empties = "{\"p\": [[]";
  for (int64_t i = 1; i < kMaxJsonValues; ++i) empties += ",{}";
  CHECK(body_error(empties + "]}").code == "json_too_many_values");
}

TEST_CASE("parse_json_body reports a syntax error with its position") {
  ApiError e = body_error("{\"a\": ");
  CHECK(e.status == 400);
  CHECK(e.code == "invalid_json");
  CHECK(e.message.rfind("the body is not valid JSON: [json.exception.parse_error.101] parse error "
                        "at line 1, column 7",
                        0) == 0);
}

TEST_CASE("cache_salt is at most 256 bytes") {
  static_assert(kMaxCacheSaltBytes == 256);
  const std::string salt_256(256, 's');
  const std::string salt_1m(1u << 20, 's');
  // Through the body parser, as the handlers call it.
  auto generation = [](const std::string& salt) {
    auto body = parse_json_body("{\"prompt\": [1, 2], \"cache_salt\": \"" + salt + "\"}");
    REQUIRE(body.ok());
    return validate_generation(body.value(), ids_only_model(), false);
  };
  auto ok = generation(salt_256);
  REQUIRE(ok.ok());
  CHECK(ok.value().request.cache_salt == salt_256);
  ApiError e = error_of(generation(salt_1m));
  CHECK(e.status == 400);
  CHECK(e.code == "invalid_value");
  CHECK(e.param == "cache_salt");
  CHECK(e.message == "'cache_salt' is 1048576 bytes; at most 256 bytes are accepted");
  CHECK(error_of(generation(salt_256 + "s")).message ==
        "'cache_salt' is 257 bytes; at most 256 bytes are accepted");

  // The cache endpoints' bodies too.
  auto p =
      validate_prompt_body(json{{"prompt", {1, 2}}, {"cache_salt", salt_256}}, ids_only_model());
  REQUIRE(p.ok());
  CHECK(p.value().cache_salt == salt_256);
  auto big =
      validate_prompt_body(json{{"prompt", {1, 2}}, {"cache_salt", salt_1m}}, ids_only_model());
  REQUIRE(!big.ok());
  CHECK(big.error().status == 400);
  CHECK(big.error().param == "cache_salt");
  CHECK(big.error().message == "'cache_salt' is 1048576 bytes; at most 256 bytes are accepted");
}

TEST_CASE("validate_generation maps OpenAI fields onto the engine Request") {
  json body = {{"prompt", {1, 2, 3}}, {"max_tokens", 7},
               {"temperature", 0.5},  {"top_p", 0.9},
               {"top_k", 40},         {"min_p", 0.05},
               {"seed", 1234},        {"stop", "\n"},
               {"stream", true},      {"stream_options", {{"include_usage", true}}},
               {"cache_salt", "t1"},  {"repetition_penalty", 1.1},
               {"user", "u"},         {"n", 1}};
  auto r = validate_generation(body, ids_only_model(), false);
  REQUIRE(r.ok());
  const GenerationRequest& g = r.value();
  CHECK(g.request.prompt == std::vector<int32_t>{1, 2, 3});
  CHECK(g.request.max_tokens == 7);
  CHECK(g.request.sampling.temperature == doctest::Approx(0.5));
  CHECK(g.request.sampling.top_p == doctest::Approx(0.9));
  CHECK(g.request.sampling.top_k == 40);
  CHECK(g.request.sampling.min_p == doctest::Approx(0.05));
  CHECK(g.request.sampling.repetition_penalty == doctest::Approx(1.1));
  CHECK(g.request.sampling.has_seed);
  CHECK(g.request.sampling.seed == 1234);
  CHECK(g.request.stop == std::vector<std::string>{"\n"});
  CHECK(g.request.cache_salt == "t1");
  CHECK(g.stream);
  CHECK(g.include_usage);
  CHECK(!g.chat);
  CHECK(g.model == "m");
}

TEST_CASE("validate_generation defaults: 16 tokens, capped by the context") {
  auto r = validate_generation(json{{"prompt", {1, 2}}}, ids_only_model(), false);
  REQUIRE(r.ok());
  CHECK(r.value().request.max_tokens == 16);
  CHECK(r.value().request.sampling.temperature == doctest::Approx(1.0));
  CHECK(!r.value().request.sampling.has_seed);
  std::vector<int32_t> ids(505, 7);
  auto near_end = validate_generation(json{{"prompt", ids}}, ids_only_model(), false);
  REQUIRE(near_end.ok());
  CHECK(near_end.value().request.max_tokens == 7);
}

TEST_CASE("validate_generation errors name the field, with the right status and code") {
  const ModelInfo m = ids_only_model();
  ApiError e = error_of(validate_generation(json{{"prompt", {1}}, {"max_tokens", "x"}}, m, false));
  CHECK(e.status == 400);
  CHECK(e.param == "max_tokens");
  CHECK(e.code == "invalid_type");

  e = error_of(validate_generation(json{{"prompt", {1}}, {"model", "other"}}, m, false));
  CHECK(e.status == 404);
  CHECK(e.code == "model_not_found");

  e = error_of(validate_generation(json{{"prompt", json::array()}}, m, false));
  CHECK(e.code == "empty_prompt");

  e = error_of(validate_generation(json{{"prompt", {1, 512}}}, m, false));
  CHECK(e.code == "invalid_token_id");
  CHECK(e.message.find("512") != std::string::npos);
  CHECK(e.message.find("0..511") != std::string::npos);

  e = error_of(validate_generation(json{{"prompt", {1, 5000000000LL}}}, m, false));
  CHECK(e.code == "invalid_token_id");

  e = error_of(validate_generation(json{{"prompt", {1, 2.5}}}, m, false));
  CHECK(e.code == "invalid_type");

  std::vector<int32_t> ids(500, 3);
  e = error_of(validate_generation(json{{"prompt", ids}, {"max_tokens", 13}}, m, false));
  CHECK(e.code == "context_length_exceeded");
  CHECK(e.param == "max_tokens");
  CHECK(e.message ==
        "the prompt has 500 tokens and max_tokens is 13; together 513 tokens exceed the context "
        "length of 512 tokens");

  e = error_of(validate_generation(json{{"prompt", {1}}, {"n", 3}}, m, false));
  CHECK(e.param == "n");
  e = error_of(validate_generation(json{{"prompt", {1}}, {"temperature", -1}}, m, false));
  CHECK(e.code == "invalid_value");
  e = error_of(validate_generation(json{{"prompt", {1}}, {"stop", {1, 2}}}, m, false));
  CHECK(e.param == "stop");
  e = error_of(validate_generation(json{{"prompt", {1}}, {"stop", std::string(100000, 'x')}}, m, false));
  CHECK(e.param == "stop");
  CHECK(e.message == "a stop string is 100000 bytes; at most 1024 bytes are accepted");
  CHECK(
      validate_generation(json{{"prompt", {1}}, {"stop", std::string(1024, 'x')}}, m, false).ok());
  e = error_of(validate_generation(json{{"prompt", {1}}, {"stop", std::vector<std::string>(17, "a")}}, m, false));
  CHECK(e.message == "at most 16 stop strings are supported; got 17");
  e = error_of(validate_generation(json{{"prompt", {{1}, {2}}}}, m, false));
  CHECK(e.code == "unsupported_value");
  e = error_of(validate_generation(json{{"prompt", "text"}}, m, false));  // no tokenizer
  CHECK(e.code == "no_tokenizer");
  e = error_of(validate_generation(json{{"messages", json::array()}}, m, true));
  CHECK(e.code == "empty_prompt");
  e = error_of(
      validate_generation(json{{"messages", {{{"role", "user"}, {"content", 5}}}}}, m, true));
  CHECK(e.param == "messages[0].content");
}

TEST_CASE("chat accepts max_completion_tokens as max_tokens") {
  // Without a chat template the messages are refused after the fields parse.
  auto r = validate_generation(
      json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", -2}},
      ids_only_model(), true);
  ApiError e = error_of(r);
  CHECK(e.param == "max_completion_tokens");
}

TEST_CASE("text prompts are tokenized with BOS (stories260K tokenizer)") {
  auto file = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE(file.ok());
  auto tok = Tokenizer::from_gguf(*file.value());
  REQUIRE(tok.ok());
  ModelInfo m = ids_only_model();
  m.tokenizer = tok.value().get();
  auto r = validate_generation(json{{"prompt", "Once upon a time"}}, m, false);
  REQUIRE(r.ok());
  CHECK(r.value().request.prompt == std::vector<int32_t>{1, 403, 407, 261, 378});
  auto p = validate_prompt_body(json{{"prompt", "Once upon a time"}, {"cache_salt", "s"}}, m);
  REQUIRE(p.ok());
  CHECK(p.value().prompt.size() == 5);
  CHECK(p.value().cache_salt == "s");
  auto t = validate_tokenize(json{{"content", "Once upon a time"}}, m);
  REQUIRE(t.ok());
  CHECK(t.value() == std::vector<int32_t>{403, 407, 261, 378});
  const json both =
      json{{"prompt", "a"}, {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}};
  CHECK(!validate_prompt_body(both, m).ok());
}
