// Test support: a temporary directory under /tmp, removed with its contents.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace prefixd::testing {

// A temporary directory, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/prefixd_test_XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (p == nullptr) std::abort();
    path = p;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace prefixd::testing
