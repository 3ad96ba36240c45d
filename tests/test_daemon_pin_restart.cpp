// Integration tests of durable TTL pins on the real daemon (demo model, a
// disk tier): a cache breakpoint's pin survives a restart with its remaining
// TTL and the next request reads the prefix from disk and takes the device pin
// again; a pin that expired while the daemon was down is dropped; a damaged
// pin record is skipped with a log line while its prefix stays cached; a pin
// stored for another model is dropped at start.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "storage/disk_tier.h"
#include "storage/pin_record.h"
#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd;
using namespace prefixd::testing;

namespace {

constexpr int kBlock = 16;  // the daemon's default --block-size

// --cache-ttl-scale 0.01: 5m -> 3 s, 1h -> 36 s.
std::vector<std::string> demo_args(const std::string& disk_dir, const char* ttl_scale = "0.01") {
  return {"--model", "demo", "--threads", "1", "--min-cache-tokens", "32", "--cache-ttl-scale", ttl_scale,
          "--disk-cache-dir", disk_dir};
}

const std::string kSystem =
    "You are a patient guide to the sea. You answer questions about tides, waves, currents, "
    "reefs, harbours and the animals of the open ocean in plain words, one short paragraph at "
    "a time, and you never invent facts about ships or storms.";

// A conversation whose system text carries a breakpoint with `ttl`.
json pinned_request(const char* ttl, const std::string& question) {
  json system = json::array({json{{"type", "text"}, {"text", kSystem}, {"cache_control", {{"type", "ephemeral"}, {"ttl", ttl}}}}});
  return json{{"model", "demo"},
              {"max_tokens", 4},
              {"temperature", 0},
              {"system", system},
              {"messages", json::array({json{{"role", "user"}, {"content", question}}})}};
}

json ttl_pins(httplib::Client& c) {
  HttpAnswer a = get(c, "/v1/cache/prefixes");
  REQUIRE(a.status == 200);
  return a.body["ttl_pins"];
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Waits (bounded) until the daemon's log holds `text`.
bool wait_log(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Pins the system prompt for `ttl`, waits until its blocks are on disk and
// stops the daemon; returns the pinned tokens.
int pin_and_stop(const std::string& disk_dir, const char* ttl, const char* ttl_scale = "0.01") {
  auto d = start_or_fail(demo_args(disk_dir, ttl_scale));
  auto c = d->client();
  HttpAnswer a = post_json(*c, "/v1/messages", pinned_request(ttl, "How deep is the ocean?"));
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  const json& bp = a.body["usage"]["cache_breakpoints"][0];
  REQUIRE(bp["status"] == "pinned");
  const int pinned = bp["pinned_tokens"].get<int>();
  REQUIRE(pinned >= 32);
  REQUIRE(wait_disk_blocks(*c, pinned / kBlock));
  REQUIRE(d->stop() == 0);
  return pinned;
}

}  // namespace

TEST_CASE("a TTL pin survives a restart and the next request reads its prefix from disk") {
  TempDir dir;
  const std::string disk = dir.path + "/disk";
  const int pinned = pin_and_stop(disk, "1h");
  auto d = start_or_fail(demo_args(disk));
  auto c = d->client();
  const json pins = ttl_pins(*c);
  REQUIRE(pins.size() == 1);
  CHECK(pins[0]["ttl"] == "1h");
  CHECK(pins[0]["tokens"].get<int>() == pinned);
  const double left = pins[0]["expires_in_s"].get<double>();
  CHECK(left > 0);
  CHECK(left <= 36.5);
  CHECK(stats(*c)["tiers"]["device"]["blocks_pinned"] == 0);  // its blocks are on disk
  HttpAnswer a = post_json(*c, "/v1/messages", pinned_request("1h", "What lives on a reef?"));
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  CHECK(a.body["usage"]["cache_read_input_tokens"].get<int>() >= pinned);
  CHECK(a.body["usage"]["cache_breakpoints"][0]["status"] == "refreshed");
  const json s = stats(*c);
  CHECK(s["cached_tokens"]["disk"].get<int>() >= pinned);
  CHECK(s["tiers"]["device"]["blocks_pinned"].get<int>() == pinned / kBlock);  // the device pin again
}

TEST_CASE("a TTL pin that expired while the daemon was down is dropped at start") {
  TempDir dir;
  const std::string disk = dir.path + "/disk";
  const std::string log = dir.path + "/daemon.log";
  (void)pin_and_stop(disk, "5m", "0.002");  // 0.6 s
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  auto d = start_or_fail(demo_args(disk, "0.002"), log);
  auto c = d->client();
  CHECK(ttl_pins(*c).empty());
  CHECK(wait_log(log, "cache pins restored: 0 (1 expired"));
}

TEST_CASE("a damaged pin record is skipped with a log line and its prefix stays cached") {
  TempDir dir;
  const std::string disk = dir.path + "/disk";
  const std::string log = dir.path + "/daemon.log";
  const int pinned = pin_and_stop(disk, "1h");
  {
    // Damage the stored record in place (the daemon is stopped).
    DiskTierOptions o;
    o.path = disk;
    auto tier = DiskTier::open(o);
    REQUIRE_MESSAGE(tier.ok(), tier.message());
    auto records = tier.value()->pin_records();
    REQUIRE(records.ok());
    REQUIRE(records->size() == 1);
    std::vector<uint8_t> bytes = (*records)[0].record;
    bytes[bytes.size() / 2] ^= 0xff;
    REQUIRE(tier.value()->put_pin((*records)[0].key, bytes).ok());
  }
  auto d = start_or_fail(demo_args(disk), log);
  auto c = d->client();
  CHECK(ttl_pins(*c).empty());
  CHECK(wait_log(log, "damaged cache pin record skipped (its prefix stays cached, unpinned)"));
  HttpAnswer a = post_json(*c, "/v1/messages", pinned_request("1h", "What lives on a reef?"));
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  CHECK(a.body["usage"]["cache_read_input_tokens"].get<int>() >= pinned);
  CHECK(a.body["usage"]["cache_breakpoints"][0]["status"] == "pinned");  // a new pin
}

TEST_CASE("a TTL pin stored for another model is dropped at start") {
  TempDir dir;
  const std::string disk = dir.path + "/disk";
  const std::string log = dir.path + "/daemon.log";
  (void)pin_and_stop(disk, "1h");
  {
    auto d = start_or_fail({"--model", stories_model_path(), "--threads", "1", "--disk-cache-dir", disk}, log);
    CHECK(wait_log(log, "stored for another model"));
    REQUIRE(d->stop() == 0);
  }
  auto d = start_or_fail(demo_args(disk));
  auto c = d->client();
  CHECK(ttl_pins(*c).empty());  // erased by the other model's start
}
