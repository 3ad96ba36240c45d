// Resolves the --model argument: a GGUF path, or `demo` (a generated model
// kept in the cache directory, written on first use).
#pragma once

#include <string>

#include "common/result.h"

namespace prefixd {

// Directory for prefixd's own caches ($PREFIXD_CACHE_DIR, else
// $XDG_CACHE_HOME/prefixd, else ~/.cache/prefixd, else /tmp/prefixd-cache).
std::string default_cache_dir();

// Returns the path of the model file to open.
Result<std::string> resolve_model_path(const std::string& model_arg, const std::string& cache_dir);

}  // namespace prefixd
