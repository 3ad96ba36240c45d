// The CPU forward pass against llama.cpp's reference logits and greedy
// continuations, computed whole and split at many points (the prefix cache's
// premise: a prefix computed earlier, then the rest attending to its KV).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>

#include "engine/model/gguf_writer.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cpu_isa_under_test.h"
#include "tests/golden.h"
#include "tests/golden_check.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

// PREFIXD_GOLDEN_CASES (tests only; unset: every case): the golden case names
// the whole-prompt test runs, comma-separated, e.g. "long,long-700,rand-17"
// under an emulator, where the short prompts would repeat the same kernels.
bool case_selected(const std::string& case_name) {
  const char* env = std::getenv("PREFIXD_GOLDEN_CASES");
  if (env == nullptr || *env == '\0') return true;
  const std::string list = std::string(",") + env + ",";
  return list.find("," + case_name + ",") != std::string::npos;
}

// PREFIXD_GOLDEN_SPLIT_MAX_IDS (tests only; unset: every case): the longest
// prompt the split test runs, e.g. 256 for the portable set (slow scalar code,
// tests/CMakeLists.txt), which leaves out the 700-token prompts' eight splits
// there; every set runs them whole, and the last-layer test splits them in two.
bool split_case_selected(const GoldenCase& c) {
  const char* env = std::getenv("PREFIXD_GOLDEN_SPLIT_MAX_IDS");
  if (env == nullptr || *env == '\0') return true;
  return c.ids.size() <= std::strtoul(env, nullptr, 10);
}

}  // namespace

// Each model is a subcase named after it, so a run can be limited to some:
// --subcase=stories260K, and its cases with PREFIXD_GOLDEN_CASES (under an
// emulator: tests/scripts/test_cpu_isa_qemu_haswell.sh,
// tests/scripts/test_portable_aarch64.sh).
TEST_CASE("full forward pass matches llama.cpp logits and greedy ids (F32 KV)") {
  for (const auto& [name, tol] : forward_golden_models()) {
    SUBCASE(name.c_str()) {
      GoldenModel g = load_golden(name, tol);
      LoadedGolden l = load_golden_model(g);
      REQUIRE(l.model->config().n_vocab == g.n_vocab);
      for (const GoldenCase& c : g.cases) {
        if (!case_selected(c.name)) continue;
        CAPTURE(name);
        CAPTURE(c.name);
        const int32_t n = static_cast<int32_t>(c.ids.size());
        SequenceRunner r(*l.model, DType::F32, n + static_cast<int32_t>(c.greedy_ids.size()) + 1);
        std::vector<float> logits = r.run(c.ids, 0, true);
        double worst = 0;
        for (int32_t p = 0; p < n; ++p) {
          worst = std::max(worst, logit_error(c.positions[p], &logits[size_t(p) * g.n_vocab], g.n_vocab));
        }
        MESSAGE(name << "/" << c.name << ": max logit error " << worst);
        CHECK(worst <= tol);
        check_greedy(r, g, c, std::vector<float>(logits.end() - g.n_vocab, logits.end()), tol);
      }
    }
  }
}

TEST_CASE("forward pass split at any point equals the whole pass (F32 KV)") {
  for (const auto& [name, tol] : forward_golden_models()) {
    SUBCASE(name.c_str()) {
      GoldenModel g = load_golden(name, tol);
      LoadedGolden l = load_golden_model(g);
      for (const GoldenCase& c : g.cases) {
        if (!split_case_selected(c)) continue;
        const int32_t n = static_cast<int32_t>(c.ids.size());
        std::vector<int32_t> splits = {1, 2, 15, 16, 17, 32, n / 2, n - 1};
        for (int32_t s : splits) {
          if (s <= 0 || s >= n) continue;
          CAPTURE(name);
          CAPTURE(c.name);
          CAPTURE(s);
          SequenceRunner r(*l.model, DType::F32, n + static_cast<int32_t>(c.greedy_ids.size()) + 1);
          std::vector<int32_t> head(c.ids.begin(), c.ids.begin() + s);
          std::vector<int32_t> tail(c.ids.begin() + s, c.ids.end());
          std::vector<float> first = r.run(head, 0, true);
          std::vector<float> rest = r.run(tail, s, true);
          double worst = 0;
          for (int32_t p = 0; p < n; ++p) {
            const float* row = p < s ? &first[size_t(p) * g.n_vocab] : &rest[size_t(p - s) * g.n_vocab];
            worst = std::max(worst, logit_error(c.positions[p], row, g.n_vocab));
          }
          CHECK(worst <= tol);
          check_greedy(r, g, c, std::vector<float>(rest.end() - g.n_vocab, rest.end()), tol);
        }
      }
    }
  }
}

// The last layer runs its attention and feed-forward for the output rows
// alone: their logits are the whole batch's, and the other rows' K/V are
// still written (a later chunk attending to them sees the same). Bit for bit
// for F32, F16 and BF16 weights, whose products give a row the same sums
// whatever the batch in every set and plan; block weights take other kernels
// for a few rows than for many (int8 products below 16 rows), so there within
// the reference tolerance.
TEST_CASE("the last layer for the output rows alone: the same logits, every row's K/V written") {
  for (const auto& [name, tol] : forward_golden_models()) {
    SUBCASE(name.c_str()) {
      GoldenModel g = load_golden(name, tol);
      LoadedGolden l = load_golden_model(g);
      for (const GoldenCase& c : g.cases) {
        CAPTURE(name);
        CAPTURE(c.name);
        const int32_t n = static_cast<int32_t>(c.ids.size());
        const size_t row_bytes = size_t(g.n_vocab) * sizeof(float);
        const WeightType wt = l.model->layer(0).w_down->source_type;  // every layer has one (qwen35, lfm2: not wq)
        const bool exact = wt == WeightType::F32 || wt == WeightType::F16 || wt == WeightType::BF16;
        SequenceRunner whole(*l.model, DType::F32, n + 1);
        const std::vector<float> all = whole.run(c.ids, 0, true);
        // Row `p` of `got` against row `p` of the whole batch's logits.
        auto same = [&](const float* got, int32_t p) {
          if (exact) return std::memcmp(got, &all[size_t(p) * g.n_vocab], row_bytes) == 0;
          return logit_error(c.positions[p], got, g.n_vocab) <= tol;
        };
        SequenceRunner last(*l.model, DType::F32, n + 1);
        const std::vector<float> one = last.run(c.ids, 0, false);
        REQUIRE(one.size() == size_t(g.n_vocab));
        CHECK(same(one.data(), n - 1));
        // The head's last layer ran for its last row only; the tail reads
        // every head row's K/V from the pool.
        const int32_t s = n / 2;
        if (s == 0) continue;
        SequenceRunner split(*l.model, DType::F32, n + 1);
        split.run(std::vector<int32_t>(c.ids.begin(), c.ids.begin() + s), 0, false);
        const std::vector<float> rest =
            split.run(std::vector<int32_t>(c.ids.begin() + s, c.ids.end()), s, true);
        for (int32_t p = s; p < n; ++p) {
          CAPTURE(p);
          CHECK(same(&rest[size_t(p - s) * g.n_vocab], p));
        }
      }
    }
  }
}

// The README allows 5e-2 more with an F16 or BF16 KV cache. F16 KV meets it on
// every model. BF16 keeps 8 mantissa bits (relative error 2^-9): on
// stories260K, whose keys and queries are large, attention scores move by up
// to ~0.15, so BF16 KV is held to 0.2 there and it is documented, not hidden.
TEST_CASE("F16 and BF16 KV caches stay within the tolerance plus 5e-2 (BF16 on stories260K: 0.2)") {
  for (const auto& [name, tol] : forward_golden_models()) {
    SUBCASE(name.c_str()) {
      GoldenModel g = load_golden(name, tol);
      LoadedGolden l = load_golden_model(g);
      for (DType kv : {DType::F16, DType::BF16}) {
        for (const GoldenCase& c : g.cases) {
          CAPTURE(name);
          CAPTURE(c.name);
          std::string kv_name = dtype_name(kv);
          CAPTURE(kv_name);
          const int32_t n = static_cast<int32_t>(c.ids.size());
          SequenceRunner r(*l.model, kv, n + 1);
          std::vector<float> logits = r.run(c.ids, 0, true);
          double worst = 0;
          for (int32_t p = 0; p < n; ++p) {
            worst = std::max(worst, logit_error(c.positions[p], &logits[size_t(p) * g.n_vocab], g.n_vocab));
          }
          const double extra = kv == DType::BF16 && name == "stories260K" ? 0.2 : 5e-2;
          CHECK(worst <= tol + extra);
        }
      }
    }
  }
}

TEST_CASE("--kv-dtype auto picks BF16 for a model with BF16 K and V weights, F16 otherwise") {
  for (const auto& [name, tol] : forward_golden_models()) {
    CAPTURE(name);
    GoldenModel g = load_golden(name, tol);
    LoadedGolden l = load_golden_model(g);
    const bool bf16 = name.find("bf16") != std::string::npos;  // rand-qwen2-bf16, rand-qwen3-bf16
    CHECK(l.model->auto_kv_dtype() == (bf16 ? DType::BF16 : DType::F16));
  }
}

namespace {

// A copy of `src` re-encoded after `edit` (GgufWriter::set replaces a key),
// without the tensors named in `drop`.
std::vector<uint8_t> rewritten(const GgufFile& src, const std::function<void(GgufWriter&)>& edit,
                               const std::set<std::string>& drop = {}) {
  GgufWriter w(src.version(), src.alignment());
  for (const auto& [key, value] : src.metadata()) w.set(key, value);
  for (const GgufTensorInfo& t : src.tensors()) {
    if (drop.count(t.name)) continue;
    w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  edit(w);
  return w.to_bytes();
}

// Model::load's message for `bytes` (a well-formed GGUF), or "" when it loads.
std::string load_message(const std::vector<uint8_t>& bytes) {
  auto file = GgufFile::parse(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(file.ok(), file.message());
  std::unique_ptr<Backend> backend = make_cpu_backend(1, isa_under_test());
  auto model = Model::load(file.value(), *backend);
  return model.ok() ? "" : model.message();
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("Llama 3.1 RoPE factors and qwen3 head sizes and norms are read from the files") {
  auto llama3 = GgufFile::open(shared_path("models/rand-llama3rope-f16.gguf"));
  REQUIRE(llama3.ok());
  auto c = load_model_config(*llama3.value());
  REQUIRE_MESSAGE(c.ok(), c.message());
  CHECK(c->arch == Arch::kLlama);
  CHECK(c->rope_style == RopeStyle::kNormal);
  REQUIRE(c->rope_freq_factors.size() == 32);
  // The README's scaling (factor 8, low 1, high 4, original context 8192) by
  // the Llama 3.1 rule the converter applies.
  for (int32_t i = 0; i < 32; ++i) {
    const double wavelen = 2 * 3.14159265358979323846 * std::pow(500000.0, 2.0 * i / 64);
    const double low_wavelen = 8192.0 / 1, high_wavelen = 8192.0 / 4;
    double want = 1;
    if (wavelen > low_wavelen) {
      want = 8;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      want = 1 / ((1 - smooth) / 8 + smooth);
    }
    CAPTURE(i);
    CHECK(c->rope_freq_factors[i] == doctest::Approx(want).epsilon(1e-6));
  }

  auto qwen3 = GgufFile::open(shared_path("models/rand-qwen3-bf16.gguf"));
  REQUIRE(qwen3.ok());
  auto q = load_model_config(*qwen3.value());
  REQUIRE_MESSAGE(q.ok(), q.message());
  CHECK(q->arch == Arch::kQwen3);
  CHECK(q->rope_style == RopeStyle::kNeox);
  CHECK(q->has_qk_norm);
  CHECK_FALSE(q->has_qkv_bias);
  CHECK(q->head_dim == 128);
  CHECK(q->n_heads * q->head_dim == 512);
  CHECK(q->n_embd == 256);
  CHECK(q->rope_freq_factors.empty());
}

TEST_CASE("unsupported and malformed models are refused with a message") {
  auto file = GgufFile::open(shared_path("models/stories260K.gguf"));
  REQUIRE(file.ok());
  const GgufFile& f = *file.value();

  SUBCASE("a truncated copy of a real model file") {
    std::vector<uint8_t> bytes(f.bytes(), f.bytes() + f.size_bytes() / 2);
    auto truncated = GgufFile::parse(bytes.data(), bytes.size());
    REQUIRE_FALSE(truncated.ok());
    CHECK(contains(truncated.message(), "truncated"));
    CHECK(contains(truncated.message(), "byte offset"));
  }
  SUBCASE("the unchanged copy loads (the refusals below are the edits')") {
    CHECK(load_message(rewritten(f, [](GgufWriter&) {})) == "");
  }
  SUBCASE("an unsupported architecture") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_string("general.architecture", "gemma2"); }));
    CHECK(contains(m, "unsupported architecture 'gemma2'"));
    CHECK(contains(m, "general.architecture"));
  }
  SUBCASE("YaRN RoPE scaling") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_string("llama.rope.scaling.type", "yarn"); }));
    CHECK(contains(m, "RoPE scaling 'yarn'"));
    CHECK(contains(m, "llama.rope.scaling.type"));
  }
  SUBCASE("linear RoPE scaling by 4 (by 1 changes nothing and loads)") {
    std::string m = load_message(rewritten(f, [](GgufWriter& w) {
      w.set_string("llama.rope.scaling.type", "linear");
      w.set_f32("llama.rope.scaling.factor", 4.0f);
    }));
    CHECK(contains(m, "RoPE scaling factor 4"));
    CHECK(contains(m, "llama.rope.scaling.factor"));
    CHECK(load_message(rewritten(f, [](GgufWriter& w) {
            w.set_string("llama.rope.scaling.type", "linear");
            w.set_f32("llama.rope.scaling.factor", 1.0f);
          })) == "");
  }
  SUBCASE("the old linear scale key") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_f32("llama.rope.scale_linear", 2.0f); }));
    CHECK(contains(m, "llama.rope.scale_linear"));
  }
  SUBCASE("sliding-window attention") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_u32("llama.attention.sliding_window", 4096); }));
    CHECK(contains(m, "sliding-window attention"));
    CHECK(contains(m, "llama.attention.sliding_window"));
  }
  SUBCASE("a mixture of experts, whatever the integer type") {
    std::string m =
        load_message(rewritten(f, [](GgufWriter& w) { w.set_i32("llama.expert_count", 8); }));
    CHECK(contains(m, "mixture-of-experts"));
    CHECK(contains(m, "llama.expert_count"));
  }
  SUBCASE("RoPE frequency factors of the wrong length, type or value") {
    // stories260K: head size 8, so 4 factors.
    std::string m = load_message(rewritten(f, [](GgufWriter& w) {
      w.add_tensor("rope_freqs.weight", GgmlType::F32, {3}, f32_bytes({1, 2, 4}));
    }));
    CHECK(contains(m, "rope_freqs.weight"));
    CHECK(contains(m, "[4]"));
    m = load_message(rewritten(f, [](GgufWriter& w) {
      w.add_tensor("rope_freqs.weight", GgmlType::F32, {4}, f32_bytes({1, 2, 0, 8}));
    }));
    CHECK(contains(m, "rope_freqs.weight"));
    CHECK(contains(m, "value 2"));
    CHECK(contains(m, "positive finite"));
    m = load_message(rewritten(f, [](GgufWriter& w) {
      w.add_tensor("rope_freqs.weight", GgmlType::F16, {4}, std::vector<uint8_t>(8, 0));
    }));
    CHECK(contains(m, "must be F32"));
    CHECK(load_message(rewritten(f, [](GgufWriter& w) {
            w.add_tensor("rope_freqs.weight", GgmlType::F32, {4}, f32_bytes({1, 1, 2, 8}));
          })) == "");
  }
  SUBCASE("qwen3 without a per-head norm, or with RoPE frequency factors") {
    auto q = GgufFile::open(shared_path("models/rand-qwen3-bf16.gguf"));
    REQUIRE(q.ok());
    std::string m =
        load_message(rewritten(*q.value(), [](GgufWriter&) {}, {"blk.1.attn_k_norm.weight"}));
    CHECK(contains(m, "blk.1.attn_k_norm.weight"));
    CHECK(contains(m, "missing"));
    m = load_message(rewritten(*q.value(), [](GgufWriter& w) {
      w.add_tensor("rope_freqs.weight", GgmlType::F32, {64},
                   f32_bytes(std::vector<float>(64, 1.0f)));
    }));
    CHECK(contains(m, "rope_freqs.weight"));
    CHECK(contains(m, "llama only"));
  }
}

TEST_CASE("gemma3: the window, its layer pattern, both RoPE bases and the scales are read from the file") {
  auto file = GgufFile::open(shared_path("models/rand-gemma3-bf16.gguf"));
  REQUIRE(file.ok());
  auto c = load_model_config(*file.value());
  REQUIRE_MESSAGE(c.ok(), c.message());
  CHECK(c->arch == Arch::kGemma3);
  CHECK(c->rope_style == RopeStyle::kNeox);
  CHECK(c->has_qk_norm);
  CHECK(c->has_post_norms);
  CHECK(c->ffn_activation == FfnActivation::kGeluTanh);
  CHECK(c->tied_output);
  CHECK(c->head_dim == 64);
  CHECK(c->embed_scale == 16.0f);  // sqrt(256)
  CHECK(c->attn_scale == 0.125f);  // 1 / sqrt(64)
  CHECK(c->final_logit_softcap == 0.0f);
  CHECK(c->sliding_window == 64);
  // Default pattern 6: layer 5 global, the other six window layers.
  REQUIRE(c->layer_is_window.size() == 7);
  for (int32_t i = 0; i < 7; ++i) {
    CAPTURE(i);
    CHECK(c->window_of(i) == (i == 5 ? 0 : 64));
    CHECK(c->rope_base_of(i) == (i == 5 ? 1e6f : 10000.0f));
  }
  // A period of 2 (odd layers global), and one bool per layer (true: window).
  auto config_of = [&](const std::function<void(GgufWriter&)>& edit) {
    const std::vector<uint8_t> bytes = rewritten(*file.value(), edit);
    auto parsed = GgufFile::parse(bytes.data(), bytes.size());
    REQUIRE_MESSAGE(parsed.ok(), parsed.message());
    auto config = load_model_config(*parsed.value());
    REQUIRE_MESSAGE(config.ok(), config.message());
    return config.value();
  };
  const ModelConfig p2 =
      config_of([](GgufWriter& w) { w.set_u32("gemma3.attention.sliding_window_pattern", 2); });
  for (int32_t i = 0; i < 7; ++i) CHECK(p2.window_of(i) == (i % 2 == 1 ? 0 : 64));
  const ModelConfig per_layer = config_of([](GgufWriter& w) {
    GgufValue v;
    v.type = GgufType::ARRAY;
    v.elem_type = GgufType::BOOL;
    for (int32_t i = 0; i < 7; ++i) {
      GgufValue b;
      b.type = GgufType::BOOL;
      b.u = i == 0 || i == 6 ? 0 : 1;
      v.array.push_back(b);
    }
    w.set("gemma3.attention.sliding_window_pattern", v);
  });
  for (int32_t i = 0; i < 7; ++i) CHECK(per_layer.window_of(i) == (i == 0 || i == 6 ? 0 : 64));
  // No window key: every layer global.
  const ModelConfig none = config_of([](GgufWriter& w) { w.set_u32("gemma3.attention.sliding_window", 0); });
  for (int32_t i = 0; i < 7; ++i) CHECK(none.window_of(i) == 0);
}

TEST_CASE("gemma3 final_logit_softcapping caps the logits: cap * tanh(logit / cap)") {
  auto file = GgufFile::open(shared_path("models/rand-gemma3-bf16.gguf"));
  REQUIRE(file.ok());
  const std::vector<uint8_t> bytes = rewritten(
      *file.value(), [](GgufWriter& w) { w.set_f32("gemma3.final_logit_softcapping", 0.5f); });
  auto capped_file = GgufFile::parse(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(capped_file.ok(), capped_file.message());
  std::unique_ptr<Backend> backend = make_cpu_backend(2, isa_under_test());
  auto plain = Model::load(file.value(), *backend);
  auto capped = Model::load(capped_file.value(), *backend);
  REQUIRE_MESSAGE(plain.ok(), plain.message());
  REQUIRE_MESSAGE(capped.ok(), capped.message());
  CHECK((*capped)->config().final_logit_softcap == 0.5f);
  const std::vector<int32_t> prompt = {1, 40, 300, 7, 999, 512};
  SequenceRunner a(**plain, DType::F32, 8), b(**capped, DType::F32, 8);
  const std::vector<float> raw = a.run(prompt, 0, true), got = b.run(prompt, 0, true);
  REQUIRE(raw.size() == got.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - 0.5 * std::tanh(double(raw[i]) / 0.5)));
    largest = std::max(largest, std::fabs(double(raw[i])));
  }
  CAPTURE(largest);
  CHECK(largest > 1.0);  // the cap (0.5) changes the largest logits by half or more
  CHECK(worst <= 1e-6);
}

// Gemma 3 4B and larger: rope.scaling linear, factor 8, on the global layers
// only (llama.cpp: freq_scale 1/8 there, 1 on the window layers). No
// reference logits exist for it here: the factors are checked, and that the
// forward pass uses them (factor 1 changes no logit, factor 8 changes some).
TEST_CASE("gemma3 linear RoPE scaling divides the global layers' angles only") {
  auto file = GgufFile::open(shared_path("models/rand-gemma3-bf16.gguf"));
  REQUIRE(file.ok());
  auto scaled_bytes = [&](float factor) {
    return rewritten(*file.value(), [factor](GgufWriter& w) {
      w.set_string("gemma3.rope.scaling.type", "linear");
      w.set_f32("gemma3.rope.scaling.factor", factor);
    });
  };
  const std::vector<uint8_t> by8 = scaled_bytes(8.0f), by1 = scaled_bytes(1.0f);
  auto f8 = GgufFile::parse(by8.data(), by8.size());
  auto f1 = GgufFile::parse(by1.data(), by1.size());
  REQUIRE(f8.ok());
  REQUIRE(f1.ok());
  auto c = load_model_config(*f8.value());
  REQUIRE_MESSAGE(c.ok(), c.message());
  for (int32_t il = 0; il < 7; ++il) {
    CAPTURE(il);
    const float* ff = c->rope_factors_of(il);
    if (il == 5) {  // the global layer
      REQUIRE(ff != nullptr);
      for (int32_t i = 0; i < 32; ++i) CHECK(ff[i] == 8.0f);
    } else {
      CHECK(ff == nullptr);
    }
  }
  std::unique_ptr<Backend> backend = make_cpu_backend(2, isa_under_test());
  auto plain = Model::load(file.value(), *backend);
  auto one = Model::load(f1.value(), *backend);
  auto eight = Model::load(f8.value(), *backend);
  REQUIRE(plain.ok());
  REQUIRE(one.ok());
  REQUIRE(eight.ok());
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back(3 + (i * 37) % 1000);
  SequenceRunner a(**plain, DType::F32, 41), b(**one, DType::F32, 41), d(**eight, DType::F32, 41);
  const std::vector<float> ref = a.run(prompt, 0, true);
  CHECK(b.run(prompt, 0, true) == ref);
  const std::vector<float> scaled = d.run(prompt, 0, true);
  // Position 0 rotates by nothing: its row is the same; later rows differ.
  const size_t V = static_cast<size_t>((*plain)->config().n_vocab);
  CHECK(std::equal(ref.begin(), ref.begin() + V, scaled.begin()));
  CHECK_FALSE(std::equal(ref.end() - V, ref.end(), scaled.end() - V));
}

TEST_CASE("gemma3 files prefixd cannot run are refused at load with the key named") {
  auto file = GgufFile::open(shared_path("models/rand-gemma3-bf16.gguf"));
  REQUIRE(file.ok());
  const GgufFile& f = *file.value();
  CHECK(load_message(rewritten(f, [](GgufWriter&) {})) == "");
  SUBCASE("a window larger than the context") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_u32("gemma3.attention.sliding_window", 4096); }));
    CHECK(contains(m, "gemma3.attention.sliding_window"));
    CHECK(contains(m, "gemma3.context_length = 2048"));
  }
  SUBCASE("a window pattern of 0") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_u32("gemma3.attention.sliding_window_pattern", 0); }));
    CHECK(contains(m, "gemma3.attention.sliding_window_pattern"));
  }
  SUBCASE("Q or K norms whose size is not the head size") {
    std::string m = load_message(rewritten(
        f,
        [](GgufWriter& w) {
          w.add_tensor("blk.3.attn_q_norm.weight", GgmlType::F32, {32}, f32_bytes(std::vector<float>(32, 1)));
        },
        {"blk.3.attn_q_norm.weight"}));
    CHECK(contains(m, "blk.3.attn_q_norm.weight"));
    CHECK(contains(m, "gemma3.attention.key_length"));
    CHECK(contains(m, "64"));
  }
  SUBCASE("attention logit soft-capping") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_f32("gemma3.attn_logit_softcapping", 50.0f); }));
    CHECK(contains(m, "gemma3.attn_logit_softcapping"));
  }
  SUBCASE("linear RoPE scaling below 1, or YaRN") {
    std::string m = load_message(rewritten(f, [](GgufWriter& w) {
      w.set_string("gemma3.rope.scaling.type", "linear");
      w.set_f32("gemma3.rope.scaling.factor", 0.5f);
    }));
    CHECK(contains(m, "gemma3.rope.scaling.factor"));
    m = load_message(rewritten(f, [](GgufWriter& w) { w.set_string("gemma3.rope.scaling.type", "yarn"); }));
    CHECK(contains(m, "gemma3.rope.scaling.type"));
  }
  SUBCASE("a missing post-attention norm") {
    std::string m = load_message(rewritten(f, [](GgufWriter&) {}, {"blk.2.post_attention_norm.weight"}));
    CHECK(contains(m, "blk.2.post_attention_norm.weight"));
  }
}

TEST_CASE("lfm2 files prefixd cannot run are refused at load with the key or tensor named") {
  auto file = GgufFile::open(shared_path("models/rand-lfm2-bf16.gguf"));
  REQUIRE(file.ok());
  const GgufFile& f = *file.value();
  CHECK(load_message(rewritten(f, [](GgufWriter&) {})) == "");
  SUBCASE("one KV head count for all layers (no layer kinds)") {
    std::string m = load_message(
        rewritten(f, [](GgufWriter& w) { w.set_u32("lfm2.attention.head_count_kv", 2); }));
    CHECK(contains(m, "lfm2.attention.head_count_kv"));
  }
  SUBCASE("attention layers with different KV head counts") {
    std::string m = load_message(rewritten(
        f, [](GgufWriter& w) { w.set_i32_array("lfm2.attention.head_count_kv", {0, 0, 2, 0, 0, 4}); }));
    CHECK(contains(m, "different KV head counts"));
  }
  SUBCASE("a missing or out-of-range convolution width") {
    std::string m = load_message(rewritten(f, [](GgufWriter& w) { w.set_u32("lfm2.shortconv.l_cache", 1); }));
    CHECK(contains(m, "lfm2.shortconv.l_cache"));
  }
  SUBCASE("a convolution kernel of another width") {
    std::string m = load_message(rewritten(f, [](GgufWriter& w) { w.set_u32("lfm2.shortconv.l_cache", 4); }));
    CHECK(contains(m, "blk.0.shortconv.conv.weight"));
  }
  SUBCASE("a missing in-projection") {
    std::string m = load_message(rewritten(f, [](GgufWriter&) {}, {"blk.3.shortconv.in_proj.weight"}));
    CHECK(contains(m, "blk.3.shortconv.in_proj.weight"));
  }
  SUBCASE("per-layer KV head counts on another architecture") {
    auto llama = GgufFile::open(shared_path("models/stories260K.gguf"));
    REQUIRE(llama.ok());
    std::string m = load_message(rewritten(*llama.value(), [](GgufWriter& w) {
      w.set_i32_array("llama.attention.head_count_kv", {8, 8, 8, 8, 8});
    }));
    CHECK(contains(m, "lfm2 only"));
  }
}

int main(int argc, char** argv) { return prefixd::testing::run_for_cpu_isa(argc, argv); }
