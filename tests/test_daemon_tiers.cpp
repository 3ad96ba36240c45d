// Integration tests of the disk tier through the real daemon: its blocks
// survive a graceful restart and a kill -9 during a burst of writes, answers
// stay identical, and another model on the same directory finds nothing.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/golden.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd::testing;

namespace {

json completion(const std::vector<int32_t>& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

}  // namespace

TEST_CASE("disk blocks survive a graceful restart and give the same answers") {
  TempDir dir;
  const std::string model = stories_model_path();
  const int n_prompts = 3;
  std::vector<json> first;
  {
    auto d = start_or_fail(forced_onboard_args(model, dir.path));
    auto c = d->client();
    for (int i = 0; i < n_prompts; ++i) {
      HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i), 24));
      REQUIRE(a.status == 200);
      CHECK(a.body["prefix_cache"]["cached_tokens"] == 0);
      first.push_back(a.body["choices"][0]["token_ids"]);
    }
    CHECK(wait_disk_blocks(*c, n_prompts * (180 / 16)));
    CHECK(d->stop() == 0);
  }
  auto d = start_or_fail(forced_onboard_args(model, dir.path));
  auto c = d->client();
  // The router's view before any request: the chain is on disk.
  HttpAnswer l = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt_for(0)}});
  REQUIRE(l.status == 200);
  CHECK(l.body["disk_tokens"] == (180 / 16) * 16);
  CHECK(l.body["device_tokens"] == 0);
  for (int i = 0; i < n_prompts; ++i) {
    CAPTURE(i);
    HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i), 24));
    REQUIRE(a.status == 200);
    const json& pc = a.body["prefix_cache"];
    CHECK(pc["disk_tokens"] == (180 / 16) * 16);
    CHECK(pc["device_tokens"] == 0);
    CHECK(pc["prefill_tokens"] == 180 - (180 / 16) * 16);
    CHECK(pc["restore_path"] == "restore");
    CHECK(a.body["usage"]["prompt_tokens_details"]["cached_tokens"] == (180 / 16) * 16);
    CHECK(a.body["choices"][0]["token_ids"] == first[static_cast<size_t>(i)]);
  }
  std::string m = c->Get("/metrics")->body;
  CHECK(metric(m, "prefixd_cached_tokens_total{tier=\"disk\"}") == n_prompts * (180 / 16) * 16);
  CHECK(metric(m, "prefixd_onboard_blocks_total{tier=\"disk\"}") == n_prompts * (180 / 16));
  CHECK(metric(m, "prefixd_corrupt_records_total{tier=\"disk\"}") == 0);
  CHECK(metric(m, "prefixd_unauthenticated_records_total{tier=\"disk\"}") == 0);
  CHECK(d->stop() == 0);
}

TEST_CASE("after kill -9 during a burst of writes the daemon reopens its cache and answers correctly") {
  TempDir dir;
  const std::string model = stories_model_path();
  const int n_prompts = 12;
  // References from a daemon without any tier below the pool.
  std::vector<json> reference;
  {
    auto d = start_or_fail({"--model", model, "--threads", "1", "--kv-dtype", "f32", "--host-cache-gb", "0"});
    auto c = d->client();
    for (int i = 0; i < n_prompts; ++i) {
      HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(100 + i), 8));
      REQUIRE(a.status == 200);
      reference.push_back(a.body["choices"][0]["token_ids"]);
    }
    CHECK(d->stop() == 0);
  }
  {
    auto d = start_or_fail(forced_onboard_args(model, dir.path));
    std::vector<std::thread> clients;
    for (int i = 0; i < n_prompts; ++i) {
      clients.emplace_back([&d, i] {
        auto c = d->client();
        (void)post_json(*c, "/v1/completions", completion(prompt_for(100 + i), 8));
      });
    }
    // Kill it while requests are being computed and their blocks written.
    auto c = d->client();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline &&
           stats(*c)["tiers"]["disk"]["blocks"].get<int64_t>() < 4) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kill(d->pid(), SIGKILL);
    for (auto& t : clients) t.join();
  }
  auto d = start_or_fail(forced_onboard_args(model, dir.path));
  auto c = d->client();
  for (int i = 0; i < n_prompts; ++i) {
    CAPTURE(i);
    HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(100 + i), 8));
    REQUIRE(a.status == 200);
    CHECK(a.body["choices"][0]["token_ids"] == reference[static_cast<size_t>(i)]);
  }
  CHECK(d->stop() == 0);
}

TEST_CASE("another model on the same cache directory gets zero hits") {
  TempDir dir;
  {
    auto d = start_or_fail(forced_onboard_args(stories_model_path(), dir.path));
    auto c = d->client();
    REQUIRE(post_json(*c, "/v1/completions", completion(prompt_for(7), 4)).status == 200);
    CHECK(wait_disk_blocks(*c, 180 / 16));
    CHECK(d->stop() == 0);
  }
  auto d = start_or_fail(forced_onboard_args(shared_path("models/rand-mqa-f16.gguf"), dir.path));
  auto c = d->client();
  HttpAnswer l = post_json(*c, "/v1/cache/lookup", json{{"prompt", prompt_for(7)}});
  REQUIRE(l.status == 200);
  CHECK(l.body["cached_tokens"] == 0);
  HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(7), 4));
  REQUIRE(a.status == 200);
  CHECK(a.body["prefix_cache"]["cached_tokens"] == 0);
  CHECK(a.body["prefix_cache"]["prefill_tokens"] == 180);
  CHECK(d->stop() == 0);
}

TEST_CASE("a second daemon on the same disk cache directory refuses to start and names the first") {
  TempDir dir;
  const std::string model = stories_model_path();
  auto first = start_or_fail(forced_onboard_args(model, dir.path));
  std::vector<std::string> args = forced_onboard_args(model, dir.path);
  args.insert(args.end(), {"--port", "0", "--cache-dir", test_cache_dir()});
  ProcessExit second = run_prefixd(args);
  CAPTURE(second.output);
  CHECK(second.code != 0);
  CHECK(second.output.find("directory '" + dir.path + "' is in use by another process " +
                           std::to_string(first->pid()) + " (prefixd)") != std::string::npos);
  CHECK(second.output.find("two daemons cannot share one disk cache directory") != std::string::npos);
  // The first one is unharmed.
  HttpAnswer a = post_json(*first->client(), "/v1/completions", completion(prompt_for(0), 2));
  CHECK(a.status == 200);
  CHECK(first->stop() == 0);
}
