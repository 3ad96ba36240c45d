// Model path resolution: the bundled stories260K and the built-in demo model.
#include "daemon/model_source.h"

#include <cstdlib>
#include <filesystem>

#include "engine/model/model_presets.h"

// CMake sets it to the source tree's models/ folder; without it, the working directory's.
#ifndef PREFIXD_MODELS_DIR
#define PREFIXD_MODELS_DIR "models"
#endif

namespace prefixd {

std::string bundled_model_path() {
  return std::string(PREFIXD_MODELS_DIR) + "/" + kDefaultModel + ".gguf";
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("PREFIXD_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/prefixd";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/prefixd";
  return "/tmp/prefixd-cache";
}

Result<std::string> resolve_model_path(const std::string& model_arg, const std::string& cache_dir) {
  if (model_arg == kDefaultModel) {
    std::string path = bundled_model_path();
    if (!std::filesystem::exists(path)) {
      return Status::error(std::string("the bundled model ") + kDefaultModel +
                           " (the default --model) is missing: expected '" + path +
                           "' (models/ in the source tree prefixd was built from); restore that "
                           "file, or pass --model FILE.gguf or --model demo");
    }
    return path;
  }
  if (model_arg != "demo" && model_arg.rfind("preset:", 0) != 0) {
    if (!std::filesystem::exists(model_arg)) {
      return Status::error("model file '" + model_arg + "' does not exist");
    }
    return model_arg;
  }
  // `demo` or `preset:NAME[:f32|f16|bf16]`: generated once, then reused.
  std::string preset = "demo";
  WeightType type = WeightType::BF16;
  std::string type_name = "bf16";
  if (model_arg != "demo") {
    std::string rest = model_arg.substr(7);
    size_t colon = rest.find(':');
    preset = rest.substr(0, colon);
    if (colon != std::string::npos) {
      type_name = rest.substr(colon + 1);
      if (type_name == "f32") type = WeightType::F32;
      else if (type_name == "f16") type = WeightType::F16;
      else if (type_name == "bf16") type = WeightType::BF16;
      else return Status::error("unknown weight type '" + type_name + "' in --model (f32, f16, bf16)");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(cache_dir + "/models", ec);
  if (ec) return Status::error("cannot create cache directory '" + cache_dir + "/models': " + ec.message());
  std::string path = cache_dir + "/models/" + preset + "-" + type_name + ".gguf";
  if (!std::filesystem::exists(path)) {
    if (Status s = write_preset_model(preset, type, path); !s.ok()) return s;
  }
  return path;
}

}  // namespace prefixd
