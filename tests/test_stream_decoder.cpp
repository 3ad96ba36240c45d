// Stream decoder and UTF-8 helper tests: held-back partial characters,
// replacement of ill-formed bytes, agreement with whole-sequence decode.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/text/stream_decoder.h"
#include "engine/text/tokenizer.h"
#include "tests/shared_dir.h"

using namespace prefixd;

namespace {

std::unique_ptr<Tokenizer> stories_tokenizer() {
  auto gguf = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE_MESSAGE(gguf.ok(), gguf.message());
  auto tok = Tokenizer::from_gguf(**gguf);
  REQUIRE_MESSAGE(tok.ok(), tok.message());
  return std::move(tok).value();
}

int32_t byte_token(const Tokenizer& tok, int b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  const int32_t id = tok.find_token(name);
  REQUIRE(id >= 0);
  return id;
}

}  // namespace

TEST_CASE("utf8 helpers: validity, maximal-subpart replacement, incomplete tails") {
  CHECK(utf8::is_valid("h\xC3\xA9 \xF0\x9F\x99\x82"));
  CHECK_FALSE(utf8::is_valid("\xC0\xAF"));          // overlong
  CHECK_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  CHECK_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(utf8::is_valid("\xE2\x82"));          // truncated
  const std::string r = "\xEF\xBF\xBD";
  CHECK(utf8::sanitize("a\xFF" "b") == "a" + r + "b");
  CHECK(utf8::sanitize("a\xE2\x82" "b") == "a" + r + "b");          // one maximal subpart
  CHECK(utf8::sanitize("\xED\xA0\x80") == r + r + r);               // ED then 2 stray bytes
  CHECK(utf8::sanitize("\xF0\x9F\x98") == r);
  CHECK(utf8::incomplete_tail_bytes("ab\xF0\x9F\x98") == 3);
  CHECK(utf8::incomplete_tail_bytes("ab\xE2") == 1);
  CHECK(utf8::incomplete_tail_bytes("ab\xC3\xA9") == 0);
  CHECK(utf8::incomplete_tail_bytes("ab\x80") == 0);  // a stray continuation never completes
}

TEST_CASE("stream decoder holds back a character split over byte tokens") {
  auto tok = stories_tokenizer();
  StreamDecoder d(*tok);
  // 🙂 = F0 9F 99 82 as four byte-fallback tokens.
  CHECK(d.push(byte_token(*tok, 0xF0)) == "");
  CHECK(d.push(byte_token(*tok, 0x9F)) == "");
  CHECK(d.push(byte_token(*tok, 0x99)) == "");
  CHECK(d.pending_bytes() == 3);
  CHECK(d.push(byte_token(*tok, 0x82)) == "\xF0\x9F\x99\x82");
  CHECK(d.pending_bytes() == 0);
  // A broken sequence is replaced as soon as it cannot complete.
  CHECK(d.push(byte_token(*tok, 0xE2)) == "");
  CHECK(d.push(byte_token(*tok, 0x41)) == "\xEF\xBF\xBD" "A");
  // A truncated tail at the end of the stream becomes one U+FFFD.
  CHECK(d.push(byte_token(*tok, 0xE2)) == "");
  CHECK(d.flush() == "\xEF\xBF\xBD");
  CHECK(d.flush() == "");
}

TEST_CASE("stream decoder drops control tokens and keeps the continuation space") {
  auto tok = stories_tokenizer();
  StreamDecoder d(*tok);
  CHECK(d.push(tok->bos_id()) == "");
  CHECK(d.push(tok->eos_id()) == "");
  CHECK(d.push(tok->find_token("\xE2\x96\x81" "the")) == " the");
  StreamDecoder start(*tok, /*strip_leading_space=*/true);
  CHECK(start.push(tok->bos_id()) == "");
  CHECK(start.push(tok->find_token("\xE2\x96\x81" "the")) == "the");
  CHECK(start.push(tok->find_token("\xE2\x96\x81" "the")) == " the");
}

TEST_CASE("stream decoder output equals decode() for random id sequences") {
  auto tok = stories_tokenizer();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_id(0, tok->n_vocab() - 1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(1 + trial % 40);
    for (int32_t& id : ids) id = any_id(rng);
    StreamDecoder d(*tok, /*strip_leading_space=*/true);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = d.push(id);
      CHECK(utf8::is_valid(chunk));
      streamed += chunk;
    }
    streamed += d.flush();
    CHECK(streamed == tok->decode(ids));
  }
}
