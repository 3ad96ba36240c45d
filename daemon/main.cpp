// prefixd: the command line. With no subcommand it serves HTTP (flags in
// daemon/server_options.cpp); `prefixd generate` runs one prompt;
// `prefixd gen-model` writes a generated test model; `prefixd quantize`
// quantizes a model file.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "daemon/commands/generate_command.h"
#include "daemon/commands/quantize_command.h"
#include "daemon/model_source.h"
#include "daemon/server.h"
#include "daemon/server_options.h"
#include "engine/model/model_presets.h"
#include "engine/model/quant_mix.h"
#include "kernels/cuda/cudnn/cudnn_search.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& s, std::string* error) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string part = s.substr(i, j - i);
    try {
      size_t used = 0;
      long v = std::stol(part, &used);
      if (used != part.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument(part);
      ids.push_back(static_cast<int32_t>(v));
    } catch (...) {
      *error = "--prompt-ids: '" + part + "' is not a token id";
      return {};
    }
    i = j + 1;
  }
  return ids;
}

}  // namespace

// Stays long: the command line's flag table, one paragraph per subcommand, then
// the dispatch; split, CLI11's option objects would pass between the pieces.
int main(int argc, char** argv) {
  // Whatever prefixd creates (the disk tier's RocksDB files, generated models,
  // fingerprints) is this user's alone: 0600 files, 0700 directories.
  ::umask(0077);
  CLI::App app{"prefixd: LLM inference daemon with a tiered prompt-prefix KV cache"};
  app.require_subcommand(0, 1);

  // Serve mode (no subcommand).
  prefixd::ServerOptions serve;
  serve.cache_dir = prefixd::default_cache_dir();
  prefixd::register_server_flags(app, serve);

  prefixd::GenerateOptions gen;
  gen.cache_dir = prefixd::default_cache_dir();
  std::string prompt_ids;
  CLI::App* g = app.add_subcommand("generate", "greedy continuation of one prompt");
  g->add_option("--model,-m", gen.model,
                "GGUF file, `stories260K` (bundled), `demo`, or preset:NAME[:f32|f16|bf16]")
      ->capture_default_str();
  g->add_option("--prompt,-p", gen.prompt, "prompt text");
  g->add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids");
  g->add_option("-n,--n-predict", gen.n_predict, "tokens to generate")->capture_default_str();
  g->add_option("--threads,-t", gen.n_threads, "compute threads")->check(CLI::Range(1, 256))->capture_default_str();
  prefixd::add_cpu_isa_flag(*g, gen.cpu_isa_option);
  g->add_option("--kv-dtype", gen.kv_dtype, "KV cache type: f32, f16, bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str();
  g->add_option("--cache-dir", gen.cache_dir, "where generated models are kept")->capture_default_str();
  g->add_flag("--json", gen.json, "print one JSON object");

  std::string preset, dtype = "bf16", out;
  CLI::App* gm = app.add_subcommand("gen-model", "write a generated test model (deterministic weights)");
  gm->add_option("--preset", preset, "tiny, smol-135m, demo, llama-245m, llama-1b, gemma3-1b, lfm2-tiny, lfm2-350m, qwen35-tiny, qwen35-0.8b")->required();
  gm->add_option("--dtype", dtype,
                 "f32, f16, bf16, or a quantization: " + prefixd::quant_mix_names())
      ->capture_default_str();
  gm->add_option("--out,-o", out, "output path")->required();

  prefixd::QuantizeOptions quant;
  CLI::App* qz = app.add_subcommand("quantize", "quantize a GGUF model (llama.cpp's mixes)");
  qz->add_option("input", quant.in_path, "GGUF model to read (F32, F16, BF16 or quantized)")
      ->required();
  qz->add_option("output", quant.out_path, "GGUF model to write")->required();
  qz->add_option("type", quant.type_name, prefixd::quant_mix_names() + " (any case)")->required();

  CLI11_PARSE(app, argc, argv);
  // Environment variables count only where the flag was not given.
  serve.cpu_isa_option.take_env(std::getenv(prefixd::kCpuIsaEnvVar));
  gen.cpu_isa_option.take_env(std::getenv(prefixd::kCpuIsaEnvVar));
  if (const char* v = std::getenv("PREFIXD_CUDNN_LIB"); serve.cudnn_lib.empty() && v != nullptr) serve.cudnn_lib = v;
  if (const char* v = std::getenv("PREFIXD_CUDNN_PROBE"); serve.cudnn_probe.empty() && v != nullptr)
    serve.cudnn_probe = v;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(var); v != nullptr && v[0] != '\0') serve.cudnn_python_prefixes.push_back(v);
  if (const char* path = std::getenv("PATH"); path != nullptr)
    if (std::string p = prefixd::cuda::python_prefix_on_path(path); !p.empty()) serve.cudnn_python_prefixes.push_back(p);
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    serve.cudnn_python_prefixes.push_back(std::string(home) + "/.local");

  if (g->parsed()) {
    if (!prompt_ids.empty()) {
      std::string err;
      gen.prompt_ids = parse_ids(prompt_ids, &err);
      if (!err.empty()) {
        std::fprintf(stderr, "prefixd generate: %s\n", err.c_str());
        return 2;
      }
    }
    return prefixd::run_generate(gen);
  }
  if (qz->parsed()) return prefixd::run_quantize(quant);
  if (gm->parsed()) {
    prefixd::Status s = prefixd::write_preset_model(preset, dtype, out);
    if (!s.ok()) {
      std::fprintf(stderr, "prefixd gen-model: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", out.c_str());
    return 0;
  }
  return prefixd::run_serve(serve);
}
