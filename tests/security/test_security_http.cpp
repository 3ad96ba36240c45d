// Security suite, HTTP edge: what a web page in the operator's browser (DNS
// rebinding, cross-site requests) and a local user (the key on the command
// line) can do. Starts the real daemon on a free loopback port.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/daemon_process.h"
#include "tests/temp_dir.h"

using namespace prefixd::testing;
using json = nlohmann::json;

namespace {

std::unique_ptr<DaemonProcess> start_or_fail(const std::vector<std::string>& args,
                                             const std::vector<std::string>& env = {}) {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixd_binary()), "build the prefixd target first: " << prefixd_binary());
  std::string error;
  auto d = DaemonProcess::start(args, &error, env);
  REQUIRE_MESSAGE(d != nullptr, error);
  return d;
}

std::vector<std::string> stories_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--model", stories_model_path(), "--threads", "1", "--kv-dtype", "f32"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

const std::string kCompletion = R"({"prompt": [1, 403, 407], "max_tokens": 2})";

// A normal completion still works (the daemon kept serving after a refusal).
void check_serves(DaemonProcess& d, const httplib::Headers& headers = {}) {
  auto r = d.client()->Post("/v1/completions", headers, kCompletion, "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(json::parse(r->body, nullptr, false)["usage"]["completion_tokens"] == 2);
}

std::string error_code(const httplib::Result& r) {
  json j = json::parse(r->body, nullptr, false);
  return j.is_object() ? j["error"].value("code", "") : "";
}

std::string error_message(const httplib::Result& r) {
  json j = json::parse(r->body, nullptr, false);
  return j.is_object() ? j["error"].value("message", "") : "";
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

}  // namespace

TEST_CASE("DNS rebinding: a Host that is not served is refused with 421, on every route") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  const httplib::Headers evil = {{"Host", "evil.example"}};
  auto r = c->Get("/v1/cache/prefixes", evil);
  REQUIRE(r);
  CHECK(r->status == 421);
  CHECK(error_code(r) == "host_not_allowed");
  CHECK(error_message(r).find("--allowed-hosts evil.example") != std::string::npos);
  r = c->Post("/v1/completions", evil, kCompletion, "application/json");
  REQUIRE(r);
  CHECK(r->status == 421);
  r = c->Get("/health", {{"Host", "evil.example:8080"}});
  REQUIRE(r);
  CHECK(r->status == 421);
  // The defaults: the loopback names, with or without a port.
  for (const char* host : {"localhost", "127.0.0.1:9", "[::1]:80", "LOCALHOST"}) {
    CAPTURE(host);
    r = c->Get("/health", {{"Host", host}});
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  check_serves(*d);
  CHECK(d->stop() == 0);
}

TEST_CASE("--allowed-hosts extends the list, and '*' turns the check off") {
  auto d = start_or_fail(stories_args({"--allowed-hosts", "prefixd.internal,gpu-3"}));
  auto c = d->client();
  auto r = c->Get("/health", {{"Host", "prefixd.internal:8080"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  r = c->Get("/health", {{"Host", "gpu-3"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  r = c->Get("/health", {{"Host", "gpu-4"}});
  REQUIRE(r);
  CHECK(r->status == 421);
  CHECK(d->stop() == 0);

  auto any = start_or_fail(stories_args({"--allowed-hosts", "*"}));
  r = any->client()->Get("/health", {{"Host", "evil.example"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(any->stop() == 0);
}

TEST_CASE("cross-site: a foreign Origin is refused with 403; the daemon's own origin and --allowed-origins pass") {
  auto d = start_or_fail(stories_args({"--allowed-origins", "https://app.example"}));
  auto c = d->client();
  auto r = c->Post("/v1/completions", {{"Origin", "https://evil.example"}}, kCompletion, "application/json");
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(error_code(r) == "origin_not_allowed");
  r = c->Delete("/v1/cache", {{"Origin", "null"}});
  REQUIRE(r);
  CHECK(r->status == 403);
  // The dashboard's own requests: Origin is the daemon's scheme://host:port.
  const std::string own = "http://127.0.0.1:" + std::to_string(d->port());
  check_serves(*d, {{"Origin", own}});
  // Another port of the same host is another origin.
  r = c->Post("/v1/completions", {{"Origin", "http://127.0.0.1:1"}}, kCompletion, "application/json");
  REQUIRE(r);
  CHECK(r->status == 403);
  check_serves(*d, {{"Origin", "https://app.example"}});
  CHECK(d->stop() == 0);
}

TEST_CASE("cross-site: POST bodies that are not application/json get 415 (no simple cross-site POST)") {
  auto d = start_or_fail(stories_args());
  auto c = d->client();
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    CAPTURE(type);
    auto r = c->Post("/v1/completions", kCompletion, type);
    REQUIRE(r);
    CHECK(r->status == 415);
    CHECK(error_message(r).find("application/json") != std::string::npos);
  }
  for (const char* path : {"/v1/cache/pin", "/v1/cache/prefetch", "/tokenize", "/v1/cache/prefixes/pin"}) {
    CAPTURE(path);
    auto r = c->Post(path, R"({"prompt": [1, 2]})", "text/plain");
    REQUIRE(r);
    CHECK(r->status == 415);
  }
  // Parameters and case do not matter.
  auto r = c->Post("/v1/completions", kCompletion, "Application/JSON; charset=utf-8");
  REQUIRE(r);
  CHECK(r->status == 200);
  check_serves(*d);
  CHECK(d->stop() == 0);
}

TEST_CASE("the API key from a 0600 file or PREFIXD_API_KEY; a file open to others is refused") {
  TempDir dir;
  const std::string key_file = dir.path + "/key";
  write_file(key_file, "s3cret-key\n", 0600);
  auto d = start_or_fail(stories_args({"--api-key-file", key_file}));
  auto c = d->client();
  auto r = c->Post("/v1/completions", kCompletion, "application/json");
  REQUIRE(r);
  CHECK(r->status == 401);
  check_serves(*d, {{"Authorization", "Bearer s3cret-key"}});
  CHECK(d->stop() == 0);

  auto e = start_or_fail(stories_args(), {"PREFIXD_API_KEY=env-key"});
  r = e->client()->Get("/v1/models");
  REQUIRE(r);
  CHECK(r->status == 401);
  r = e->client()->Get("/v1/models", {{"Authorization", "Bearer env-key"}});
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(e->stop() == 0);

  write_file(key_file, "s3cret-key\n", 0644);
  ProcessExit x = run_prefixd(stories_args({"--port", "0", "--api-key-file", key_file}));
  CHECK(x.code == 2);
  CHECK(x.output.find("--api-key-file: the key file " + key_file + " is open to group or others (mode 0644)") !=
        std::string::npos);

  write_file(key_file, "\n", 0600);
  x = run_prefixd(stories_args({"--port", "0", "--api-key-file", key_file}));
  CHECK(x.code == 2);
  CHECK(x.output.find("is empty") != std::string::npos);

  x = run_prefixd(stories_args({"--port", "0", "--api-key", "a", "--api-key-file", key_file}));
  CHECK(x.code == 2);
  CHECK(x.output.find("--api-key and --api-key-file are both given") != std::string::npos);
}

TEST_CASE("--api-key on the command line works and warns that the process list shows it") {
  auto d = start_or_fail(stories_args({"--api-key", "visible-key"}));
  check_serves(*d, {{"Authorization", "Bearer visible-key"}});
  // A second daemon on the same port starts up to the bind, which fails:
  // its whole log, start-up warnings included, is in the output.
  ProcessExit x = run_prefixd(stories_args({"--port", std::to_string(d->port()), "--api-key", "visible-key"}));
  CHECK(x.code == 1);
  CHECK(x.output.find("--api-key is visible to every local user in the process list") != std::string::npos);
  x = run_prefixd(stories_args({"--port", std::to_string(d->port())}), {"PREFIXD_API_KEY=k"});
  CHECK(x.code == 1);
  CHECK(x.output.find("process list") == std::string::npos);
  CHECK(d->stop() == 0);
}

TEST_CASE("clickjacking: the dashboard may not be framed") {
  auto d = start_or_fail(stories_args());
  auto r = d->client()->Get("/dashboard");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("Content-Security-Policy").find("frame-ancestors 'none'") != std::string::npos);
  CHECK(r->get_header_value("X-Frame-Options") == "DENY");
  CHECK(d->stop() == 0);
}
