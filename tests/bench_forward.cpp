// Forward-pass benchmark (prints numbers; not a test): prefill tokens/s at 512
// and 2048 prompt tokens (computed in chunks of --chunk tokens, like
// llama-bench's ubatch) and decode tokens/s over 128 tokens from an empty
// context, on generated models or GGUF files, like `llama-bench -p 512,2048
// -n 128`; also the file size and the resident memory the model's load added.
//
// Usage: bench_forward [--threads N] [--models smol-135m:f32,smol-135m:bf16,tiny:f32,tiny:bf16]
//                      [--model FILE.gguf ...] (any GGUF; with --model, presets only if --models given)
//                      [--reps R] [--chunk 512] [--kv f16]
//                      [--cpu-isa auto|avx512bf16|avx512|avx2|portable (default $PREFIXD_CPU_ISA)]
//                      [--backend cpu|cuda (cuda: device 0, builds with the CUDA backend only)]
// Presets are written on first use to $TMPDIR/prefixd-bench-models/PRESET-TYPE.gguf
// (`prefixd gen-model` may write the file there beforehand).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/model_presets.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_plan.h"
#include "tests/bench_backend.h"

using namespace prefixd;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(sep, i);
    if (j == std::string::npos) j = s.size();
    out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// Resident set size of this process in MB (10^6 bytes), from /proc/self/statm.
double resident_mb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches a log even if the run is cut short
  int threads = 2, reps = 3, chunk = 512;
  std::string models = "smol-135m:f32,smol-135m:bf16,tiny:f32,tiny:bf16";
  std::string kv_name = "f16", backend_name = "cpu";
  const char* isa_env = std::getenv("PREFIXD_CPU_ISA");
  std::string isa_name = isa_env != nullptr ? isa_env : "auto", isa_source = "PREFIXD_CPU_ISA";
  std::vector<int> prompt_lens = {512, 2048};
  std::vector<std::string> files;  // --model FILE: any GGUF, in addition to the presets
  bool models_given = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--model") files.push_back(argv[i + 1]);
    else if (a == "--models") {
      models = argv[i + 1];
      models_given = true;
    }
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--chunk") chunk = std::atoi(argv[i + 1]);
    else if (a == "--kv") kv_name = argv[i + 1];
    else if (a == "--backend") backend_name = argv[i + 1];
    else if (a == "--cpu-isa") {
      isa_name = argv[i + 1];
      isa_source = "--cpu-isa";
    }
  }
  Result<cpu::CpuIsa> isa = cpu::choose_cpu_isa(isa_name);
  if (!isa.ok()) {
    std::fprintf(stderr, "%s: %s\n", isa_source.c_str(), isa.message().c_str());
    return 2;
  }
  if (Status s = testing::check_bench_backend(backend_name); !s.ok()) {
    std::fprintf(stderr, "bench_forward: %s\n", s.message().c_str());
    return 2;
  }
  DType kv = kv_name == "f32" ? DType::F32 : kv_name == "bf16" ? DType::BF16 : DType::F16;
  std::string dir = std::filesystem::temp_directory_path() / "prefixd-bench-models";
  std::filesystem::create_directories(dir);
  Result<std::unique_ptr<Backend>> made = testing::make_bench_backend(backend_name, threads, isa.value());
  if (!made.ok()) {
    std::fprintf(stderr, "bench_forward: %s\n", made.message().c_str());
    return 1;
  }
  std::unique_ptr<Backend> backend = std::move(made.value());
  if (backend_name == "cpu" && (isa_name.empty() || isa_name == "auto"))
    std::printf("auto: %s\n", cpu::auto_plan().describe().c_str());
  std::printf("%-24s %-8s %10s %10s %10s %9s %9s   (backend %s, threads %d, kv %s, chunk %d, cpu_isa %s)\n",
              "model", "type", "pp512", "pp2048", "tg128", "file_MB", "load_MB", backend->name().c_str(), threads,
              kv_name.c_str(), chunk, cpu::cpu_isa_name(isa.value()));
  // (label, type, path) of every model to run: presets written on first use, then files.
  std::vector<std::array<std::string, 3>> runs;
  for (const std::string& spec : files.empty() || models_given ? split(models, ',') : std::vector<std::string>{}) {
    std::vector<std::string> parts = split(spec, ':');
    std::string preset = parts[0], type = parts.size() > 1 ? parts[1] : "f32";
    std::string path = dir + "/" + preset + "-" + type + ".gguf";
    if (!std::filesystem::exists(path)) {
      // f32, f16, bf16 or a quantization (q8_0, q4_k_m, ...: quant_mix.h), any case.
      if (Status s = write_preset_model(preset, type, path); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        return 1;
      }
    }
    runs.push_back({preset, type, path});
  }
  for (const std::string& f : files) runs.push_back({std::filesystem::path(f).filename().string(), "file", f});
  for (const auto& [preset, type, path] : runs) {
    auto file = GgufFile::open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s\n", file.message().c_str());
      return 1;
    }
    const double rss_before = resident_mb();
    auto loaded = Model::load(file.value(), *backend);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), loaded.message().c_str());
      return 1;
    }
    auto model = std::move(loaded.value());
    const double load_mb = resident_mb() - rss_before;
    const double file_mb = static_cast<double>(file.value()->size_bytes()) / 1e6;
    const ModelConfig& c = model->config();
    KvGeometry g;
    g.n_layers = c.n_layers;
    g.block_size = 16;
    g.n_blocks = 2048 / 16 + 16;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    g.dtype = kv;
    KvPool pool = backend->allocate_kv_pool(g).value();
    std::vector<int32_t> table(g.n_blocks);
    for (int32_t i = 0; i < g.n_blocks; ++i) table[i] = i;
    ForwardPass fwd(*model, chunk, 1);
    std::vector<float> logits;
    BatchBuilder b(16);
    std::vector<double> results;
    for (int n_prompt : prompt_lens) {
      std::vector<int32_t> tokens(n_prompt);
      for (int i = 0; i < n_prompt; ++i) tokens[i] = 3 + (i * 7919) % (c.n_vocab - 3);
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        double t0 = now_s();
        for (int p = 0; p < n_prompt; p += chunk) {
          int n = std::min(chunk, n_prompt - p);
          b.clear();
          b.add(std::span<const int32_t>(tokens.data() + p, n), p, table,
                p + n == n_prompt ? LogitsWanted::kLast : LogitsWanted::kNone);
          fwd.run(b.batch(), pool, &logits);
        }
        best = std::min(best, now_s() - t0);
      }
      results.push_back(n_prompt / best);
    }
    {
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        int32_t tok = 1;
        double t0 = now_s();
        for (int i = 0; i < 128; ++i) {
          b.clear();
          b.add(std::span<const int32_t>(&tok, 1), i, table, LogitsWanted::kLast);
          fwd.run(b.batch(), pool, &logits);
          tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        }
        best = std::min(best, now_s() - t0);
      }
      results.push_back(128 / best);
    }
    std::printf("%-24s %-8s %10.1f %10.1f %10.1f %9.1f %9.1f\n", preset.c_str(), type.c_str(), results[0],
                results[1], results[2], file_mb, load_mb);
    std::fflush(stdout);
    backend->free_kv_pool(pool);
  }
  return 0;
}
