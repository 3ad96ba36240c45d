// A short soak of write-through on the real daemon: clients keep both compute
// threads busy with prompts that share some prefixes and bring new ones, and
// when the load stops the disk tier holds every full block of every finished
// prompt (a bounded wait), nothing was dropped, and every write was timed
// (the lag figures of /v1/cache/stats cover them all).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd::testing;

namespace {

constexpr int kBlock = 16;  // the daemon's default --block-size

// Prompt `i` of client `c`: one of 3 shared 64-token prefixes, then 100 tokens of its own.
std::vector<int> prompt_of(int c, int i) {
  std::mt19937 shared_rng(static_cast<unsigned>(1000 + (c * 7 + i) % 3));
  std::mt19937 own_rng(static_cast<unsigned>(c * 100000 + i));
  std::vector<int> p;
  for (int k = 0; k < 64; ++k) p.push_back(3 + static_cast<int>(shared_rng() % 250));
  for (int k = 0; k < 100; ++k) p.push_back(3 + static_cast<int>(own_rng() % 250));
  return p;
}

}  // namespace

TEST_CASE("under sustained load write-through stores every full block of every finished prompt") {
  TempDir dir;
  auto d = start_or_fail({"--model", "demo", "--threads", "2", "--disk-cache-dir", dir.path + "/disk"});
  constexpr int kClients = 3;
  constexpr int kPerClient = 24;
  std::atomic<int> failures{0};
  std::vector<std::set<std::vector<int>>> blocks(kClients);  // distinct full blocks by content prefix
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = d->client();
      for (int i = 0; i < kPerClient; ++i) {
        const std::vector<int> p = prompt_of(c, i);
        HttpAnswer a = post_json(*client, "/v1/completions",
                                 json{{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}});
        if (a.status != 200) {
          ++failures;
          continue;
        }
        // A full block is identified by the whole prefix up to its end.
        for (size_t end = kBlock; end <= p.size(); end += kBlock)
          blocks[static_cast<size_t>(c)].insert(std::vector<int>(p.begin(), p.begin() + static_cast<ptrdiff_t>(end)));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  REQUIRE(failures == 0);
  std::set<std::vector<int>> all;
  for (const auto& b : blocks) all.insert(b.begin(), b.end());
  const int64_t expected = static_cast<int64_t>(all.size());
  auto c = d->client();
  REQUIRE_MESSAGE(wait_disk_blocks(*c, expected, std::chrono::seconds(60)),
                  "disk blocks " << stats(*c)["tiers"]["disk"]["blocks"] << " of " << expected);
  const json disk = stats(*c)["tiers"]["disk"];
  CHECK(disk["blocks"].get<int64_t>() == expected);
  CHECK(disk["writes_dropped"] == 0);
  CHECK(disk["write_errors"] == 0);
  const json& lag = disk["write_lag_ms"];
  CHECK(lag["count"].get<int64_t>() == expected);
  CHECK(lag["p50"].get<double>() <= lag["p99"].get<double>());
  CHECK(lag["p99"].get<double>() <= lag["max"].get<double>());
  MESSAGE("disk write lag (ms): p50 " << lag["p50"] << ", p99 " << lag["p99"] << ", max " << lag["max"]);
}
