// Forward-pass benchmark (prints numbers; not a test): prefill tokens/s at 512
// and 2048 prompt tokens (computed in chunks of --chunk tokens, like
// llama-bench's ubatch) and decode tokens/s over 128 tokens from an empty
// context, on generated models or GGUF files, like `llama-bench -p 512,2048
// -n 128`; also the file size and the resident memory the model's load added.
// On the CPU backend a second line puts decode's weight read (the bytes of the
// weights one token multiplies, times tg128) beside a plain read of as many
// bytes by as many threads taken right before and after each decode rep
// (tests/memory_read.h), as a fraction: the median rep's of the read's mean
// rate and of its fastest passes, and each rep's of the mean.
//
// Usage: bench_forward [--threads N] [--models smol-135m:f32,smol-135m:bf16,tiny:f32,tiny:bf16]
//                      [--model FILE.gguf ...] (any GGUF; with --model, presets only if --models given)
//                      [--reps R] [--chunk 512] [--kv f16] [--prefill 0 (decode only, for profiling; pp prints 0)]
//                      [--plain-read 0 (no plain read beside the decode reps: benchmarks run side by side)]
//                      [--cpu-isa auto|avx512bf16|avx512|avx2|portable (default $PREFIXD_CPU_ISA)]
//                      [--backend cpu|cuda (cuda: device 0, builds with the CUDA backend only)]
//                      [--cuda-graphs on|off (default on: decode steps replayed as CUDA graphs)]
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
#include "engine/sampler.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_plan.h"
#include "tests/bench_backend.h"
#include "tests/memory_read.h"

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

// The command line.
struct Args {
  int threads = 2, reps = 3, chunk = 512;
  std::string models = "smol-135m:f32,smol-135m:bf16,tiny:f32,tiny:bf16";
  std::string kv_name = "f16", backend_name = "cpu", cuda_graphs = "on";
  std::string isa_name = "auto", isa_source = "PREFIXD_CPU_ISA";
  std::vector<std::string> files;  // --model FILE: any GGUF, in addition to the presets
  bool models_given = false;
  bool prefill = true;  // --prefill 0: only tg128 (a decode profile without the prefill in it)
  bool plain_read = true;  // --plain-read 0: no read beside the decode reps (two benchmarks side by side)
};

Args parse_args(int argc, char** argv) {
  Args a;
  if (const char* isa_env = std::getenv("PREFIXD_CPU_ISA")) a.isa_name = isa_env;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--threads") a.threads = std::atoi(argv[i + 1]);
    else if (f == "--model") a.files.push_back(argv[i + 1]);
    else if (f == "--models") {
      a.models = argv[i + 1];
      a.models_given = true;
    }
    else if (f == "--prefill") a.prefill = std::atoi(argv[i + 1]) != 0;
    else if (f == "--plain-read") a.plain_read = std::atoi(argv[i + 1]) != 0;
    else if (f == "--reps") a.reps = std::atoi(argv[i + 1]);
    else if (f == "--chunk") a.chunk = std::atoi(argv[i + 1]);
    else if (f == "--kv") a.kv_name = argv[i + 1];
    else if (f == "--backend") a.backend_name = argv[i + 1];
    else if (f == "--cuda-graphs") a.cuda_graphs = argv[i + 1];
    else if (f == "--cpu-isa") {
      a.isa_name = argv[i + 1];
      a.isa_source = "--cpu-isa";
    }
  }
  return a;
}

// (label, type, path) of every model to run: presets (written on first use
// into `dir`), then files. Empty after telling stderr why a preset failed.
std::vector<std::array<std::string, 3>> model_runs(const Args& a, const std::string& dir, bool* failed) {
  std::vector<std::array<std::string, 3>> runs;
  for (const std::string& spec : a.files.empty() || a.models_given ? split(a.models, ',') : std::vector<std::string>{}) {
    std::vector<std::string> parts = split(spec, ':');
    std::string preset = parts[0], type = parts.size() > 1 ? parts[1] : "f32";
    std::string path = dir + "/" + preset + "-" + type + ".gguf";
    if (!std::filesystem::exists(path)) {
      // f32, f16, bf16 or a quantization (q8_0, q4_k_m, ...: quant_mix.h), any case.
      if (Status s = write_preset_model(preset, type, path); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        *failed = true;
        return {};
      }
    }
    runs.push_back({preset, type, path});
  }
  for (const std::string& f : a.files) runs.push_back({std::filesystem::path(f).filename().string(), "file", f});
  return runs;
}

// Tokens per second of an n_prompt-token prefill in chunks (best of reps).
double prefill_tps(ForwardPass& fwd, KvPool& pool, const std::vector<int32_t>& table, int32_t n_vocab,
                   int n_prompt, int chunk, int reps) {
  std::vector<float> logits;
  BatchBuilder b(16);
  std::vector<int32_t> tokens(n_prompt);
  for (int i = 0; i < n_prompt; ++i) tokens[i] = 3 + (i * 7919) % (n_vocab - 3);
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
  return n_prompt / best;
}

// Decode: 128 greedy tokens per rep. tps: the best rep's tokens per second.
// With step_bytes > 0 (the CPU), a plain `threads`-thread read of step_bytes
// is taken right before and right after each rep, and the rep's weight read
// is a fraction of their mean: a shared host's memory drifts by tens of
// percent from minute to minute, and a read beside each rep cancels most of
// that drift where one read after all reps did not. A rep's rate is bytes
// over the rep's time, so it is compared with the reads' passes taken
// together (ReadRate::mean); the fraction of their fastest passes
// (ReadRate::best) prints beside it.
struct DecodeFigures {
  double tps = 0;
  std::vector<double> fractions;       // per rep, of the reads' mean
  std::vector<double> best_fractions;  // per rep, of the reads' fastest passes
  double read_gbs = 0;                 // the mean of the plain reads
  static double median(std::vector<double> f) {
    std::sort(f.begin(), f.end());
    return f.empty() ? 0.0 : f.size() % 2 ? f[f.size() / 2] : 0.5 * (f[f.size() / 2 - 1] + f[f.size() / 2]);
  }
  double fraction() const { return median(fractions); }  // the median rep's
  double best_fraction() const { return median(best_fractions); }
};

DecodeFigures decode_figures(ForwardPass& fwd, KvPool& pool, const std::vector<int32_t>& table, int reps,
                             size_t step_bytes, int threads) {
  std::vector<float> logits;
  BatchBuilder b(16);
  DecodeFigures d;
  double best = 1e30, read_sum = 0;
  auto read = [&] { return testing::plain_read_rate(step_bytes, threads, 3); };
  for (int r = 0; r < reps; ++r) {
    const testing::ReadRate before = step_bytes > 0 ? read() : testing::ReadRate{};
    int32_t tok = 1;
    double t0 = now_s();
    for (int i = 0; i < 128; ++i) {
      b.clear();
      b.add(std::span<const int32_t>(&tok, 1), i, table, LogitsWanted::kLast);
      fwd.run(b.batch(), pool, &logits);
      tok = greedy_token(logits.data(), static_cast<int32_t>(logits.size()));
    }
    const double t = now_s() - t0;
    best = std::min(best, t);
    if (step_bytes == 0) continue;
    const testing::ReadRate after = read();
    const double mean_gbs = 0.5 * (before.mean + after.mean) / 1e9, best_gbs = 0.5 * (before.best + after.best) / 1e9;
    read_sum += mean_gbs;
    const double decode_gbs = static_cast<double>(step_bytes) * 128 / t / 1e9;
    d.fractions.push_back(decode_gbs / mean_gbs);
    d.best_fractions.push_back(decode_gbs / best_gbs);
  }
  d.tps = 128 / best;
  d.read_gbs = reps > 0 ? read_sum / reps : 0.0;
  return d;
}

// Bytes of the weights one decode step reads: every tensor of the file but the
// token embeddings, of which a step reads one row (unless the output matrix is
// tied to them: then they are read whole, as the output).
size_t decode_weight_bytes(const GgufFile& file) {
  bool tied = true;
  for (const GgufTensorInfo& t : file.tensors()) tied = tied && t.name != "output.weight";
  size_t bytes = 0;
  for (const GgufTensorInfo& t : file.tensors())
    if (tied || t.name != "token_embd.weight") bytes += t.n_bytes;
  return bytes;
}

// One model: loads it, prints pp512, pp2048, tg128 and its file and resident
// sizes. Returns 0, or 1 after telling stderr.
int bench_model(Backend& backend, const Args& a, DType kv, const std::string& label, const std::string& type,
                const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.message().c_str());
    return 1;
  }
  const double rss_before = resident_mb();
  auto loaded = Model::load(file.value(), backend);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), loaded.message().c_str());
    return 1;
  }
  auto model = std::move(loaded.value());
  const double load_mb = resident_mb() - rss_before;
  const double file_mb = static_cast<double>(file.value()->size_bytes()) / 1e6;
  const ModelConfig& c = model->config();
  KvGeometry g;
  g.n_layers = c.n_kv_layers();
  g.n_state_slots = c.state_floats() > 0 ? 1 : 0;  // a recurrent model's one sequence
  g.state_floats = c.state_floats();
  g.block_size = 16;
  g.n_blocks = 2048 / 16 + 16;
  g.n_kv_heads = c.n_kv_heads;
  g.head_dim = c.head_dim;
  g.dtype = kv;
  KvPool pool = backend.allocate_kv_pool(g).value();
  std::vector<int32_t> table(g.n_blocks);
  for (int32_t i = 0; i < g.n_blocks; ++i) table[i] = i;
  ForwardPass fwd(*model, a.chunk, 1);
  std::vector<double> results;
  for (int n_prompt : {512, 2048})
    results.push_back(a.prefill ? prefill_tps(fwd, pool, table, c.n_vocab, n_prompt, a.chunk, a.reps) : 0.0);
  const size_t step_bytes = backend.name() == "cpu" && a.plain_read ? decode_weight_bytes(*file.value()) : 0;
  const DecodeFigures d = decode_figures(fwd, pool, table, a.reps, step_bytes, a.threads);
  results.push_back(d.tps);
  std::printf("%-24s %-8s %10.1f %10.1f %10.1f %9.1f %9.1f\n", label.c_str(), type.c_str(), results[0],
              results[1], results[2], file_mb, load_mb);
  if (step_bytes > 0) {
    std::string per_rep;
    for (double f : d.fractions) per_rep += (per_rep.empty() ? "" : " ") + std::to_string(f).substr(0, 4);
    std::printf("  decode reads %.1f MB a token: %.1f GB/s; a plain %d-thread read of as many bytes beside each"
                " rep: %.1f GB/s (decode at %.2f of it, %.2f of its fastest passes; per rep %s)\n",
                static_cast<double>(step_bytes) / 1e6, static_cast<double>(step_bytes) * d.tps / 1e9, a.threads,
                d.read_gbs, d.fraction(), d.best_fraction(), per_rep.c_str());
  }
#if defined(PREFIXD_HAVE_CUDA)
  if (backend.name() == "cuda") {
    const cuda::DecodeGraphStats gs = decode_graph_stats(backend);
    using ll = long long;
    std::printf("  cuda graphs %s: %lld recorded, %lld replays (%lld checked), %lld eager steps%s%s\n",
                a.cuda_graphs.c_str(), ll(gs.captures), ll(gs.replays), ll(gs.checked_replays),
                ll(gs.eager_steps), gs.disabled ? "; OFF: " : "", gs.disabled_reason.c_str());
  }
#endif
  std::fflush(stdout);
  backend.free_kv_pool(pool);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches a log even if the run is cut short
  const Args a = parse_args(argc, argv);
  Result<cpu::CpuIsa> isa = cpu::choose_cpu_isa(a.isa_name);
  if (!isa.ok()) {
    std::fprintf(stderr, "%s: %s\n", a.isa_source.c_str(), isa.message().c_str());
    return 2;
  }
  if (Status s = testing::check_bench_backend(a.backend_name); !s.ok()) {
    std::fprintf(stderr, "bench_forward: %s\n", s.message().c_str());
    return 2;
  }
  DType kv = a.kv_name == "f32" ? DType::F32 : a.kv_name == "bf16" ? DType::BF16 : DType::F16;
  std::string dir = std::filesystem::temp_directory_path() / "prefixd-bench-models";
  std::filesystem::create_directories(dir);
  if (a.cuda_graphs != "on" && a.cuda_graphs != "off") {
    std::fprintf(stderr, "bench_forward: --cuda-graphs '%s' is not one of on, off\n",
                 a.cuda_graphs.c_str());
    return 2;
  }
  Result<std::unique_ptr<Backend>> made =
      testing::make_bench_backend(a.backend_name, a.threads, isa.value(), a.cuda_graphs == "on");
  if (!made.ok()) {
    std::fprintf(stderr, "bench_forward: %s\n", made.message().c_str());
    return 1;
  }
  std::unique_ptr<Backend> backend = std::move(made.value());
  if (a.backend_name == "cpu" && (a.isa_name.empty() || a.isa_name == "auto"))
    std::printf("auto: %s\n", cpu::auto_plan().describe().c_str());
  std::printf("%-24s %-8s %10s %10s %10s %9s %9s   (backend %s, threads %d, kv %s, chunk %d, cpu_isa %s)\n",
              "model", "type", "pp512", "pp2048", "tg128", "file_MB", "load_MB", backend->name().c_str(), a.threads,
              a.kv_name.c_str(), a.chunk, cpu::cpu_isa_name(isa.value()));
  bool failed = false;
  const std::vector<std::array<std::string, 3>> runs = model_runs(a, dir, &failed);
  if (failed) return 1;
  for (const auto& [label, type, path] : runs) {
    if (int rc = bench_model(*backend, a, kv, label, type, path); rc != 0) return rc;
  }
  return 0;
}
