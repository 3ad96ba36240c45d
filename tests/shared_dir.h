// Where tests and benchmarks find ../shared (test models, golden outputs):
// $PREFIXD_SHARED_DIR when set and not empty (a relocated bundle, see
// scripts/bundle.sh), else the path CMake compiled in (<source>/../shared).
#pragma once

#include <cstdlib>
#include <string>

namespace prefixd::testing {

inline std::string shared_dir() {
  const char* env = std::getenv("PREFIXD_SHARED_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return PREFIXD_SHARED_DIR;
}

}  // namespace prefixd::testing
