// Resolves the --model argument: a GGUF path, `stories260K` (the bundled
// model, the default), or `demo` / preset:NAME (generated models kept in the
// cache directory, written on first use).
#pragma once

#include <string>

#include "common/result.h"

namespace prefixd {

// The --model value when none is given: the real trained stories260K that
// ships in the source tree's models/ folder (models/README.md), so that a
// first request tells a story. It has no chat template; `demo` has one.
inline constexpr char kDefaultModel[] = "stories260K";

// Where the bundled model is expected: models/stories260K.gguf in the source
// tree this binary was built from (PREFIXD_MODELS_DIR, set by CMake).
std::string bundled_model_path();

// Directory for prefixd's own caches ($PREFIXD_CACHE_DIR, else
// $XDG_CACHE_HOME/prefixd, else ~/.cache/prefixd, else /tmp/prefixd-cache).
std::string default_cache_dir();

// Returns the path of the model file to open. Fails with a message naming the
// file when a path, or the bundled model, does not exist.
Result<std::string> resolve_model_path(const std::string& model_arg, const std::string& cache_dir);

}  // namespace prefixd
