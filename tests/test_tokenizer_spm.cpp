// SPM tokenizer tests: stories260K against llama.cpp's golden tokenization,
// hand-built vocabularies for the edge rules, and (when
// PREFIXD_TOKENIZER_ORACLE_DIR is set by tests/scripts/test_tokenizer_oracles.sh)
// the Llama 2 vocabulary against llama-tokenizer-js on a 200+ string corpus.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/text/stream_decoder.h"
#include "engine/text/tokenizer.h"
#include "tests/shared_dir.h"

using namespace prefixd;
using json = nlohmann::json;

namespace {

std::string shared_path(const std::string& rel) { return prefixd::testing::shared_dir() + "/" + rel; }

std::string hex_decode(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string hex_encode(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return json::parse(in);
}

std::unique_ptr<Tokenizer> stories_tokenizer() {
  auto gguf = GgufFile::open(shared_path("models/stories260K.gguf"));
  REQUIRE_MESSAGE(gguf.ok(), gguf.message());
  auto tok = Tokenizer::from_gguf(**gguf);
  REQUIRE_MESSAGE(tok.ok(), tok.message());
  return std::move(tok).value();
}

// A small SPM vocabulary: control tokens, optional byte tokens, and pieces
// whose scores decide the merge order.
TokenizerVocab tiny_vocab(bool with_bytes) {
  TokenizerVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      v.tokens.push_back(name);
      v.token_types.push_back(6);
    }
  }
  for (const char* piece : {"\xE2\x96\x81", "a", "b", "c", "ab", "bc", "\xE2\x96\x81" "a", "abc",
                            "<", "s", ">", "<s", "\xC3\xA9"}) {
    v.tokens.push_back(piece);
    v.token_types.push_back(1);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  auto set_score = [&](const std::string& piece, float s) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.tokens[i] == piece) v.scores[i] = s;
    }
  };
  set_score("bc", -1.0f);  // preferred over "ab"
  set_score("ab", -2.0f);
  set_score("abc", -3.0f);
  set_score("\xE2\x96\x81" "a", -0.5f);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

std::unique_ptr<Tokenizer> make(TokenizerVocab v) {
  auto tok = Tokenizer::create(std::move(v));
  REQUIRE_MESSAGE(tok.ok(), tok.message());
  return std::move(tok).value();
}

std::vector<int32_t> ids_of(const Tokenizer& tok, std::initializer_list<const char*> texts) {
  std::vector<int32_t> ids;
  for (const char* t : texts) {
    const int32_t id = tok.find_token(t);
    REQUIRE_MESSAGE(id >= 0, "no token " << t);
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

TEST_CASE("stories260K metadata: vocabulary size, special ids and flags") {
  auto tok = stories_tokenizer();
  CHECK(tok->n_vocab() == 512);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->unk_id() == 0);
  CHECK(tok->add_bos());
  CHECK_FALSE(tok->add_eos());
  CHECK(tok->strips_leading_space());
  CHECK(tok->is_end_of_generation(2));
  CHECK_FALSE(tok->is_end_of_generation(1));
  CHECK_FALSE(tok->is_end_of_generation(403));
}

TEST_CASE("stories260K encode gives llama.cpp's ids and pieces for every golden string") {
  auto tok = stories_tokenizer();
  const json golden = read_json(shared_path("models/golden/stories260K.json"));
  REQUIRE(golden["tokenize"].size() == 20);
  for (const json& c : golden["tokenize"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    CAPTURE(text);
    CHECK(tok->encode(text, /*add_special=*/true, /*parse_special=*/false) == want);
    const auto& pieces = c["pieces"];
    REQUIRE(pieces.size() == want.size());
    for (size_t i = 1; i < want.size(); ++i) {  // [0] is BOS, which renders as nothing
      CHECK(hex_encode(tok->token_to_piece(want[i])) == pieces[i].get<std::string>());
    }
  }
}

TEST_CASE("stories260K decode(encode(s)) == s and the stream decoder agrees") {
  auto tok = stories_tokenizer();
  const json golden = read_json(shared_path("models/golden/stories260K.json"));
  for (const json& c : golden["tokenize"]) {
    const std::string text = c["text"];
    CAPTURE(text);
    const std::vector<int32_t> ids = tok->encode(text, true, false);
    CHECK(tok->decode(ids) == text);
    StreamDecoder stream(*tok, /*strip_leading_space=*/true);
    std::string streamed;
    for (int32_t id : ids) {
      streamed += stream.push(id);
      CHECK(utf8::is_valid(streamed));
    }
    streamed += stream.flush();
    CHECK(streamed == text);
  }
}

TEST_CASE("SPM continuation keeps the space of its first piece in the stream decoder") {
  auto tok = stories_tokenizer();
  const std::vector<int32_t> ids = tok->encode("Once upon a time", false, false);
  StreamDecoder continuation(*tok);
  std::string text;
  for (int32_t id : ids) text += continuation.push(id);
  text += continuation.flush();
  CHECK(text == " Once upon a time");
}

TEST_CASE("SPM special-token text is ordinary text unless parse_special") {
  auto tok = stories_tokenizer();
  const std::vector<int32_t> plain = tok->encode("<s>Hi</s>", false, false);
  for (int32_t id : plain) {
    CHECK(id != 1);
    CHECK(id != 2);
  }
  CHECK(tok->decode(plain) == "<s>Hi</s>");
  const std::vector<int32_t> parsed = tok->encode("<s>Hi</s>", false, true);
  REQUIRE(parsed.size() >= 3);
  CHECK(parsed.front() == 1);
  CHECK(parsed.back() == 2);
  // The text after a special token gets the space prefix, as in llama.cpp.
  std::vector<int32_t> middle(parsed.begin() + 1, parsed.end() - 1);
  CHECK(middle == tok->encode("Hi", false, false));
}

TEST_CASE("SPM merges follow scores, leftmost on ties") {
  auto tok = make([] {
    TokenizerVocab v = tiny_vocab(true);
    v.add_space_prefix = false;
    return v;
  }());
  // "abc": "bc" (-1) beats "ab" (-2); then "a"+"bc" = "abc" is a token.
  CHECK(tok->encode("abc", false, false) == ids_of(*tok, {"abc"}));
  // "abab" has no "ba": two "ab" merges.
  CHECK(tok->encode("abab", false, false) == ids_of(*tok, {"ab", "ab"}));
  // "bcbc" -> "bc" "bc"
  CHECK(tok->encode("bcbc", false, false) == ids_of(*tok, {"bc", "bc"}));
}

TEST_CASE("SPM add_space_prefix, byte fallback and unknown token") {
  auto tok = make(tiny_vocab(true));
  CHECK(tok->encode("a", true, false) == std::vector<int32_t>{1, tok->find_token("\xE2\x96\x81" "a")});
  CHECK(tok->encode("", true, false) == std::vector<int32_t>{1});
  // 'z' is not a token: its byte token <0x7A>.
  const std::vector<int32_t> z = tok->encode("z", false, false);
  CHECK(z == ids_of(*tok, {"\xE2\x96\x81", "<0x7A>"}));
  CHECK(tok->decode(z) == "z");
  // Without byte tokens an unknown character becomes <unk> (id 0), and the
  // merged "<s" + ">" never forms the control token "<s>".
  auto nobytes = make(tiny_vocab(false));
  CHECK(nobytes->encode("z", false, false) == std::vector<int32_t>{nobytes->find_token("\xE2\x96\x81"), 0});
  const std::vector<int32_t> lt = nobytes->encode("<s>", false, false);
  CHECK(lt == ids_of(*nobytes, {"\xE2\x96\x81", "<s", ">"}));
}

TEST_CASE("SPM ill-formed UTF-8 input is encoded as U+FFFD, one per maximal subpart") {
  auto tok = stories_tokenizer();
  CHECK(tok->encode("a\xFF" "b", true, false) == tok->encode("a\xEF\xBF\xBD" "b", true, false));
  // E2 82 is a truncated 3-byte sequence: one replacement.
  CHECK(tok->encode("a\xE2\x82" "b", true, false) == tok->encode("a\xEF\xBF\xBD" "b", true, false));
}

TEST_CASE("SPM encode_segments parses special tokens only in markup segments") {
  auto tok = stories_tokenizer();
  const std::vector<TextSegment> segs = {{"<s>", true}, {"say </s> now", false}, {"</s>", true}};
  const std::vector<int32_t> ids = tok->encode_segments(segs, false);
  REQUIRE(ids.size() >= 3);
  CHECK(ids.front() == 1);
  CHECK(ids.back() == 2);
  int n_eos = 0;
  for (int32_t id : ids) n_eos += id == 2;
  CHECK(n_eos == 1);
  CHECK(tok->decode(ids) == "say </s> now");
}

TEST_CASE("the synthetic SPM vocabularies of the random test models load and round-trip") {
  for (const char* model : {"models/rand-mqa-f16.gguf", "models/rand-qwen2-bf16.gguf"}) {
    CAPTURE(model);
    auto gguf = GgufFile::open(shared_path(model));
    REQUIRE_MESSAGE(gguf.ok(), gguf.message());
    auto tok = Tokenizer::from_gguf(**gguf);
    REQUIRE_MESSAGE(tok.ok(), tok.message());
    CHECK((*tok)->n_vocab() == 1024);
    const std::string text = "Hello world, caf\xC3\xA9 \xF0\x9F\x99\x82\n  two spaces";
    const std::vector<int32_t> ids = (*tok)->encode(text, true, false);
    CHECK(ids.front() == 1);
    CHECK((*tok)->decode(ids) == text);
  }
}

// ---- Oracle: llama-tokenizer-js (Llama 2) -------------------------------

TEST_CASE("oracle: Llama 2 SPM ids equal llama-tokenizer-js on the corpus") {
  const char* dir = std::getenv("PREFIXD_TOKENIZER_ORACLE_DIR");
  REQUIRE(dir != nullptr);
  const json oracle = read_json(std::string(dir) + "/llama2.json");
  const std::vector<std::string> tokens = oracle["tokens"].get<std::vector<std::string>>();
  const std::vector<float> scores = oracle["scores"].get<std::vector<float>>();
  const std::vector<int32_t> types = oracle["token_types"].get<std::vector<int32_t>>();
  REQUIRE(tokens.size() == 32000);

  // Write the vocabulary as GGUF tokenizer metadata and load it back, so the
  // test covers the metadata path the daemon uses.
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_string("tokenizer.ggml.model", "llama");
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_f32_array("tokenizer.ggml.scores", scores);
  writer.set_i32_array("tokenizer.ggml.token_type", types);
  writer.set_u32("tokenizer.ggml.bos_token_id", 1);
  writer.set_u32("tokenizer.ggml.eos_token_id", 2);
  writer.set_u32("tokenizer.ggml.unknown_token_id", 0);
  writer.set_bool("tokenizer.ggml.add_bos_token", true);
  const std::string path = std::string(dir) + "/llama2-vocab.gguf";
  REQUIRE(writer.write_file(path).ok());
  auto gguf = GgufFile::open(path);
  REQUIRE_MESSAGE(gguf.ok(), gguf.message());
  auto tok_or = Tokenizer::from_gguf(**gguf);
  REQUIRE_MESSAGE(tok_or.ok(), tok_or.message());
  const Tokenizer& tok = **tok_or;

  size_t n_cases = 0, n_mismatch = 0, n_roundtrip = 0;
  for (const json& c : oracle["cases"]) {
    const std::string text = hex_decode(c["hex"]);
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
    ++n_cases;
    if (got != want) {
      ++n_mismatch;
      MESSAGE("mismatch for hex " << c["hex"].get<std::string>() << ": got " << json(got).dump()
                                  << " want " << json(want).dump());
    }
    if (utf8::is_valid(text)) {
      ++n_roundtrip;
      CHECK_MESSAGE(tok.decode(got) == text, "round trip of hex " << c["hex"].get<std::string>());
    }
  }
  MESSAGE(n_cases << " corpus strings, " << n_roundtrip << " round-tripped");
  CHECK(n_cases >= 200);
  CHECK(n_mismatch == 0);
}

int main(int argc, char** argv) {
  doctest::Context context;
  if (std::getenv("PREFIXD_TOKENIZER_ORACLE_DIR") != nullptr) {
    context.addFilter("test-case", "oracle*");
  } else {
    context.addFilter("test-case-exclude", "oracle*");
  }
  context.applyCommandLine(argc, argv);
  return context.run();
}
