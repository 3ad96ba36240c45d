// Resolves the --model argument: a GGUF path, `stories260K` (the bundled
// model, the default), or `demo` / preset:NAME (generated models kept in the
// cache directory, written on first use).
#pragma once

#include <functional>
#include <string>

#include "common/result.h"

namespace prefixd {

// The --model value when none is given: the real trained stories260K that
// ships in the source tree's models/ folder (models/README.md), so that a
// first request tells a story. It has no chat template; `demo` has one.
inline constexpr char kDefaultModel[] = "stories260K";

// Where the bundled model is expected: $PREFIXD_MODELS_DIR/stories260K.gguf
// when that variable is set and not empty (a relocated bundle,
// scripts/bundle.sh), else models/stories260K.gguf in the source tree this
// binary was built from (PREFIXD_MODELS_DIR, set by CMake).
std::string bundled_model_path();

// Reads one environment variable: null when it is unset.
using EnvLookup = std::function<const char*(const char*)>;

// Directory for prefixd's own caches: $PREFIXD_CACHE_DIR, else
// $XDG_CACHE_HOME/prefixd, else $HOME/.cache/prefixd, else
// $XDG_RUNTIME_DIR/prefixd (empty values count as unset). Never a shared
// directory such as /tmp, where another user could plant models: with none of
// the four set it fails, naming the variables to set.
Result<std::string> find_cache_dir(const EnvLookup& lookup);

// find_cache_dir() on this process's environment; empty when it fails (the
// daemon then caches no fingerprints, and refuses `demo` with that message).
std::string default_cache_dir();

// Returns the path of the model file to open. Fails with a message naming the
// file when a path, or the bundled model, does not exist. Generated models
// (`demo`, preset:) live in `cache_dir`/models (default_cache_dir() when
// `cache_dir` is empty), both made private (0700; one another user owns or
// may write is refused, see common/private_files.h).
Result<std::string> resolve_model_path(const std::string& model_arg, const std::string& cache_dir);

}  // namespace prefixd
