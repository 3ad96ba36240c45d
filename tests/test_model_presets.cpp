// Generated test models and the model fingerprint: exact shapes and metadata
// of every preset, byte-identical regeneration, the synthetic vocabulary, and
// fingerprint sensitivity and caching.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/model_fingerprint.h"
#include "engine/model/model_presets.h"
#include "tests/golden.h"
#include "tests/shared_dir.h"

using namespace prefixd;

namespace {

std::string test_dir() {
  std::string d = std::string(PREFIXD_BUILD_DIR) + "/test_model_presets." + std::to_string(::getpid());
  std::filesystem::create_directories(d);
  return d;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

GgmlType ggml_of(WeightType t) {
  return t == WeightType::F32 ? GgmlType::F32 : t == WeightType::F16 ? GgmlType::F16 : GgmlType::BF16;
}

// Checks every metadata value and tensor shape of a generated file against its spec.
void check_preset_file(const GgufFile& f, const PresetSpec& s, WeightType wt) {
  CAPTURE(s.name);
  CHECK(f.version() == 3);
  CHECK(*f.get_string("general.architecture") == "llama");
  CHECK(*f.get_string("general.name") == "prefixd-" + s.name);
  CHECK(*f.get_uint("llama.context_length") == static_cast<uint64_t>(s.n_ctx));
  CHECK(*f.get_uint("llama.embedding_length") == static_cast<uint64_t>(s.n_embd));
  CHECK(*f.get_uint("llama.block_count") == static_cast<uint64_t>(s.n_layers));
  CHECK(*f.get_uint("llama.feed_forward_length") == static_cast<uint64_t>(s.n_ff));
  CHECK(*f.get_uint("llama.attention.head_count") == static_cast<uint64_t>(s.n_heads));
  CHECK(*f.get_uint("llama.attention.head_count_kv") == static_cast<uint64_t>(s.n_kv_heads));
  CHECK(*f.get_float("llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
  CHECK(*f.get_float("llama.rope.freq_base") == static_cast<double>(s.rope_base));
  CHECK(*f.get_uint("llama.rope.dimension_count") == static_cast<uint64_t>(s.head_dim()));
  CHECK(*f.get_uint("llama.vocab_size") == static_cast<uint64_t>(s.n_vocab));
  CHECK(*f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_string_array("tokenizer.ggml.tokens")->size() == static_cast<size_t>(s.n_vocab));
  CHECK(f.get_float_array("tokenizer.ggml.scores")->size() == static_cast<size_t>(s.n_vocab));
  CHECK(f.get_int_array("tokenizer.ggml.token_type")->size() == static_cast<size_t>(s.n_vocab));
  CHECK(*f.get_uint("tokenizer.ggml.unknown_token_id") == 0);
  CHECK(*f.get_uint("tokenizer.ggml.bos_token_id") == 1);
  CHECK(*f.get_uint("tokenizer.ggml.eos_token_id") == 2);
  CHECK(*f.get_bool("tokenizer.ggml.add_bos_token") == true);
  CHECK(*f.get_bool("tokenizer.ggml.add_eos_token") == false);
  CHECK((f.find("tokenizer.chat_template") != nullptr) == s.chat_template);

  const int64_t E = s.n_embd, V = s.n_vocab, F = s.n_ff, D = s.head_dim();
  const GgmlType w = ggml_of(wt);
  size_t n_expected = 1 + 9 * static_cast<size_t>(s.n_layers) + 1 + (s.tied_output ? 0 : 1);
  CHECK(f.tensors().size() == n_expected);
  auto expect = [&](const std::string& name, GgmlType type, std::vector<int64_t> dims) {
    CAPTURE(name);
    const GgufTensorInfo* t = f.find_tensor(name);
    REQUIRE(t != nullptr);
    CHECK(t->type == type);
    CHECK(t->dims == dims);
    CHECK(t->n_bytes == ggml_type_bytes(type, t->n_elements()));
  };
  expect("token_embd.weight", w, {E, V});
  expect("output_norm.weight", GgmlType::F32, {E});
  if (s.tied_output) {
    CHECK(f.find_tensor("output.weight") == nullptr);
  } else {
    expect("output.weight", w, {E, V});
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    expect(p + "attn_norm.weight", GgmlType::F32, {E});
    expect(p + "attn_q.weight", w, {E, s.n_heads * D});
    expect(p + "attn_k.weight", w, {E, s.n_kv_heads * D});
    expect(p + "attn_v.weight", w, {E, s.n_kv_heads * D});
    expect(p + "attn_output.weight", w, {s.n_heads * D, E});
    expect(p + "ffn_norm.weight", GgmlType::F32, {E});
    expect(p + "ffn_gate.weight", w, {E, F});
    expect(p + "ffn_up.weight", w, {E, F});
    expect(p + "ffn_down.weight", w, {F, E});
  }
}

float weight_at(const GgufTensorInfo& t, int64_t i) {
  uint16_t h;
  switch (t.type) {
    case GgmlType::F32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case GgmlType::F16: std::memcpy(&h, t.data + 2 * i, 2); return f16_to_f32(h);
    case GgmlType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return bf16_to_f32(h);
    default: return 0;
  }
}

// A small llama-shaped file built with the writer (for metadata edits).
std::vector<uint8_t> small_model(float rope_base, const std::string& name, uint8_t weight_byte) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", name);
  w.set_string("general.url", "https://example.com/" + name);
  w.set_f32("llama.rope.freq_base", rope_base);
  w.set_u32("llama.block_count", 1);
  std::vector<uint8_t> data(64, 0x11);
  data[17] = weight_byte;
  w.add_tensor("token_embd.weight", GgmlType::F32, {4, 4}, data);
  return w.to_bytes();
}

Hash128 fp_of(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(f.ok(), f.message());
  return compute_model_fingerprint(**f);
}

// A 40-token prompt whole and split at a block edge + 1: the same logits,
// bit for bit, all finite.
void check_split_equals_whole(const Model& model) {
  std::vector<int32_t> ids = {1};
  for (int32_t i = 1; i < 40; ++i) ids.push_back(3 + (i * 37) % 1000);
  prefixd::testing::SequenceRunner whole(model, DType::BF16, 41);
  const std::vector<float> a = whole.run(ids, 0, false);
  prefixd::testing::SequenceRunner split(model, DType::BF16, 41);
  split.run(std::vector<int32_t>(ids.begin(), ids.begin() + 17), 0, false);
  const std::vector<float> b = split.run(std::vector<int32_t>(ids.begin() + 17, ids.end()), 17, false);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  for (float v : a) REQUIRE(std::isfinite(v));
}

}  // namespace

TEST_CASE("preset_spec knows the three presets and refuses others") {
  CHECK(preset_names() ==
        std::vector<std::string>{"tiny", "smol-135m", "demo", "llama-245m", "llama-1b",
                                 "gemma3-1b", "lfm2-tiny", "lfm2-350m", "qwen35-tiny", "qwen35-0.8b"});
  PresetSpec tiny = *preset_spec("tiny");
  CHECK(tiny.n_embd == 256);
  CHECK(tiny.n_layers == 4);
  CHECK(tiny.n_heads == 8);
  CHECK(tiny.n_kv_heads == 4);
  CHECK(tiny.n_ff == 768);
  CHECK(tiny.n_vocab == 32000);
  CHECK(tiny.n_ctx == 4096);
  CHECK(tiny.rope_base == 10000.0f);
  CHECK_FALSE(tiny.tied_output);
  PresetSpec smol = *preset_spec("smol-135m");
  CHECK(smol.n_embd == 576);
  CHECK(smol.n_layers == 30);
  CHECK(smol.n_heads == 9);
  CHECK(smol.n_kv_heads == 3);
  CHECK(smol.n_ff == 1536);
  CHECK(smol.n_vocab == 49152);
  CHECK(smol.n_ctx == 8192);
  CHECK(smol.rope_base == 100000.0f);
  CHECK(smol.head_dim() == 64);
  CHECK(smol.tied_output);
  PresetSpec demo = *preset_spec("demo");
  CHECK(demo.n_vocab == 4096);
  CHECK(demo.tied_output);
  CHECK(demo.chat_template);
  PresetSpec gemma = *preset_spec("gemma3-1b");  // Gemma 3 1B's shape
  CHECK(gemma.arch == "gemma3");
  CHECK(gemma.n_embd == 1152);
  CHECK(gemma.n_layers == 26);
  CHECK(gemma.n_heads == 4);
  CHECK(gemma.n_kv_heads == 1);
  CHECK(gemma.head_dim() == 256);
  CHECK(gemma.n_ff == 6912);
  CHECK(gemma.sliding_window == 512);
  CHECK(gemma.n_vocab == 262144);
  CHECK(gemma.tied_output);
  auto bad = preset_spec("huge");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("'huge'") != std::string::npos);
  CHECK(bad.message().find("smol-135m") != std::string::npos);
  CHECK_FALSE(write_preset_model("huge", WeightType::F32, test_dir() + "/x.gguf").ok());
  CHECK_FALSE(write_preset_model("demo", WeightType::Q8_0, test_dir() + "/x.gguf").ok());
}

TEST_CASE("every preset writes a file that GgufFile::open reads with the exact shapes") {
  const std::string dir = test_dir();
  struct Case {
    const char* preset;
    WeightType type;
  };
  for (Case c : {Case{"demo", WeightType::F32}, Case{"demo", WeightType::F16},
                 Case{"demo", WeightType::BF16}, Case{"tiny", WeightType::F16},
                 Case{"smol-135m", WeightType::BF16}}) {
    CAPTURE(c.preset);
    CAPTURE(static_cast<int>(c.type));
    const std::string path = dir + "/" + c.preset + ".gguf";
    Status s = write_preset_model(c.preset, c.type, path);
    REQUIRE_MESSAGE(s.ok(), s.message());
    auto f = GgufFile::open(path);
    REQUIRE_MESSAGE(f.ok(), f.message());
    check_preset_file(**f, *preset_spec(c.preset), c.type);
    // Weights are centred with stddev ~1/sqrt(fan_in); norms are near 1.
    const GgufTensorInfo* q = (*f)->find_tensor("blk.0.attn_q.weight");
    double sum = 0, sum_sq = 0;
    const int64_t n = q->n_elements();
    for (int64_t i = 0; i < n; ++i) {
      double x = weight_at(*q, i);
      sum += x;
      sum_sq += x * x;
    }
    const double fan_in = static_cast<double>(q->dims[0]);
    CHECK(std::abs(sum / n) < 0.05 / std::sqrt(fan_in));
    CHECK(std::sqrt(sum_sq / n) * std::sqrt(fan_in) == doctest::Approx(1.0).epsilon(0.03));
    const GgufTensorInfo* norm = (*f)->find_tensor("output_norm.weight");
    for (int64_t i = 0; i < norm->n_elements(); ++i) {
      CHECK(std::abs(weight_at(*norm, i) - 1.0f) < 0.2f);
    }
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("preset_tensors and preset_tensor_bytes describe exactly what the writer emits") {
  const std::string dir = test_dir();
  for (WeightType wt : {WeightType::F32, WeightType::BF16}) {
    const std::string path = dir + "/demo.gguf";
    REQUIRE(write_preset_model("demo", wt, path).ok());
    auto f = GgufFile::open(path);
    REQUIRE_MESSAGE(f.ok(), f.message());
    std::vector<PresetTensor> list = preset_tensors(*preset_spec("demo"));
    REQUIRE(list.size() == (*f)->tensors().size());
    uint64_t file_bytes = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      CAPTURE(list[i].name);
      const GgufTensorInfo& t = (*f)->tensors()[i];
      CHECK(t.name == list[i].name);
      CHECK(t.dims == list[i].dims);
      CHECK(t.type == (list[i].is_norm ? GgmlType::F32 : ggml_of(wt)));
      file_bytes += t.n_bytes;
    }
    CHECK(preset_tensor_bytes(*preset_spec("demo"), wt) == file_bytes);
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("lfm2 presets: LFM2-350M's layer kinds, and lfm2-tiny writes a file that loads and runs") {
  PresetSpec big = *preset_spec("lfm2-350m");
  CHECK(big.arch == "lfm2");
  CHECK(big.n_embd == 1024);
  CHECK(big.n_layers == 16);
  CHECK(big.attention_layers == std::vector<int32_t>{2, 5, 8, 10, 12, 14});
  CHECK(big.is_conv(0));
  CHECK_FALSE(big.is_conv(2));
  CHECK(big.n_ff == 4608);
  CHECK(big.n_vocab == 65536);
  // 10 convolution layers (kernel, in-, out-projection), 6 attention layers
  // (q, k, v, o and two head norms), each with 2 norms and 3 FFN matrices,
  // plus the embedding and the final norm.
  CHECK(preset_tensors(big).size() == size_t(10 * (3 + 5) + 6 * (6 + 5) + 2));

  const std::string dir = test_dir();
  const std::string path = dir + "/lfm2-tiny.gguf";
  REQUIRE(write_preset_model("lfm2-tiny", WeightType::BF16, path).ok());
  auto f = GgufFile::open(path);
  REQUIRE_MESSAGE(f.ok(), f.message());
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  auto model = Model::load(*f, *backend);
  REQUIRE_MESSAGE(model.ok(), model.message());
  const ModelConfig& c = (*model)->config();
  CHECK(c.arch == Arch::kLfm2);
  CHECK(c.layer_is_conv == std::vector<uint8_t>{1, 1, 0, 1, 1, 0});
  CHECK(c.n_kv_heads == 2);
  CHECK(c.conv_l_cache == 3);
  uint64_t file_bytes = 0;
  for (const GgufTensorInfo& t : (*f)->tensors()) file_bytes += t.n_bytes;
  CHECK(preset_tensor_bytes(*preset_spec("lfm2-tiny"), WeightType::BF16) == file_bytes);
  check_split_equals_whole(**model);
  std::filesystem::remove_all(dir);
}

TEST_CASE("llama-1b has Llama-3.2-1B's layer shapes (checked without writing its 2.2 GB)") {
  PresetSpec s = *preset_spec("llama-1b");
  CHECK(s.n_embd == 2048);
  CHECK(s.n_layers == 16);
  CHECK(s.n_heads == 32);
  CHECK(s.n_kv_heads == 8);
  CHECK(s.head_dim() == 64);
  CHECK(s.n_ff == 8192);
  CHECK(s.n_vocab == 32000);
  CHECK(s.n_ctx == 16384);
  CHECK(s.rope_base == 500000.0f);
  CHECK(s.rms_eps == 1e-5f);
  CHECK_FALSE(s.tied_output);
  CHECK_FALSE(s.chat_template);
  std::vector<PresetTensor> list = preset_tensors(s);
  REQUIRE(list.size() == 1 + 9 * 16 + 1 + 1);
  CHECK(list.front().name == "token_embd.weight");
  CHECK(list.front().dims == std::vector<int64_t>{2048, 32000});
  CHECK(list.back().name == "output.weight");
  CHECK(list.back().dims == std::vector<int64_t>{2048, 32000});
  CHECK(list[2].name == "blk.0.attn_q.weight");
  CHECK(list[2].dims == std::vector<int64_t>{2048, 2048});
  CHECK(list[3].dims == std::vector<int64_t>{2048, 512});  // 8 KV heads x 64
  CHECK(list[4].dims == std::vector<int64_t>{2048, 512});
  CHECK(list[7].name == "blk.0.ffn_gate.weight");
  CHECK(list[7].dims == std::vector<int64_t>{2048, 8192});
  CHECK(list[9].dims == std::vector<int64_t>{8192, 2048});
  // Parameters: 2 x 2048 x 32000 (embedding, output) + 16 x (2 x 2048^2 + 2 x 2048 x 512 +
  // 3 x 2048 x 8192) matrices; 33 norms of 2048 F32.
  const uint64_t matrix_params = 2ull * 2048 * 32000 +
                                 16ull * (2ull * 2048 * 2048 + 2ull * 2048 * 512 + 3ull * 2048 * 8192);
  CHECK(matrix_params == 1104150528ull);
  CHECK(preset_tensor_bytes(s, WeightType::BF16) == 2 * matrix_params + 33ull * 2048 * 4);
  CHECK(preset_tensor_bytes(s, WeightType::F32) == 4 * matrix_params + 33ull * 2048 * 4);
}

TEST_CASE("the same preset written twice is byte-identical and matches the recorded fingerprint") {
  const std::string dir = test_dir();
  REQUIRE(write_preset_model("demo", WeightType::BF16, dir + "/a.gguf").ok());
  REQUIRE(write_preset_model("demo", WeightType::BF16, dir + "/b.gguf").ok());
  std::vector<uint8_t> a = read_all(dir + "/a.gguf"), b = read_all(dir + "/b.gguf");
  REQUIRE(a.size() > 1000000);
  CHECK(a == b);
  // Recorded once: the generator gives these bytes on every machine and thread count.
  CHECK(fp_of(a).hex() == "aca955e95e6a8cde7381e23a4364001a");
  REQUIRE(write_preset_model("tiny", WeightType::F32, dir + "/t.gguf").ok());
  CHECK(fp_of(read_all(dir + "/t.gguf")).hex() == "ad7accf3c526c1b5fd57067f795e0a49");
  // Different weight types and presets give different files.
  REQUIRE(write_preset_model("demo", WeightType::F16, dir + "/c.gguf").ok());
  CHECK(fp_of(read_all(dir + "/c.gguf")) != fp_of(a));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the fingerprints of the shared real and converted model files are the recorded ones") {
  // Recorded once: files written by other tools (llama.cpp's converter), so every metadata value
  // type they use (string, f32 and i32 arrays, u32, f32) goes through the fingerprint's encoding.
  const std::string models = prefixd::testing::shared_dir() + "/models/";
  CHECK(fp_of(read_all(models + "stories260K.gguf")).hex() == "2f3bca576f28414020d6e0015c6775ce");
  CHECK(fp_of(read_all(models + "rand-mqa-f16.gguf")).hex() == "51a1e637b3cdb0a9d45b48f6c084ff81");
  CHECK(fp_of(read_all(models + "rand-qwen2-bf16.gguf")).hex() ==
        "8a70d81734b8796538f1e87432da5c22");
}

TEST_CASE("the synthetic vocabulary has unique pieces, byte tokens and SPM word prefixes") {
  for (bool chatml : {false, true}) {
    for (int32_t n : {1024, 4096, 32000, 49152}) {
      CAPTURE(n);
      std::vector<VocabPiece> v = synthetic_vocab(n, chatml);
      REQUIRE(v.size() == static_cast<size_t>(n));
      std::set<std::string> seen;
      for (const VocabPiece& p : v) CHECK_MESSAGE(seen.insert(p.text).second, p.text);
      CHECK(v[0].text == "<unk>");
      CHECK(v[0].type == 2);
      CHECK(v[1].text == "<s>");
      CHECK(v[1].type == 3);
      CHECK(v[2].text == "</s>");
      CHECK(v[2].type == 3);
      CHECK(v[3].text == "<0x00>");
      CHECK(v[3 + 0x41].text == "<0x41>");
      CHECK(v[258].text == "<0xFF>");
      for (int i = 3; i < 259; ++i) CHECK(v[i].type == 6);
      CHECK(v[259].text == "\xE2\x96\x81");
      CHECK(v[259].score == 0.0f);
      CHECK(v[260].score == -1.0f);
      // Normal pieces: type 1, scores strictly decreasing.
      const size_t n_normal_end = chatml ? v.size() - 2 : v.size();
      for (size_t i = 260; i < n_normal_end; ++i) {
        REQUIRE(v[i].type == 1);
        REQUIRE(v[i].score < v[i - 1].score);
      }
      if (chatml) {
        CHECK(v[n - 2].text == "<|im_start|>");
        CHECK(v[n - 1].text == "<|im_end|>");
        CHECK(v[n - 1].type == 3);
      }
      // Every letter with and without the space marker; common words whole, with all prefixes.
      for (char c = 'a'; c <= 'z'; ++c) {
        CHECK(seen.count(std::string(1, c)) == 1);
        CHECK(seen.count("\xE2\x96\x81" + std::string(1, c)) == 1);
      }
      for (const char* w : {"the", "and", "time", "little"}) {
        std::string word = w;
        for (size_t len = 1; len <= word.size(); ++len) {
          CHECK(seen.count("\xE2\x96\x81" + word.substr(0, len)) == 1);
        }
      }
    }
  }
  CHECK(synthetic_vocab(4096, false)[1000].text == synthetic_vocab(4096, false)[1000].text);
}

TEST_CASE("fingerprint changes with any weight byte or shaping metadata, not with names") {
  const std::vector<uint8_t> base = small_model(10000.0f, "one", 0x11);
  const Hash128 fp = fp_of(base);
  CHECK(fp.hex().size() == 32);
  CHECK(fp_of(small_model(10000.0f, "one", 0x11)) == fp);          // identical bytes
  CHECK(fp_of(small_model(10000.0f, "two", 0x11)) == fp);          // general.name, general.url
  CHECK(fp_of(small_model(10000.0f, "one", 0x12)) != fp);          // one weight byte
  CHECK(fp_of(small_model(500000.0f, "one", 0x11)) != fp);         // a shaping value

  // Every single-byte change inside the tensor data changes the fingerprint.
  auto f = GgufFile::parse(base.data(), base.size());
  REQUIRE(f.ok());
  const size_t data_start = (*f)->data_offset();
  for (size_t i = data_start; i < data_start + 64; ++i) {
    std::vector<uint8_t> b = base;
    b[i] ^= 0x01;
    CHECK(fp_of(b) != fp);
  }
  // Keys: general.* descriptive keys excluded, shaping keys included.
  CHECK_FALSE(fingerprint_hashes_key("general.name"));
  CHECK_FALSE(fingerprint_hashes_key("general.url"));
  CHECK_FALSE(fingerprint_hashes_key("general.description"));
  CHECK(fingerprint_hashes_key("general.architecture"));
  CHECK(fingerprint_hashes_key("general.alignment"));
  CHECK(fingerprint_hashes_key("llama.rope.freq_base"));
  CHECK(fingerprint_hashes_key("tokenizer.ggml.tokens"));

  // A tensor's type or shape is part of it even with the same bytes.
  GgufWriter w1, w2;
  w1.add_tensor("t", GgmlType::F16, {8}, std::vector<uint8_t>(16, 1));
  w2.add_tensor("t", GgmlType::BF16, {8}, std::vector<uint8_t>(16, 1));
  CHECK(fp_of(w1.to_bytes()) != fp_of(w2.to_bytes()));
  GgufWriter w3;
  w3.add_tensor("t", GgmlType::F16, {4, 2}, std::vector<uint8_t>(16, 1));
  CHECK(fp_of(w1.to_bytes()) != fp_of(w3.to_bytes()));
}

TEST_CASE("fingerprint cache is written, used on the next call and invalidated by a change") {
  const std::string dir = test_dir();
  const std::string model = dir + "/m.gguf";
  const std::string cache = dir + "/cache";
  write_all(model, small_model(10000.0f, "m", 0x21));
  auto f = GgufFile::open(model);
  REQUIRE(f.ok());
  const Hash128 real = compute_model_fingerprint(**f);

  auto first = model_fingerprint(**f, cache);
  REQUIRE(first.ok());
  CHECK(*first == real);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(cache + "/fingerprints")) {
    files.push_back(e.path());
  }
  REQUIRE(files.size() == 1);
  std::vector<uint8_t> text = read_all(files[0]);
  std::string s(text.begin(), text.end());
  CHECK(s.find(real.hex()) != std::string::npos);
  CHECK(s.find(std::filesystem::absolute(model).lexically_normal().string()) != std::string::npos);

  // Prove the second call reads the cache: plant a different value there.
  const std::string planted = "0123456789abcdef0123456789abcdef";
  s.replace(s.find(real.hex()), 32, planted);
  write_all(files[0], std::vector<uint8_t>(s.begin(), s.end()));
  auto second = model_fingerprint(**f, cache);
  REQUIRE(second.ok());
  CHECK(second->hex() == planted);

  // Rewriting the model (new mtime/inode/bytes) makes the entry stale: the file is rehashed.
  write_all(model + ".new", small_model(10000.0f, "m", 0x22));
  std::filesystem::rename(model + ".new", model);
  auto g = GgufFile::open(model);
  REQUIRE(g.ok());
  auto third = model_fingerprint(**g, cache);
  REQUIRE(third.ok());
  CHECK(*third == compute_model_fingerprint(**g));
  CHECK(*third != real);

  // A corrupt cache file is ignored.
  for (const auto& e : std::filesystem::directory_iterator(cache + "/fingerprints")) {
    write_all(e.path(), std::vector<uint8_t>{'x'});
  }
  CHECK(*model_fingerprint(**g, cache) == *third);

  // No cache dir, an unusable cache dir, or bytes without a path: computed, not cached.
  CHECK(*model_fingerprint(**g, "") == *third);
  CHECK(*model_fingerprint(**g, model + "/not-a-dir") == *third);
  std::vector<uint8_t> bytes = read_all(model);
  auto mem = GgufFile::parse(bytes.data(), bytes.size());
  REQUIRE(mem.ok());
  CHECK(*model_fingerprint(**mem, cache) == *third);
  std::filesystem::remove_all(dir);
}

TEST_CASE("qwen35 presets: Qwen3.5-0.8B's layer kinds, and qwen35-tiny writes a file that loads and runs") {
  PresetSpec big = *preset_spec("qwen35-0.8b");
  CHECK(big.arch == "qwen35");
  CHECK(big.n_embd == 1024);
  CHECK(big.n_layers == 24);
  CHECK(big.is_delta_net(0));
  CHECK(big.is_delta_net(2));
  CHECK_FALSE(big.is_delta_net(3));
  CHECK(big.head_dim() == 256);
  CHECK(big.n_vocab == 248320);
  // 18 DeltaNet layers (qkv, gate, beta, alpha, conv, dt bias, a, norm, out),
  // 6 attention layers (q, k, v, o and two head norms), each with 2 norms and
  // 3 FFN matrices, plus the embedding and the final norm.
  CHECK(preset_tensors(big).size() == size_t(18 * (9 + 5) + 6 * (6 + 5) + 2));

  const std::string dir = test_dir();
  const std::string path = dir + "/qwen35-tiny.gguf";
  REQUIRE(write_preset_model("qwen35-tiny", WeightType::BF16, path).ok());
  auto f = GgufFile::open(path);
  REQUIRE_MESSAGE(f.ok(), f.message());
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  auto model = Model::load(*f, *backend);
  REQUIRE_MESSAGE(model.ok(), model.message());
  const ModelConfig& c = (*model)->config();
  CHECK(c.layer_is_recurrent == std::vector<uint8_t>{1, 1, 1, 0});
  CHECK(c.delta_net.n_k_heads == 2);
  CHECK(c.delta_net.n_v_heads == 4);
  CHECK(c.delta_net.d_k == 32);
  CHECK(c.head_dim == 64);
  CHECK(c.rope_dim == 16);
  uint64_t file_bytes = 0;
  for (const GgufTensorInfo& t : (*f)->tensors()) file_bytes += t.n_bytes;
  CHECK(preset_tensor_bytes(*preset_spec("qwen35-tiny"), WeightType::BF16) == file_bytes);
  check_split_equals_whole(**model);
  std::filesystem::remove_all(dir);
}
