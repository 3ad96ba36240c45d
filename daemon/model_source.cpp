// Model path resolution: the bundled stories260K and the built-in demo model.
#include "daemon/model_source.h"

#include <cstdlib>
#include <filesystem>

#include "common/private_files.h"
#include "engine/model/model_presets.h"

// CMake sets it to the source tree's models/ folder; without it, the working directory's.
#ifndef PREFIXD_MODELS_DIR
#define PREFIXD_MODELS_DIR "models"
#endif

namespace prefixd {

std::string bundled_model_path() {
  const char* env = std::getenv("PREFIXD_MODELS_DIR");
  const std::string dir = env != nullptr && env[0] != '\0' ? env : PREFIXD_MODELS_DIR;
  return dir + "/" + kDefaultModel + ".gguf";
}

Result<std::string> find_cache_dir(const EnvLookup& lookup) {
  auto var = [&](const char* name) -> std::string {
    const char* v = lookup(name);
    return v != nullptr ? v : "";
  };
  if (std::string d = var("PREFIXD_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = var("XDG_CACHE_HOME"); !x.empty()) return x + "/prefixd";
  if (std::string h = var("HOME"); !h.empty()) return h + "/.cache/prefixd";
  // Per-user and 0700 by the XDG spec; /tmp would let another user plant models.
  if (std::string r = var("XDG_RUNTIME_DIR"); !r.empty()) return r + "/prefixd";
  return Status::error(
      "no cache directory: PREFIXD_CACHE_DIR, XDG_CACHE_HOME, HOME and XDG_RUNTIME_DIR are all "
      "unset, and prefixd does not fall back to a shared /tmp; set PREFIXD_CACHE_DIR (or HOME), "
      "or pass --cache-dir DIR (a directory of this user's that others cannot write)");
}

std::string default_cache_dir() {
  Result<std::string> dir = find_cache_dir([](const char* name) { return std::getenv(name); });
  return dir.ok() ? dir.value() : std::string();
}

Result<std::string> resolve_model_path(const std::string& model_arg, const std::string& cache_dir) {
  if (model_arg == kDefaultModel) {
    std::string path = bundled_model_path();
    if (!std::filesystem::exists(path)) {
      return Status::error(std::string("the bundled model ") + kDefaultModel +
                           " (the default --model) is missing: expected '" + path +
                           "' (models/ in the source tree prefixd was built from, or $PREFIXD_MODELS_DIR); restore that "
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
  std::string dir = cache_dir;
  if (dir.empty()) {
    Result<std::string> found = find_cache_dir([](const char* name) { return std::getenv(name); });
    if (!found.ok()) return Status::error("--model " + model_arg + ": " + found.message());
    dir = found.value();
  }
  // Private, so that nobody else can plant the model file we would load.
  for (const std::string& d : {dir, dir + "/models"}) {
    if (Status s = make_private_dir(d); !s.ok())
      return Status::error("cache directory: " + s.message());
  }
  std::string path = dir + "/models/" + preset + "-" + type_name + ".gguf";
  if (!std::filesystem::exists(path)) {
    if (Status s = write_preset_model(preset, type, path); !s.ok()) return s;
  }
  return path;
}

}  // namespace prefixd
