// Byte-level BPE tokenizer tests: hand-built vocabularies for the merge and
// pre-tokenizer rules, and (when PREFIXD_TOKENIZER_ORACLE_DIR is set by
// tests/scripts/test_tokenizer_oracles.sh) the Llama 3 vocabulary against
// llama3-tokenizer-js on a 200+ string corpus.
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
#include "engine/text/tokenizer_bpe.h"

using namespace prefixd;
using json = nlohmann::json;

namespace {

std::string hex_decode(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Byte-mapped form of raw text ("Ġ" for space, ...).
std::string mapped(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) out += BpeTokenizer::byte_chars()[c];
  return out;
}

// 256 byte tokens, then merges building a few words, then control tokens.
TokenizerVocab tiny_vocab(const std::string& pre) {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(BpeTokenizer::byte_chars()[b]);
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "t"}, {"h", "e"}, {" t", "he"}, {"l", "l"}, {"ll", "o"}, {"h", "ello"},
      {"1", "2"}, {"12", "3"}, {"\n", "\n"},
  };
  // "hello" is built as h + ello, which needs "ello" = "e" + "llo".
  const std::vector<std::pair<std::string, std::string>> more = {{"e", "llo"}};
  auto add_merge = [&](const std::string& a, const std::string& b) {
    v.merges.push_back(mapped(a) + " " + mapped(b));
    const std::string joined = mapped(a + b);
    bool have = false;
    for (const std::string& t : v.tokens) have |= t == joined;
    if (!have) v.tokens.push_back(joined);
  };
  for (size_t i = 0; i < 5; ++i) add_merge(merges[i].first, merges[i].second);
  add_merge(more[0].first, more[0].second);
  for (size_t i = 5; i < merges.size(); ++i) add_merge(merges[i].first, merges[i].second);
  v.token_types.assign(v.tokens.size(), 1);
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}) {
    v.tokens.push_back(special);
    v.token_types.push_back(3);
  }
  const int32_t n = static_cast<int32_t>(v.tokens.size());
  v.bos_id = n - 3;
  v.eos_id = n - 2;
  v.add_bos = true;
  return v;
}

std::unique_ptr<Tokenizer> make(TokenizerVocab v) {
  auto tok = Tokenizer::create(std::move(v));
  REQUIRE_MESSAGE(tok.ok(), tok.message());
  return std::move(tok).value();
}

std::vector<std::string> pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token_to_piece(id));
  return out;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return json::parse(in);
}

}  // namespace

TEST_CASE("BPE byte-to-unicode mapping is GPT-2's") {
  CHECK(BpeTokenizer::byte_chars()[' '] == "\xC4\xA0");   // Ġ U+0120
  CHECK(BpeTokenizer::byte_chars()['\n'] == "\xC4\x8A");  // Ċ U+010A
  CHECK(BpeTokenizer::byte_chars()['A'] == "A");
  CHECK(BpeTokenizer::byte_chars()[0xAD] == "\xC5\x83");  // the last remapped byte, U+0143
  CHECK(BpeTokenizer::byte_chars()[0xFF] == "\xC3\xBF");  // ÿ maps to itself
}

TEST_CASE("BPE merges apply by rank within pre-tokenizer words") {
  auto tok = make(tiny_vocab("llama-bpe"));
  CHECK(pieces(*tok, tok->encode("hello the", false, false)) ==
        std::vector<std::string>{"hello", " the"});
  CHECK(pieces(*tok, tok->encode("1234567", false, false)) ==
        std::vector<std::string>{"123", "4", "5", "6", "7"});
  CHECK(tok->encode("", true, false) == std::vector<int32_t>{tok->bos_id()});
  const std::vector<int32_t> with_bos = tok->encode("the", true, false);
  CHECK(with_bos.front() == tok->bos_id());
  CHECK(tok->decode(with_bos) == "the");
}

TEST_CASE("BPE pre-tokenizers split digits as their models do") {
  // llama-bpe: runs of up to 3 digits; qwen2 and smollm: single digits; gpt-2: whole runs.
  auto llama = make(tiny_vocab("llama-bpe"));
  auto qwen = make(tiny_vocab("qwen2"));
  auto smol = make(tiny_vocab("smollm"));
  auto gpt2 = make(tiny_vocab("gpt-2"));
  CHECK(pieces(*llama, llama->encode("123123", false, false)) == std::vector<std::string>{"123", "123"});
  // lfm2 (Liquid LFM2): llama.cpp splits it as llama3.
  auto lfm2 = make(tiny_vocab("lfm2"));
  CHECK(pieces(*lfm2, lfm2->encode("123123", false, false)) == std::vector<std::string>{"123", "123"});
  CHECK(lfm2->encode("hello the 1234567", false, false) == llama->encode("hello the 1234567", false, false));
  CHECK(pieces(*qwen, qwen->encode("123", false, false)) == std::vector<std::string>{"1", "2", "3"});
  CHECK(pieces(*smol, smol->encode("123", false, false)) == std::vector<std::string>{"1", "2", "3"});
  CHECK(pieces(*gpt2, gpt2->encode("123123", false, false)) ==
        std::vector<std::string>{"123", "123"});  // one word "123123", merged by rank
  // Contractions: llama-bpe matches them case-insensitively, gpt-2 only lower case.
  auto default_pre = make(tiny_vocab("default"));
  CHECK(default_pre->decode(default_pre->encode("a+b = 1234!", false, false)) == "a+b = 1234!");
}

TEST_CASE("BPE qwen35 keeps combining marks inside words; qwen2 splits them off") {
  // "xé" with é as e + U+0301 (CC 81), and merges that build e + U+0301.
  auto with_mark_merges = [](const std::string& pre) {
    TokenizerVocab v = tiny_vocab(pre);
    for (const auto& [a, b] : {std::pair<std::string, std::string>{"\xCC", "\x81"}, {"e", "\xCC\x81"}}) {
      v.merges.push_back(mapped(a) + " " + mapped(b));
      v.tokens.push_back(mapped(a + b));
      v.token_types.push_back(1);
    }
    return make(std::move(v));
  };
  auto qwen35 = with_mark_merges("qwen35");
  auto qwen2 = with_mark_merges("qwen2");
  const std::string text = "xe\xCC\x81";
  CHECK(pieces(*qwen35, qwen35->encode(text, false, false)) == std::vector<std::string>{"x", "e\xCC\x81"});
  CHECK(pieces(*qwen2, qwen2->encode(text, false, false)) == std::vector<std::string>{"x", "e", "\xCC\x81"});
  CHECK(qwen35->decode(qwen35->encode(text, false, false)) == text);
}

TEST_CASE("BPE unknown pre-tokenizer is refused with its name") {
  auto tok = Tokenizer::create(tiny_vocab("no-such-pre"));
  REQUIRE_FALSE(tok.ok());
  CHECK(tok.message().find("no-such-pre") != std::string::npos);
  TokenizerVocab bad = tiny_vocab("gpt-2");
  bad.model = "wordpiece";
  auto tok2 = Tokenizer::create(bad);
  REQUIRE_FALSE(tok2.ok());
  CHECK(tok2.message().find("wordpiece") != std::string::npos);
}

TEST_CASE("BPE special tokens are parsed only with parse_special") {
  auto tok = make(tiny_vocab("llama-bpe"));
  const int32_t eot = tok->find_token("<|eot_id|>");
  CHECK(tok->eot_id() == eot);  // detected from its text
  CHECK(tok->is_end_of_generation(eot));
  CHECK(tok->is_end_of_generation(tok->eos_id()));
  const std::vector<int32_t> plain = tok->encode("a<|eot_id|>", false, false);
  CHECK(std::find(plain.begin(), plain.end(), eot) == plain.end());
  CHECK(tok->decode(plain) == "a<|eot_id|>");
  const std::vector<int32_t> parsed = tok->encode("a<|eot_id|>", false, true);
  CHECK(parsed == std::vector<int32_t>{tok->find_token("a"), eot});
  CHECK(tok->decode(parsed) == "a");  // control tokens render as nothing
}

TEST_CASE("BPE invalid UTF-8 becomes U+FFFD and all bytes of valid text round-trip") {
  auto tok = make(tiny_vocab("llama-bpe"));
  CHECK(tok->encode("x\xC3(", false, false) == tok->encode("x\xEF\xBF\xBD(", false, false));
  const std::string s = "h\xC3\xA9llo \xF0\x9F\x99\x82\n\n\ttabs  and   spaces ";
  CHECK(tok->decode(tok->encode(s, true, false)) == s);
  CHECK(tok->strips_leading_space() == false);
  CHECK(tok->decode(tok->encode(" lead", false, false)) == " lead");
}

TEST_CASE("oracle: Llama 3 BPE ids equal llama3-tokenizer-js on the corpus") {
  const char* dir = std::getenv("PREFIXD_TOKENIZER_ORACLE_DIR");
  REQUIRE(dir != nullptr);
  const json oracle = read_json(std::string(dir) + "/llama3.json");
  const std::vector<std::string> tokens = oracle["tokens"].get<std::vector<std::string>>();
  const std::vector<std::string> merges = oracle["merges"].get<std::vector<std::string>>();
  const std::vector<int32_t> types = oracle["token_types"].get<std::vector<int32_t>>();
  REQUIRE(tokens.size() == 128256);
  REQUIRE(merges.size() == 280147);

  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", "llama-bpe");
  writer.set_string_array("tokenizer.ggml.tokens", tokens);
  writer.set_i32_array("tokenizer.ggml.token_type", types);
  writer.set_string_array("tokenizer.ggml.merges", merges);
  writer.set_u32("tokenizer.ggml.bos_token_id", oracle["bos"].get<uint32_t>());
  writer.set_u32("tokenizer.ggml.eos_token_id", oracle["eos"].get<uint32_t>());
  writer.set_bool("tokenizer.ggml.add_bos_token", true);
  const std::string path = std::string(dir) + "/llama3-vocab.gguf";
  REQUIRE(writer.write_file(path).ok());
  auto gguf = GgufFile::open(path);
  REQUIRE_MESSAGE(gguf.ok(), gguf.message());
  auto tok_or = Tokenizer::from_gguf(**gguf);
  REQUIRE_MESSAGE(tok_or.ok(), tok_or.message());
  const Tokenizer& tok = **tok_or;
  CHECK(tok.eot_id() == 128009);
  CHECK(tok.is_end_of_generation(128009));
  CHECK(tok.is_end_of_generation(128001));

  size_t n_cases = 0, n_mismatch = 0, n_roundtrip = 0;
  for (const json& c : oracle["cases"]) {
    const std::string text = hex_decode(c["hex"]);
    const bool parse_special = c["parse_special"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, /*add_special=*/true, parse_special);
    ++n_cases;
    if (got != want) {
      ++n_mismatch;
      MESSAGE("mismatch for hex " << c["hex"].get<std::string>() << ": got " << json(got).dump()
                                  << " want " << json(want).dump());
    }
    if (utf8::is_valid(text) && !parse_special) {
      ++n_roundtrip;
      CHECK_MESSAGE(tok.decode(got) == text, "round trip of hex " << c["hex"].get<std::string>());
      StreamDecoder stream(tok, true);
      std::string streamed;
      for (int32_t id : got) streamed += stream.push(id);
      streamed += stream.flush();
      CHECK(streamed == text);
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
