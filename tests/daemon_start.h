// Starting the real daemon from a doctest test: start_or_fail() fails the test
// with the daemon's own message when it does not come up, and stories_args()
// is the usual stories260K command line (1 thread, F32 KV: bit-stable outputs).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "tests/daemon_process.h"

namespace prefixd::testing {

// `stderr_path`: where the daemon's log goes (see DaemonProcess::start).
inline std::unique_ptr<DaemonProcess> start_or_fail(const std::vector<std::string>& args,
                                                    const std::string& stderr_path = "") {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  std::string error;
  auto d = DaemonProcess::start(args, &error, {}, stderr_path);
  REQUIRE_MESSAGE(d != nullptr, error);
  return d;
}

// GET /v1/cache/stats (must answer 200).
inline nlohmann::json stats(httplib::Client& c) {
  HttpAnswer s = get(c, "/v1/cache/stats");
  REQUIRE(s.status == 200);
  return s.body;
}

// Waits (bounded) until the disk tier holds at least `n_blocks` blocks:
// write-through is asynchronous and runs at idle CPU priority.
inline bool wait_disk_blocks(httplib::Client& c, int64_t n_blocks,
                             std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (stats(c)["tiers"]["disk"]["blocks"].get<int64_t>() >= n_blocks) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline std::vector<std::string> stories_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--model", stories_model_path(), "--threads",
                                "1",       "--kv-dtype",         "f32"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace prefixd::testing
