// Model quantization: llama.cpp's per-tensor mix rules against the files
// llama-quantize wrote, every mix of rand-mqa-f16 (types by name, the fallback
// for 704-value rows, metadata, round-trip error, loading), quantized presets,
// and the refusals.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/model/model_presets.h"
#include "engine/model/quant_mix.h"
#include "engine/model/quantize_model.h"
#include "kernels/backend.h"
#include "tests/temp_dir.h"
#include "tests/shared_dir.h"

using namespace prefixd;

namespace {

std::string shared_path(const std::string& rel) {
  return prefixd::testing::shared_dir() + "/" + rel;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<TensorShape> shapes_of(const GgufFile& f) {
  std::vector<TensorShape> out;
  for (const GgufTensorInfo& t : f.tensors()) out.push_back(TensorShape{t.name, t.dims});
  return out;
}

std::string type_of(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  return t == nullptr ? "(missing)" : weight_type_name(t->type);
}

// Whether every metadata value of `in` is in `out` unchanged, except general.file_type.
void check_metadata_kept(const GgufFile& in, const GgufFile& out) {
  for (const auto& [key, value] : in.metadata()) {
    CAPTURE(key);
    const GgufValue* v = out.find(key);
    REQUIRE(v != nullptr);
    if (key == "general.file_type") continue;
    std::vector<uint8_t> a, b;
    append_gguf_value(a, value);
    append_gguf_value(b, *v);
    CHECK(v->type == value.type);
    CHECK(a == b);
  }
}

}  // namespace

TEST_CASE("the mix rules give exactly the tensor types llama-quantize wrote in quant/rand-q-*") {
  const std::map<std::string, std::string> files = {
      {"rand-q-q4-0", "Q4_0"},     {"rand-q-q4-1", "Q4_1"}, {"rand-q-q5-0", "Q5_0"},
      {"rand-q-q5-1", "Q5_1"},     {"rand-q-q8-0", "Q8_0"}, {"rand-q-q4-k-m", "Q4_K_M"},
      {"rand-q-q5-k-m", "Q5_K_M"}, {"rand-q-q6-k", "Q6_K"},
  };
  for (const auto& [stem, mix_name] : files) {
    CAPTURE(stem);
    auto f = GgufFile::open(shared_path("models/quant/" + stem + ".gguf"));
    REQUIRE(f.ok());
    Result<QuantMix> mix = find_quant_mix(mix_name);
    REQUIRE(mix.ok());
    CHECK(*(*f)->get_uint("general.file_type") == mix->file_type);
    const std::vector<WeightType> planned = plan_quant_types(*mix, shapes_of(**f), 2);
    for (size_t i = 0; i < planned.size(); ++i) {
      CAPTURE((*f)->tensors()[i].name);
      CHECK(std::string(weight_type_name(planned[i])) == weight_type_name((*f)->tensors()[i].type));
    }
  }
}

TEST_CASE("requantizing llama.cpp's Q4_K_M keeps its types, its Q8_0 keeps its bytes") {
  testing::TempDir dir;
  for (const auto& [stem, mix] :
       {std::pair<std::string, std::string>{"rand-q-q4-k-m", "q4_k_m"}, {"rand-q-q8-0", "Q8_0"}}) {
    CAPTURE(stem);
    const std::string in_path = shared_path("models/quant/" + stem + ".gguf"),
                      out_path = dir.path + "/out.gguf";
    QuantizeReport report;
    Status s = quantize_model(in_path, out_path, mix, &report);
    REQUIRE_MESSAGE(s.ok(), s.message());
    auto in = GgufFile::open(in_path);
    auto out = GgufFile::open(out_path);
    REQUIRE(in.ok());
    REQUIRE(out.ok());
    REQUIRE((*out)->tensors().size() == (*in)->tensors().size());
    check_metadata_kept(**in, **out);
    for (const GgufTensorInfo& t : (*in)->tensors()) {
      CAPTURE(t.name);
      const GgufTensorInfo* o = (*out)->find_tensor(t.name);
      REQUIRE(o != nullptr);
      CHECK(o->type == t.type);
      CHECK(o->dims == t.dims);
      if (stem == "rand-q-q8-0") {
        REQUIRE(o->n_bytes == t.n_bytes);
        CHECK(std::memcmp(o->data, t.data, t.n_bytes) == 0);
      }
    }
    if (stem == "rand-q-q8-0") {
      for (const QuantizeTypeStats& st : report.by_type) {
        CAPTURE(weight_type_name(st.type));
        CHECK(st.max_abs_error == 0.0);
      }
    }
  }
}

TEST_CASE("every mix of rand-mqa-f16 has llama.cpp's types, the metadata, and loads") {
  // rand-mqa-f16: 2 layers, hidden 256, FFN 704 (ffn_down rows of 704 values: not a multiple of
  // 256, so the K types fall back: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), untied output, F16
  // matrices.
  struct Expect {
    const char* mix;
    uint32_t file_type;
    const char* token_embd;
    const char* output;
    const char* attn_q;
    const char* attn_v0;
    const char* attn_v1;
    const char* ffn_down0;
    const char* ffn_down1;
    double max_rel_rms;  // over the tensors of the mix's base type
  };
  const Expect cases[] = {
      {"Q8_0", 7, "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", 0.01},
      {"Q4_0", 2, "Q4_0", "Q6_K", "Q4_0", "Q4_0", "Q4_0", "Q4_0", "Q4_0", 0.13},
      {"Q4_1", 3, "Q4_1", "Q6_K", "Q4_1", "Q4_1", "Q4_1", "Q4_1", "Q4_1", 0.12},
      {"Q5_0", 8, "Q5_0", "Q6_K", "Q5_0", "Q5_0", "Q5_0", "Q5_0", "Q5_0", 0.065},
      {"Q5_1", 9, "Q5_1", "Q6_K", "Q5_1", "Q5_1", "Q5_1", "Q5_1", "Q5_1", 0.06},
      {"Q4_K_S", 14, "Q4_K", "Q6_K", "Q4_K", "Q5_K", "Q5_K", "Q5_0", "Q5_0", 0.11},
      {"Q4_K_M", 15, "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q5_0", "Q8_0", 0.11},
      {"Q5_K_S", 16, "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q5_K", "Q5_1", "Q5_1", 0.055},
      {"Q5_K_M", 17, "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q5_1", "Q8_0", 0.055},
      {"Q6_K", 18, "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q8_0", "Q8_0", 0.028},
  };
  testing::TempDir dir;
  const std::string in_path = shared_path("models/rand-mqa-f16.gguf");
  auto in = GgufFile::open(in_path);
  REQUIRE(in.ok());
  std::unique_ptr<Backend> backend = make_cpu_backend(2);
  for (const Expect& e : cases) {
    CAPTURE(e.mix);
    const std::string out_path = dir.path + "/" + e.mix + ".gguf";
    QuantizeReport report;
    Status s = quantize_model(in_path, out_path, e.mix, &report);
    REQUIRE_MESSAGE(s.ok(), s.message());
    auto out = GgufFile::open(out_path);
    REQUIRE_MESSAGE(out.ok(), out.message());
    const GgufFile& f = **out;
    CHECK(*f.get_uint("general.file_type") == e.file_type);
    CHECK(*f.get_uint("general.quantization_version") == 2);
    check_metadata_kept(**in, f);
    CHECK(type_of(f, "token_embd.weight") == e.token_embd);
    CHECK(type_of(f, "output.weight") == e.output);
    CHECK(type_of(f, "blk.0.attn_q.weight") == e.attn_q);
    CHECK(type_of(f, "blk.1.attn_k.weight") == e.attn_q);
    CHECK(type_of(f, "blk.0.ffn_gate.weight") == e.attn_q);
    CHECK(type_of(f, "blk.1.attn_output.weight") == e.attn_q);
    CHECK(type_of(f, "blk.0.attn_v.weight") == e.attn_v0);
    CHECK(type_of(f, "blk.1.attn_v.weight") == e.attn_v1);
    CHECK(type_of(f, "blk.0.ffn_down.weight") == e.ffn_down0);
    CHECK(type_of(f, "blk.1.ffn_down.weight") == e.ffn_down1);
    for (const GgufTensorInfo& t : f.tensors()) {
      CAPTURE(t.name);
      const GgufTensorInfo* src = (*in)->find_tensor(t.name);
      REQUIRE(src != nullptr);
      CHECK(t.dims == src->dims);
      if (t.dims.size() == 1) CHECK(t.type == WeightType::F32);
    }
    CHECK(f.tensors().size() == (*in)->tensors().size());

    // The report: one entry per output type, counts and bytes adding up to the file's.
    CHECK(report.mix == e.mix);
    int64_t n_tensors = 0;
    uint64_t n_bytes = 0;
    for (const QuantizeTypeStats& st : report.by_type) {
      CAPTURE(weight_type_name(st.type));
      n_tensors += st.n_tensors;
      n_bytes += st.n_bytes;
      int64_t n_of_type = 0;
      uint64_t bytes_of_type = 0;
      for (const GgufTensorInfo& t : f.tensors()) {
        if (t.type == st.type) {
          ++n_of_type;
          bytes_of_type += t.n_bytes;
        }
      }
      CHECK(st.n_tensors == n_of_type);
      CHECK(st.n_bytes == bytes_of_type);
      if (st.type == WeightType::F32) {
        CHECK(st.max_abs_error == 0.0);
      } else {
        CHECK(st.rel_rms_error() > 0);
        CHECK(st.rel_rms_error() < 0.13);
        if (std::string(weight_type_name(st.type)) == e.attn_q)
          CHECK(st.rel_rms_error() <= e.max_rel_rms);
      }
    }
    CHECK(n_tensors == static_cast<int64_t>(f.tensors().size()));
    CHECK(n_bytes == report.out_tensor_bytes);

    auto model = Model::load(*out, *backend);
    CHECK_MESSAGE(model.ok(), model.message());
  }
}

TEST_CASE("quantized presets are the F32 preset run through quantize_model") {
  testing::TempDir dir;
  Status s = write_preset_model("tiny", std::string("q4_k_m"), dir.path + "/direct.gguf");
  REQUIRE_MESSAGE(s.ok(), s.message());
  REQUIRE(write_preset_model("tiny", std::string("F32"), dir.path + "/f32.gguf").ok());
  QuantizeReport report;
  s = quantize_model(dir.path + "/f32.gguf", dir.path + "/via_file.gguf", "Q4_K_M", &report);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(read_all(dir.path + "/direct.gguf") == read_all(dir.path + "/via_file.gguf"));

  // tiny: 4 layers, every row a multiple of 256; use_more_bits picks layers 2 and 3 of 4.
  auto f = GgufFile::open(dir.path + "/direct.gguf");
  REQUIRE(f.ok());
  CHECK(*(*f)->get_uint("general.file_type") == 15);
  CHECK(type_of(**f, "output.weight") == "Q6_K");
  CHECK(type_of(**f, "token_embd.weight") == "Q4_K");
  for (int l = 0; l < 4; ++l) {
    CAPTURE(l);
    const std::string p = "blk." + std::to_string(l) + ".";
    CHECK(type_of(**f, p + "attn_v.weight") == (l >= 2 ? "Q6_K" : "Q4_K"));
    CHECK(type_of(**f, p + "ffn_down.weight") == (l >= 2 ? "Q6_K" : "Q4_K"));
    CHECK(type_of(**f, p + "attn_q.weight") == "Q4_K");
    CHECK(type_of(**f, p + "ffn_up.weight") == "Q4_K");
    CHECK(type_of(**f, p + "attn_norm.weight") == "F32");
  }
  // The spelling bench_forward and gen-model pass through: any case, and the plain types still
  // work.
  CHECK(write_preset_model("demo", std::string("BF16"), dir.path + "/d.gguf").ok());
  Status bad = write_preset_model("demo", std::string("q3_k"), dir.path + "/d.gguf");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("'q3_k'") != std::string::npos);
  CHECK(bad.message().find("Q4_K_M") != std::string::npos);
  CHECK(bad.message().find("bf16") != std::string::npos);
}

TEST_CASE("the hybrids' convolution kernels stay F32 in a quantized preset, as llama-quantize keeps them") {
  // llama.cpp's ssm_conv takes F32 kernels only: a quantized one aborts it.
  testing::TempDir dir;
  for (const char* preset : {"lfm2-tiny", "qwen35-tiny"}) {
    CAPTURE(preset);
    const std::string path = dir.path + "/" + preset + ".gguf";
    REQUIRE(write_preset_model(preset, std::string("q4_k_m"), path).ok());
    auto f = GgufFile::open(path);
    REQUIRE(f.ok());
    int n_conv = 0;
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      const bool conv = t.name.find("shortconv.conv.weight") != std::string::npos ||
                        t.name.find("ssm_conv1d.weight") != std::string::npos;
      if (!conv) continue;
      CAPTURE(t.name);
      CHECK(type_of(**f, t.name) == "F32");
      ++n_conv;
    }
    CHECK(n_conv == (std::string(preset) == "lfm2-tiny" ? 4 : 3));  // the convolution / DeltaNet layers
    CHECK(type_of(**f, "blk.0.ffn_up.weight") == "Q4_K");
  }
}

TEST_CASE("llama-245m has rows that are multiples of 256 and about 245 M parameters") {
  Result<PresetSpec> s = preset_spec("llama-245m");
  REQUIRE(s.ok());
  CHECK(s->n_embd == 1024);
  CHECK(s->n_layers == 16);
  CHECK(s->n_heads == 16);
  CHECK(s->n_kv_heads == 4);
  CHECK(s->head_dim() == 64);
  CHECK(s->n_ff == 2816);
  CHECK(s->n_vocab == 32000);
  CHECK(s->rope_base == 500000.0f);
  CHECK_FALSE(s->tied_output);
  for (int64_t row : {s->n_embd, s->n_ff, s->n_heads * s->head_dim()}) CHECK(row % 256 == 0);
  const int64_t per_layer = 2 * int64_t{s->n_embd} * s->n_heads * s->head_dim() +
                            2 * int64_t{s->n_embd} * s->n_kv_heads * s->head_dim() +
                            3 * int64_t{s->n_embd} * s->n_ff + 2 * s->n_embd;
  const int64_t n_params =
      2 * int64_t{s->n_vocab} * s->n_embd + s->n_layers * per_layer + s->n_embd;
  CHECK(n_params > 244'000'000);
  CHECK(n_params < 247'000'000);
}

TEST_CASE("quantize_model refuses an unknown type, a missing or non-GGUF input, naming them") {
  testing::TempDir dir;
  const std::string good = shared_path("models/rand-mqa-f16.gguf");
  Status s = quantize_model(good, dir.path + "/o.gguf", "Q3_K_M", nullptr);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("'Q3_K_M'") != std::string::npos);
  CHECK(s.message().find("Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K") !=
        std::string::npos);

  s = quantize_model(dir.path + "/missing.gguf", dir.path + "/o.gguf", "Q8_0", nullptr);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("missing.gguf") != std::string::npos);
  CHECK(s.message().find("GGUF") != std::string::npos);

  {
    std::ofstream text(dir.path + "/notes.txt");
    text << "this is not a model\n";
  }
  s = quantize_model(dir.path + "/notes.txt", dir.path + "/o.gguf", "Q8_0", nullptr);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("notes.txt") != std::string::npos);
  CHECK(s.message().find("GGUF") != std::string::npos);

  s = quantize_model(good, dir.path + "/no/such/dir/o.gguf", "Q8_0", nullptr);
  CHECK_FALSE(s.ok());
  CHECK_FALSE(std::filesystem::exists(dir.path + "/o.gguf"));

  CHECK(find_quant_mix("q5_k_s").ok());
  CHECK(find_quant_mix("q5_k_s")->name == "Q5_K_S");
}

TEST_CASE("the fallback follows llama.cpp for rows the K and XS blocks do not divide") {
  CHECK(quant_fallback_type(WeightType::Q4_K, 512) == WeightType::Q4_K);
  CHECK(quant_fallback_type(WeightType::Q4_K, 704) == WeightType::Q5_0);
  CHECK(quant_fallback_type(WeightType::Q5_K, 576) == WeightType::Q5_1);
  CHECK(quant_fallback_type(WeightType::Q6_K, 576) == WeightType::Q8_0);
  CHECK(quant_fallback_type(WeightType::Q2_K, 96) == WeightType::IQ4_NL);
  CHECK(quant_fallback_type(WeightType::Q3_K, 96) == WeightType::IQ4_NL);
  CHECK(quant_fallback_type(WeightType::IQ4_XS, 96) == WeightType::IQ4_NL);
  CHECK(quant_fallback_type(WeightType::Q6_K, 100) == WeightType::F16);  // not even 32 divides it
  CHECK(quant_fallback_type(WeightType::Q8_0, 100) == WeightType::F16);
}
