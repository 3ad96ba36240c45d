// cuDNN attention planned for an H100 on a machine without a GPU. With the
// CUDA toolkit's stub driver as libcuda.so.1 first on the library path
// (ctest's ENVIRONMENT, tests/CMakeLists.txt) and a saved H100 device
// description (tests/data/cudnn_h100_device.json, or $PREFIXD_CUDNN_DEVICE_JSON),
// every plan bucket of preset:llama-1b and the first and last of each test
// model's class (../shared/models), with the daemon's defaults (block size, batch budget,
// pool size, KV dtype), is built through the backend's own plan cache
// (kernels/cuda/cudnn/sdpa_plans.h) for that description: the graph
// finalizes, the heuristics return an engine and the kernel compiles;
// planning stops at module load, which needs a driver. A head dim cuDNN
// refuses (60) comes back refused, which leaves it to the simple kernel.
// Exits 77 (skipped) where cuDNN, or a cuDNN that plans deviceless (9.8+), is absent.
//
// On a GPU host, `test_cudnn_deviceless --dump FILE` (without the stub)
// writes device 0's description as JSON, to replace the saved one.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/server_options.h"
#include "engine/engine.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/model_presets.h"
#include "tests/shared_dir.h"

#if defined(PREFIXD_HAVE_CUDNN)
#include "kernels/cuda/cudnn/cudnn_api.h"
#include "kernels/cuda/cudnn/cudnn_search.h"
#include "kernels/cuda/cudnn/sdpa_batch.h"
#include "kernels/cuda/cudnn/sdpa_graph.h"
#include "kernels/cuda/cudnn/sdpa_plans.h"
#endif

using namespace prefixd;

#if defined(PREFIXD_HAVE_CUDNN)
using namespace prefixd::cuda;

namespace {

std::shared_ptr<const CudnnApi> g_api;  // loaded by main()
std::string g_device_json;              // the saved description

const char* env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// cuDNN as the backend would find it, then the build machine's.
std::vector<std::string> candidates() {
  CudnnSearch search;
  search.explicit_lib = env_or_empty("PREFIXD_CUDNN_LIB");
  if (search.explicit_lib == kCudnnAuto) search.explicit_lib.clear();  // auto: search
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (env_or_empty(var)[0] != '\0') search.python_prefixes.push_back(env_or_empty(var));
  if (std::string p = python_prefix_on_path(env_or_empty("PATH")); !p.empty()) search.python_prefixes.push_back(p);
  if (env_or_empty("HOME")[0] != '\0') search.python_prefixes.push_back(std::string(env_or_empty("HOME")) + "/.local");
  std::vector<std::string> c = cudnn_library_candidates(search);
#if defined(PREFIXD_TEST_CUDNN_LIBRARY)
  if (search.explicit_lib.empty()) c.push_back(PREFIXD_TEST_CUDNN_LIBRARY);
#endif
  return c;
}

// A shape class of a model as the daemon runs it (the bucket left open).
struct ModelClass {
  std::string model;
  SdpaShape shape;
  int32_t max_batch_tokens = 0;
  int32_t n_ctx = 0;
};

// The classes of one model configuration with the daemon's defaults: its
// global layers and, with a sliding window, its window layers.
std::vector<ModelClass> classes_of(const std::string& name, const ModelConfig& cfg, DType kv,
                                   int32_t max_batch_tokens) {
  const ServerOptions daemon;
  EngineOptions eo;
  eo.block_size = daemon.block_size;
  eo.kv_dtype = kv;
  eo.kv_pool_bytes = size_t(daemon.kv_pool_mib) << 20;
  const KvGeometry g = eo.pool_geometry(cfg);
  ModelClass c;
  c.model = name;
  c.shape.dtype = kv;
  c.shape.n_heads = cfg.n_heads;
  c.shape.n_kv_heads = g.n_kv_heads;
  c.shape.head_dim = g.head_dim;
  c.shape.block_size = g.block_size;
  c.shape.n_pool_blocks = g.n_blocks;
  c.max_batch_tokens = max_batch_tokens;
  c.n_ctx = cfg.n_ctx_train;
  std::vector<ModelClass> out;
  bool global = false, window = false;
  for (int32_t l = 0; l < cfg.n_layers; ++l) (cfg.window_of(l) > 0 ? window : global) = true;
  if (global) out.push_back(c);
  if (window) {
    c.shape.windowed = true;
    out.push_back(c);
  }
  return out;
}

// The daemon's --kv-dtype auto: BF16 when the first attention layer's K and V weights are BF16.
DType auto_kv_dtype(const GgufFile& f) {
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    if (n.size() > 14 && n.compare(n.size() - 14, 14, ".attn_k.weight") == 0) {
      const GgufTensorInfo* v = f.find_tensor(n.substr(0, n.size() - 14) + ".attn_v.weight");
      return t.type == WeightType::BF16 && v != nullptr && v->type == WeightType::BF16 ? DType::BF16 : DType::F16;
    }
  }
  return DType::F16;
}

// Every test model's classes (one file per distinct class), then preset:llama-1b's,
// with the benchmarks' batch budget of 8192 tokens as well as the daemon's.
std::vector<ModelClass> all_classes() {
  const ServerOptions daemon;
  std::vector<ModelClass> out;
  auto add = [&](const std::vector<ModelClass>& cs) {
    for (const ModelClass& c : cs) {
      bool seen = false;
      for (const ModelClass& o : out)
        seen = seen || (o.shape == c.shape && o.max_batch_tokens == c.max_batch_tokens && o.n_ctx == c.n_ctx);
      if (!seen) out.push_back(c);
    }
  };
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"models", "models/quant"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(testing::shared_dir() + "/" + dir, ec))
      if (e.path().extension() == ".gguf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    auto f = GgufFile::open(path.string());
    REQUIRE_MESSAGE(f.ok(), f.message());
    auto cfg = load_model_config(*f.value());
    if (!cfg.ok()) {  // an architecture the engine does not serve yet has no attention plans
      MESSAGE(path.filename().string() << ": not served (" << cfg.message() << ")");
      continue;
    }
    add(classes_of(path.filename().string(), cfg.value(), auto_kv_dtype(*f.value()), daemon.max_batch_tokens));
  }
  Result<PresetSpec> spec = preset_spec("llama-1b");
  REQUIRE(spec.ok());
  ModelConfig cfg;
  cfg.n_layers = spec->n_layers;
  cfg.n_heads = spec->n_heads;
  cfg.n_kv_heads = spec->n_kv_heads;
  cfg.head_dim = spec->head_dim();
  cfg.n_ctx_train = spec->n_ctx;
  cfg.layer_is_window.assign(size_t(cfg.n_layers), 0);
  add(classes_of("preset:llama-1b", cfg, DType::BF16, daemon.max_batch_tokens));
  add(classes_of("preset:llama-1b", cfg, DType::BF16, 8192));
  return out;
}

// Every bucket of a class: query rows up to the batch budget, keys up to the context.
std::vector<SdpaShape> every_bucket_of(const ModelClass& c) {
  std::vector<SdpaShape> out;
  for (int32_t q = kSdpaMinBucket; q <= sdpa_bucket(c.max_batch_tokens); q *= 2) {
    for (int32_t kv = q; kv <= std::max(q, sdpa_bucket(c.n_ctx)); kv *= 2) {
      SdpaShape s = c.shape;
      s.max_q = q;
      s.max_kv = kv;
      out.push_back(s);
    }
  }
  return out;
}

// The buckets of a class: query rows up to the batch budget, keys up to the
// context. preset:llama-1b (the GPU benchmarks' model) plans every one; a
// test model its first and last, the buckets between differing from those
// only in their sizes (149 plans took 135 s, more than any other test).
std::vector<SdpaShape> buckets_of(const ModelClass& c) {
  std::vector<SdpaShape> out = every_bucket_of(c);
  if (c.model.rfind("preset:", 0) == 0 || out.size() <= 2) return out;
  return {out.front(), out.back()};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("every plan bucket of preset:llama-1b and the corner buckets of the test models compile for an H100 (deviceless)") {
  Result<CudnnDescriptor> device = device_prop_from_json(*g_api, g_device_json);
  REQUIRE_MESSAGE(device.ok(), device.message());
  PlanTarget target;
  target.device_prop = device.value().get();
  SdpaPlanCache cache(g_api, target);
  int n_plans = 0;
  for (const ModelClass& c : all_classes()) {
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    for (const SdpaShape& s : buckets_of(c)) {
      CAPTURE(c.model);
      CAPTURE(s.describe());
      REQUIRE(sdpa_known_limits(s, g_api->version).empty());  // the backend asks cuDNN for all of them
      bool built = false;
      const SdpaPlanCache::Entry& e = cache.get(s, &built);
      CHECK_MESSAGE(e.plan != nullptr, e.refusal);
      if (e.plan == nullptr || !built) continue;
      CHECK(e.plan->engine >= 0);
      CHECK_FALSE(e.plan->executable);
      CHECK(e.plan->shape.out_dtype == s.dtype);  // O in the pool dtype (sdpa_plans.h)
      ++n;
    }
    n_plans += n;
    MESSAGE(c.model << " " << c.shape.shape_class() << " (batch " << c.max_batch_tokens << ", context " << c.n_ctx
                    << "): " << n << " plans in "
                    << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  }
  MESSAGE(n_plans << " plans compiled");
  CHECK(n_plans > 0);
}

TEST_CASE("a head dim cuDNN refuses (60) is refused, so the simple kernel serves it") {
  Result<CudnnDescriptor> device = device_prop_from_json(*g_api, g_device_json);
  REQUIRE_MESSAGE(device.ok(), device.message());
  PlanTarget target;
  target.device_prop = device.value().get();
  SdpaPlanCache cache(g_api, target);
  SdpaShape s;
  s.dtype = DType::BF16;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 60;
  s.block_size = ServerOptions().block_size;
  s.n_pool_blocks = 1024;
  s.max_q = 128;
  s.max_kv = 1024;
  CHECK(sdpa_known_limits(s, g_api->version).empty());  // refused by cuDNN itself, not by prefixd
  const SdpaPlanCache::Entry& e = cache.get(s);
  CHECK(e.plan == nullptr);
  CHECK_FALSE(e.refusal.empty());
  MESSAGE("head dim 60: " << e.refusal);
  // The same shape with head dim 64 plans.
  s.head_dim = 64;
  CHECK(cache.get(s).plan != nullptr);
}

TEST_CASE("an execution's variant pack finalizes with every tensor of the graph") {
  for (bool windowed : {false, true}) {
    SdpaShape s;
    s.windowed = windowed;
    alignas(16) static int32_t meta[64];
    alignas(16) static char buffers[4][256];
    SdpaArgs a;
    a.q = buffers[0];
    a.k_pool = buffers[1];
    a.v_pool = buffers[2];
    a.out = buffers[3];
    a.meta = meta;
    a.scale = 0.125f;
    a.window = 512;
    const float masked = -std::numeric_limits<float>::infinity();
    Result<CudnnDescriptor> pack = make_sdpa_variant_pack(*g_api, s, a, &masked);
    CHECK_MESSAGE(pack.ok(), pack.message());
  }
}

TEST_CASE("shapes prefixd keeps from cuDNN never reach it") {
  SdpaShape s;
  s.dtype = DType::F32;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.n_pool_blocks = 64;
  s.max_q = s.max_kv = 128;
  CHECK_FALSE(sdpa_known_limits(s, g_api->version).empty());
  Result<CudnnDescriptor> device = device_prop_from_json(*g_api, g_device_json);
  REQUIRE(device.ok());
  PlanTarget target;
  target.device_prop = device.value().get();
  CHECK_FALSE(build_sdpa_plan(*g_api, target, s).ok());
}

#endif  // PREFIXD_HAVE_CUDNN

int main(int argc, char** argv) {
#if defined(PREFIXD_HAVE_CUDNN)
  std::string dump_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--dump") dump_path = argv[i + 1];
  Result<std::shared_ptr<const CudnnApi>> api = load_cudnn(candidates());
  if (!api.ok()) {
    std::printf("skipped: %s\n", api.message().c_str());
    return dump_path.empty() ? 77 : 1;
  }
  g_api = api.value();
  std::printf("cuDNN %s from %s\n", g_api->version_string().c_str(), g_api->library.c_str());
  if (!dump_path.empty()) {
    cudnnHandle_t handle = nullptr;
    if (cudnnStatus_t s = g_api->Create(&handle); s != CUDNN_STATUS_SUCCESS) {
      std::fprintf(stderr, "%s\n", g_api->describe(s, "cudnnCreate (a GPU and its driver are needed)").c_str());
      return 1;
    }
    Result<std::string> json = device_prop_json(*g_api, handle, 0);
    g_api->Destroy(handle);
    if (!json.ok()) {
      std::fprintf(stderr, "%s\n", json.message().c_str());
      return 1;
    }
    std::ofstream(dump_path, std::ios::binary) << json.value();
    std::printf("wrote device 0's description to %s\n", dump_path.c_str());
    return 0;
  }
  if (g_api->version < 90800) {
    std::printf("skipped: cuDNN %s cannot plan without a device (needs 9.8)\n", g_api->version_string().c_str());
    return 77;
  }
  const char* json_env = std::getenv("PREFIXD_CUDNN_DEVICE_JSON");
  const std::string json_path = json_env != nullptr && json_env[0] != '\0'
                                    ? std::string(json_env)
                                    : std::string(PREFIXD_SOURCE_DIR) + "/tests/data/cudnn_h100_device.json";
  g_device_json = read_file(json_path);
  if (g_device_json.empty()) {
    std::printf("no device description at %s\n", json_path.c_str());
    return 1;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
#else
  (void)argc;
  (void)argv;
  std::printf("skipped: built without cuDNN (no CUDA toolkit, or no cudnn_backend.h)\n");
  return 77;
#endif
}
