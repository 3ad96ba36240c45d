// State bytes per cached token of the hybrid presets against llama presets
// (prints numbers; not a test, nothing timed): for each `prefixd gen-model`
// preset, the device pool's geometry as the engine sizes it
// (EngineOptions::pool_geometry) at blocks of 16 tokens, BF16 and F32 K/V:
// the K/V bytes of one token (lfm2: its convolution layers' tails included,
// they live in every block), the bytes of one state snapshot (qwen35), and
// the amortized pool bytes per cached token with one snapshot every 8 and
// every 32 blocks (the default interval: EngineOptions::snapshot_interval_blocks).
// The models' hyper-parameters come from the presets (engine/model/model_presets.h);
// no file is written.
//
// Usage: bench_state_bytes [--block-size 16]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model/model_config.h"
#include "engine/model/model_presets.h"

using namespace prefixd;

namespace {

// The hyper-parameters of `s` that size the pool, as load_model_config
// reads them from the file the preset writes (qwen35: every
// full_attention_interval-th layer attention, the rest Gated DeltaNet with
// d_k = d_v = ssm_head_dim; lfm2: convolution layers keep K/V-sized areas).
ModelConfig pool_config(const PresetSpec& s) {
  ModelConfig c;
  c.arch_name = s.arch;
  c.n_embd = s.n_embd;
  c.n_layers = s.n_layers;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim();
  c.layer_is_window.assign(static_cast<size_t>(s.n_layers), 0);
  if (s.arch == "qwen35") {
    c.arch = Arch::kQwen35;
    c.layer_is_recurrent.assign(static_cast<size_t>(s.n_layers), 0);
    for (int32_t i = 0; i < s.n_layers; ++i) c.layer_is_recurrent[static_cast<size_t>(i)] = s.is_delta_net(i) ? 1 : 0;
    c.delta_net.n_k_heads = s.ssm_k_heads;
    c.delta_net.n_v_heads = s.ssm_v_heads;
    c.delta_net.d_k = s.ssm_head_dim;
    c.delta_net.d_v = s.ssm_head_dim;
    c.delta_net.conv_width = s.ssm_conv_width;
  } else if (s.arch == "lfm2") {
    c.arch = Arch::kLfm2;
    c.layer_is_conv.assign(static_cast<size_t>(s.n_layers), 0);
    for (int32_t i = 0; i < s.n_layers; ++i) c.layer_is_conv[static_cast<size_t>(i)] = s.is_conv(i) ? 1 : 0;
    c.conv_l_cache = s.conv_l_cache;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int32_t block_size = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--block-size") {
      block_size = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<std::string> presets = {"qwen35-0.8b", "lfm2-350m", "smol-135m", "llama-245m", "llama-1b"};
  std::printf("blocks of %d tokens; amortized = K/V per token + snapshot / (interval x %d)\n", block_size,
              block_size);
  std::printf("%-12s %-4s %8s %10s %12s %14s %14s\n", "preset", "kv", "kv_layers", "kv_B/token", "snapshot_B",
              "amort_B@8blk", "amort_B@32blk");
  for (const std::string& name : presets) {
    Result<PresetSpec> spec = preset_spec(name);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s\n", spec.status().message().c_str());
      return 1;
    }
    const ModelConfig model = pool_config(*spec);
    for (DType kv : {DType::BF16, DType::F32}) {
      EngineOptions o;
      o.block_size = block_size;
      o.kv_dtype = kv;
      o.max_running = 1;
      o.state_snapshots = 0;  // the slots do not change the figures below
      const KvGeometry g = o.pool_geometry(model);
      const double kv_per_token = static_cast<double>(g.global_block_bytes()) / block_size;
      const int64_t snapshot = model.state_floats() * static_cast<int64_t>(sizeof(float));
      auto amortized = [&](int interval_blocks) {
        return kv_per_token + static_cast<double>(snapshot) / (static_cast<double>(interval_blocks) * block_size);
      };
      std::printf("%-12s %-4s %8d %10.0f %12lld %14.0f %14.0f\n", name.c_str(), kv == DType::BF16 ? "bf16" : "f32",
                  g.n_layers, kv_per_token, static_cast<long long>(snapshot), amortized(8), amortized(32));
    }
  }
  return 0;
}
