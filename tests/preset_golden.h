// Test support: llama.cpp's outputs for `prefixd gen-model` presets
// (tests/golden/PRESET-DTYPE.json, made beside the project with llama.cpp
// d32676d: tests/golden/README.md). The model is generated again into a
// folder of the caller's; the reference names the exact file it was computed
// on (bytes and XXH64), so a generator that drifts fails here by name instead
// of as a logit mismatch.
#pragma once

#include <doctest/doctest.h>
#include <xxhash.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/model/model_presets.h"
#include "tests/golden.h"

namespace prefixd::testing {

// A generated preset with a reference and its tolerances (F32 KV cache).
struct PresetGolden {
  std::string name;  // tests/golden/NAME.json
  float tol;         // every position (and the greedy check's near-ties at 2 x tol)
  // On a set whose products keep the activations in F32 where llama.cpp's
  // round them to BF16 (BF16 weights without a BF16 dot product) or quantize
  // them to 8 bits (block formats in prefill on dequantized F32 panels: the
  // sets without int8 panels for them): the tolerance there (0: tol).
  float float_tol = 0;
};

// The README's tolerances for F32 and BF16 weights and quantized files, and
// the hybrid allowance of hybrid_golden_models() for Qwen3.5's BF16 file.
// Measured (amx / avx512bf16 sets; portable, avx2, avx512):
// - qwen35-tiny-bf16: within 0.05 at every length; 0.03 at 1 token, 0.56
//   at 16, 0.76 at 700 where activations stay F32 (the DeltaNet state
//   carries the rounding difference along the prompt): 1.0 there.
// - qwen35-tiny-q8_0: 1e-6 up to 2 tokens (the decode products quantize
//   activations as llama.cpp's Q8_0 blocks), 0.10 at 700; on the F32 panels
//   of prefill 0.32 at 16, 1.14 at 100, 3.03 at 700: 3.5 there.
// - lfm2-tiny-bf16: 0.03 / 0.06; lfm2-tiny-q8_0: 0.07 / 0.22 (short
//   convolutions carry nothing far).
inline std::vector<PresetGolden> preset_golden_models() {
  return {{"qwen35-tiny-f32", 1e-3f}, {"qwen35-tiny-bf16", 0.35f, 1.0f}, {"qwen35-tiny-q8_0", 0.4f, 3.5f},
          {"lfm2-tiny-f32", 1e-3f},   {"lfm2-tiny-bf16", 0.15f},         {"lfm2-tiny-q8_0", 0.4f}};
}

// Writes the preset `name` names (its "preset" and "dtype") into `dir` and
// returns its reference; REQUIREs the file to be the one the reference was made on.
inline GoldenModel load_preset_golden(const std::string& name, float logit_tol, const std::string& dir) {
  std::ifstream in(std::string(PREFIXD_SOURCE_DIR) + "/tests/golden/" + name + ".json");
  REQUIRE_MESSAGE(in.good(), "no tests/golden/" << name << ".json");
  GoldenModel g = parse_golden(in, dir + "/" + name + ".gguf", logit_tol);
  const std::string preset = g.raw["preset"].get<std::string>();
  const std::string dtype = g.raw["dtype"].get<std::string>();
  Status s = write_preset_model(preset, dtype, g.model_file);
  REQUIRE_MESSAGE(s.ok(), s.message());
  std::ifstream f(g.model_file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016" PRIx64, static_cast<uint64_t>(XXH64(bytes.data(), bytes.size(), 0)));
  const bool same = bytes.size() == g.raw["model_bytes"].get<size_t>() && hash == g.raw["model_xxh64"].get<std::string>();
  REQUIRE_MESSAGE(same,
                  "gen-model --preset " << preset << " --dtype " << dtype << " wrote another file than the one the "
                  "reference was made on (" << bytes.size() << " bytes, XXH64 " << hash << "): make the references "
                  "again (tests/golden/README.md)");
  return g;
}

}  // namespace prefixd::testing
