// Tenants, roles and per-tenant limits (--api-keys): the key file's parsing
// and the limit accounting as units, then the real daemon on loopback: file
// refusals, 401/403 by role, cache namespaces (no cross-tenant hit, lookup or
// disk hit; the single key keeps a keyless daemon's hashes), max_concurrent,
// requests_per_minute, max_pinned_blocks, per-tenant metrics and the
// dashboard login.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon/auth/api_keys.h"
#include "daemon/auth/tenant_limits.h"
#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd;
using namespace prefixd::testing;

namespace {

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

// A 0600 key file in `dir` holding `keys`.
std::string key_file(const TempDir& dir, const json& keys, const std::string& name = "keys.json") {
  const std::string path = dir.path + "/" + name;
  write_file(path, json{{"keys", keys}}.dump(), 0600);
  return path;
}

// A client that sends `key` as its bearer token (none when empty).
std::unique_ptr<httplib::Client> client_with(const DaemonProcess& d, const std::string& key) {
  auto c = d.client();
  if (!key.empty()) c->set_bearer_token_auth(key.c_str());
  return c;
}

json completion(const json& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Four blocks of 16 tokens (stories260K's tokenizer) and more.
const char* kLongPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.";

// Token ids < 512 (valid for stories260K), `n` of them.
std::vector<int32_t> id_prompt(int n, int seed) {
  std::vector<int32_t> p = {1};
  for (int t = 1; t < n; ++t) p.push_back(3 + (seed * 131 + t * 17 + (t * t) % 7) % 500);
  return p;
}

int64_t cached_tokens(const HttpAnswer& a) {
  return a.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

void check_error(const HttpAnswer& a, int status, const std::string& code) {
  CHECK(a.status == status);
  REQUIRE(a.body.is_object());
  REQUIRE(a.body.contains("error"));
  CHECK(a.body["error"]["code"] == code);
  CHECK(!a.body["error"]["message"].get<std::string>().empty());
}

// The Retry-After of an answer in whole seconds; -1 when absent or not a number.
int retry_after(const HttpAnswer& a) {
  auto it = a.headers.find("Retry-After");
  if (it == a.headers.end()) return -1;
  try {
    return std::stoi(it->second);
  } catch (...) {
    return -1;
  }
}

}  // namespace

// ---- units ----------------------------------------------------------------

TEST_CASE("ApiKeys::parse accepts a well-formed file and finds tenants by key") {
  Result<ApiKeys> k = ApiKeys::parse(R"({"keys": [
      {"key": "alice-key", "tenant": "alice", "role": "user",
       "limits": {"max_concurrent": 2, "max_pinned_blocks": 8, "requests_per_minute": 60}},
      {"key": "alice-key-2", "tenant": "alice", "role": "user",
       "limits": {"max_concurrent": 2, "max_pinned_blocks": 8, "requests_per_minute": 60}},
      {"key": "ops-key", "tenant": "ops", "role": "admin", "namespace": "shared.ns"}]})");
  REQUIRE_MESSAGE(k.ok(), k.message());
  REQUIRE(k->tenants().size() == 2);
  const Tenant* a = k->find("alice-key");
  REQUIRE(a != nullptr);
  CHECK(a == k->find("alice-key-2"));
  CHECK(a->name == "alice");
  CHECK(a->role == Role::kUser);
  CHECK(a->cache_namespace == "alice");
  CHECK(a->limits.max_concurrent == 2);
  CHECK(a->limits.max_pinned_blocks == 8);
  CHECK(a->limits.requests_per_minute == 60);
  const Tenant* o = k->find_bearer("Bearer ops-key");
  REQUIRE(o != nullptr);
  CHECK(o->role == Role::kAdmin);
  CHECK(o->cache_namespace == "shared.ns");
  CHECK(o->limits == TenantLimitSettings{});
  CHECK(k->find("alice-ke") == nullptr);
  CHECK(k->find("alice-key ") == nullptr);
  CHECK(k->find("") == nullptr);
  CHECK(k->find_bearer("ops-key") == nullptr);
  CHECK(k->find_bearer("Basic ops-key") == nullptr);
  CHECK(k->from_file());
}

TEST_CASE("ApiKeys::parse refuses malformed entries, naming the entry and the field") {
  struct Case {
    const char* text;
    const char* message;  // a part of the refusal
  };
  const Case cases[] = {
      {"[]", "must be a JSON object"},
      {"{", "not valid JSON"},
      {R"({"keys": [], "extra": 1})", "unknown top-level field 'extra'"},
      {R"({"keys": []})", "'keys' is empty"},
      {R"({"keys": {}})", "'keys' must be an array"},
      {R"({"keys": [7]})", "entry 0 (keys[0]): must be an object"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "colour": "red"}]})",
       "entry 0 (keys[0]): field 'colour': unknown field"},
      {R"({"keys": [{"tenant": "t", "role": "user"}]})",
       "entry 0 (keys[0]): field 'key': is required"},
      {R"({"keys": [{"key": "", "tenant": "t", "role": "user"}]})",
       "field 'key': must not be empty"},
      {R"({"keys": [{"key": "a b", "tenant": "t", "role": "user"}]})",
       "field 'key': holds whitespace"},
      {R"({"keys": [{"key": 5, "tenant": "t", "role": "user"}]})",
       "field 'key': must be a string, not number"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "root"}]})",
       "field 'role': 'root' is not one of user, admin"},
      {R"({"keys": [{"key": "k", "tenant": "", "role": "user"}]})",
       "field 'tenant': must not be empty"},
      {R"({"keys": [{"key": "k", "tenant": "a/b", "role": "user"}]})",
       "field 'tenant': 'a/b' holds a character outside [A-Za-z0-9._-]"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "namespace": "x y"}]})",
       "field 'namespace': 'x y' holds a character"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "limits": {"max_concurrent": 0}}]})",
       "field 'limits.max_concurrent': 0 is out of range (1..1000000000)"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "limits": {"requests_per_minute": -3}}]})",
       "field 'limits.requests_per_minute': -3 is out of range"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "limits": {"max_pinned_blocks": 1.5}}]})",
       "field 'limits.max_pinned_blocks': must be an integer, not number"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "limits": {"burst": 1}}]})",
       "field 'limits.burst': unknown field"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user", "limits": []}]})",
       "field 'limits': must be an object"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user"}, {"key": "k", "tenant": "u", "role": "user"}]})",
       "entry 1 (keys[1]): field 'key': is the same key as entry 0"},
      {R"({"keys": [{"key": "k", "tenant": "t", "role": "user"}, {"key": "k2", "tenant": "t", "role": "admin"}]})",
       "entry 1 (keys[1]): field 'role': tenant 't' is also entry 0, which gives it a different "
       "role"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    Result<ApiKeys> k = ApiKeys::parse(c.text);
    REQUIRE_FALSE(k.ok());
    CHECK_MESSAGE(k.message().find(c.message) != std::string::npos, k.message());
    CHECK(k.message().find("\"k\"") == std::string::npos);  // no key in messages
  }
  std::string long_name(65, 'a');
  Result<ApiKeys> k = ApiKeys::parse(
      json{{"keys", {{{"key", "k"}, {"tenant", long_name}, {"role", "user"}}}}}.dump());
  REQUIRE_FALSE(k.ok());
  CHECK(k.message().find("field 'tenant': is 65 bytes, above the limit of 64") !=
        std::string::npos);
}

TEST_CASE("engine_salt keeps cache_salt without a namespace and separates namespaces") {
  Tenant none;  // the single key: no namespace
  Tenant a;
  a.cache_namespace = "a";
  Tenant ab;
  ab.cache_namespace = "ab";
  CHECK(engine_salt(nullptr, "s") == "s");
  CHECK(engine_salt(&none, "") == "");
  CHECK(engine_salt(&none, "s") == "s");
  CHECK(engine_salt(&a, "") != "");
  CHECK(engine_salt(&a, "") != engine_salt(&ab, ""));
  CHECK(engine_salt(&a, "b") != engine_salt(&ab, ""));  // length-prefixed: no run-together
  CHECK(engine_salt(&a, "x") != engine_salt(&a, "y"));
  CHECK(static_cast<unsigned char>(engine_salt(&a, "")[0]) == 0xFF);  // never UTF-8
}

TEST_CASE("TenantLimits: token bucket, in-flight slots and pin accounting") {
  Result<ApiKeys> k = ApiKeys::parse(R"({"keys": [
      {"key": "a", "tenant": "a", "role": "user",
       "limits": {"requests_per_minute": 2, "max_concurrent": 1, "max_pinned_blocks": 4}},
      {"key": "b", "tenant": "b", "role": "user"}]})");
  REQUIRE(k.ok());
  TenantLimits l(k->tenants());
  const int32_t a = k->find("a")->index, b = k->find("b")->index;
  // requests_per_minute 2: two at once, then one every 30 s.
  CHECK_FALSE(l.take_request(a, 100.0).has_value());
  CHECK_FALSE(l.take_request(a, 100.0).has_value());
  std::optional<int32_t> wait = l.take_request(a, 100.0);
  REQUIRE(wait.has_value());
  CHECK(*wait == 30);
  wait = l.take_request(a, 120.0);
  REQUIRE(wait.has_value());
  CHECK(*wait == 10);
  CHECK_FALSE(l.take_request(a, 130.0).has_value());
  CHECK(l.take_request(a, 130.5).has_value());
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(l.take_request(b, 100.0).has_value());  // no limit
  // max_concurrent 1.
  {
    std::optional<TenantTicket> t = l.try_begin(a);
    REQUIRE(t.has_value());
    CHECK(l.in_flight(a) == 1);
    CHECK_FALSE(l.try_begin(a).has_value());
    CHECK(l.try_begin(b).has_value());
  }
  CHECK(l.in_flight(a) == 0);
  CHECK(l.try_begin(a).has_value());
  // max_pinned_blocks 4.
  CHECK(l.reserve_pins(a, 3));
  CHECK_FALSE(l.reserve_pins(a, 2));
  l.settle_pins(a, 3, 2);  // pinned fewer than reserved
  CHECK(l.pinned_blocks(a) == 2);
  CHECK(l.reserve_pins(a, 2));
  l.settle_pins(a, 2, 2);
  CHECK_FALSE(l.reserve_pins(a, 1));
  l.unpinned(a, 3);
  CHECK(l.pinned_blocks(a) == 1);
  l.unpinned(a, 5);  // another key of the namespace unpinned more: stops at zero
  CHECK(l.pinned_blocks(a) == 0);
}

// ---- the daemon -----------------------------------------------------------

TEST_CASE(
    "--api-keys: a file open to others, malformed entries and a second key source are refused") {
  TempDir dir;
  const json good = {{{"key", "alice-key"}, {"tenant", "alice"}, {"role", "user"}}};
  const std::string path = key_file(dir, good);
  REQUIRE(chmod(path.c_str(), 0644) == 0);
  ProcessExit x = run_prefixd(stories_args({"--port", "0", "--api-keys", path}));
  CHECK(x.code == 2);
  CHECK_MESSAGE(x.output.find("--api-keys: the key file " + path +
                              " is open to group or others (mode 0644)") != std::string::npos,
                x.output);

  const std::string bad = key_file(dir,
                                   {{{"key", "k"}, {"tenant", "t"}, {"role", "user"}},
                                    {{"key", "k2"}, {"tenant", "u"}, {"role", "superuser"}}},
                                   "bad.json");
  x = run_prefixd(stories_args({"--port", "0", "--api-keys", bad}));
  CHECK(x.code == 2);
  CHECK_MESSAGE(
      x.output.find("--api-keys: " + bad +
                    ": entry 1 (keys[1]): field 'role': 'superuser' is not one of user, admin") !=
          std::string::npos,
      x.output);

  const std::string limits = key_file(
      dir,
      {{{"key", "k"}, {"tenant", "t"}, {"role", "user"}, {"limits", {{"max_concurrent", -1}}}}},
      "limits.json");
  x = run_prefixd(stories_args({"--port", "0", "--api-keys", limits}));
  CHECK(x.code == 2);
  CHECK(x.output.find("entry 0 (keys[0]): field 'limits.max_concurrent': -1 is out of range") !=
        std::string::npos);

  REQUIRE(chmod(path.c_str(), 0600) == 0);
  x = run_prefixd(stories_args({"--port", "0", "--api-keys", path, "--api-key", "x"}));
  CHECK(x.code == 2);
  CHECK(x.output.find("--api-key and --api-keys are both given") != std::string::npos);
  x = run_prefixd(stories_args({"--port", "0", "--api-keys", path}), {"PREFIXD_API_KEY=x"});
  CHECK(x.code == 2);
  CHECK(x.output.find("PREFIXD_API_KEY is set and --api-keys is given") != std::string::npos);
}

TEST_CASE("roles: a user key generates but gets 403 on admin routes; an admin key may call all") {
  TempDir dir;
  const std::string path =
      key_file(dir, {{{"key", "user-key"}, {"tenant", "alice"}, {"role", "user"}},
                     {{"key", "admin-key"}, {"tenant", "ops"}, {"role", "admin"}}});
  auto d = start_or_fail(stories_args({"--api-keys", path}));
  auto anon = d->client();
  auto user = client_with(*d, "user-key");
  auto admin = client_with(*d, "admin-key");
  auto wrong = client_with(*d, "user-key2");

  CHECK(get(*anon, "/health").status == 200);
  HttpAnswer a = post_json(*anon, "/v1/completions", completion("Once upon a time", 2));
  check_error(a, 401, "invalid_api_key");
  CHECK(a.headers.find("WWW-Authenticate") != a.headers.end());
  check_error(post_json(*wrong, "/v1/completions", completion("Once upon a time", 2)), 401,
              "invalid_api_key");
  check_error(get(*wrong, "/v1/models"), 401, "invalid_api_key");

  // User routes.
  CHECK(post_json(*user, "/v1/completions", completion("Once upon a time", 2)).status == 200);
  CHECK(get(*user, "/v1/models").status == 200);
  CHECK(post_json(*user, "/tokenize", json{{"content", "Once"}}).status == 200);
  CHECK(post_json(*user, "/detokenize", json{{"tokens", {1, 400}}}).status == 200);
  CHECK(post_json(*user, "/v1/cache/lookup", json{{"prompt", "Once upon a time"}}).status == 200);
  CHECK(post_json(*user, "/v1/cache/prefetch", json{{"prompt", "Once upon a time"}}).status == 200);
  // Admin routes: 403 for the user, allowed for the admin.
  const std::vector<std::pair<std::string, std::string>> admin_routes = {
      {"GET", "/metrics"},          {"GET", "/v1/cache/stats"}, {"GET", "/v1/cache/prefixes"},
      {"GET", "/v1/cache/history"}, {"GET", "/dashboard"},      {"POST", "/v1/cache/pin"},
      {"POST", "/v1/cache/unpin"},  {"DELETE", "/v1/cache"}};
  for (const auto& [method, route] : admin_routes) {
    CAPTURE(route);
    HttpAnswer u, ad;
    if (method == "GET") {
      u = get(*user, route);
      ad = get(*admin, route);
    } else if (method == "POST") {
      u = post_json(*user, route, json{{"prompt", "Once upon a time"}});
      ad = post_json(*admin, route, json{{"prompt", "Once upon a time"}});
    } else {
      u = to_answer(user->Delete(route.c_str()));
      ad = to_answer(admin->Delete(route.c_str()));
    }
    check_error(u, 403, "insufficient_role");
    CHECK(u.body["error"]["type"] == "permission_error");
    CHECK(u.body["error"]["message"].get<std::string>().find("needs role admin") !=
          std::string::npos);
    // unpin of a prompt nothing pinned answers 409; every other admin call succeeds.
    CHECK((ad.status == 200 || (route == "/v1/cache/unpin" && ad.status == 409)));
  }
  // Both pin-by-id routes of the dashboard are admin routes too (403 before the body is looked at).
  check_error(post_json(*user, "/v1/cache/prefixes/pin", json{{"id", "1"}}), 403,
              "insufficient_role");
  CHECK(post_json(*admin, "/v1/completions", completion("Once upon a time", 2)).status == 200);
  CHECK(d->stop() == 0);
}

TEST_CASE("the dashboard login works with an admin key from the file and refuses a user key") {
  TempDir dir;
  const std::string path =
      key_file(dir, {{{"key", "user-key"}, {"tenant", "alice"}, {"role", "user"}},
                     {{"key", "admin-key"}, {"tenant", "ops"}, {"role", "admin"}}});
  auto d = start_or_fail(stories_args({"--api-keys", path}));
  auto anon = d->client();
  auto r = anon->Get("/dashboard");
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK(r->get_header_value("Content-Type").rfind("text/html", 0) == 0);  // the login page
  CHECK(r->body.find("<form id=\"login\">") != std::string::npos);
  r = client_with(*d, "admin-key")->Get("/dashboard");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("Content-Type").rfind("text/html", 0) == 0);
  CHECK(r->body.find("<form id=\"login\">") == std::string::npos);
  HttpAnswer u = get(*client_with(*d, "user-key"), "/dashboard");
  check_error(u, 403, "insufficient_role");
  CHECK(get(*client_with(*d, "admin-key"), "/v1/cache/history").status == 200);
  CHECK(d->stop() == 0);
}

TEST_CASE("namespaces: no cache hit or lookup across tenants; keys naming one namespace share") {
  TempDir dir;
  const std::string path = key_file(
      dir, {{{"key", "a-key"}, {"tenant", "alice"}, {"role", "user"}},
            {{"key", "b-key"}, {"tenant", "bob"}, {"role", "user"}},
            {{"key", "c-key"}, {"tenant", "carol"}, {"role", "user"}, {"namespace", "team"}},
            {{"key", "d-key"}, {"tenant", "dave"}, {"role", "admin"}, {"namespace", "team"}}});
  auto d = start_or_fail(stories_args({"--api-keys", path}));
  auto a = client_with(*d, "a-key");
  auto b = client_with(*d, "b-key");

  HttpAnswer a1 = post_json(*a, "/v1/completions", completion(kLongPrompt, 8));
  REQUIRE(a1.status == 200);
  REQUIRE(a1.body["usage"]["prompt_tokens"].get<int>() >= 32);
  CHECK(cached_tokens(a1) == 0);
  HttpAnswer a2 = post_json(*a, "/v1/completions", completion(kLongPrompt, 8));
  REQUIRE(a2.status == 200);
  CHECK(cached_tokens(a2) > 0);

  // Bob: the same prompt finds nothing of Alice's, and gives the same text.
  HttpAnswer look = post_json(*b, "/v1/cache/lookup", json{{"prompt", kLongPrompt}});
  REQUIRE(look.status == 200);
  CHECK(look.body["cached_tokens"] == 0);
  CHECK(look.body["device_tokens"] == 0);
  HttpAnswer look_a = post_json(*a, "/v1/cache/lookup", json{{"prompt", kLongPrompt}});
  REQUIRE(look_a.status == 200);
  CHECK(look_a.body["cached_tokens"].get<int>() > 0);
  HttpAnswer b1 = post_json(*b, "/v1/completions", completion(kLongPrompt, 8));
  REQUIRE(b1.status == 200);
  CHECK(cached_tokens(b1) == 0);
  CHECK(b1.body["choices"][0]["text"] == a1.body["choices"][0]["text"]);
  // cache_salt subdivides within a tenant.
  json salted = completion(kLongPrompt, 8);
  salted["cache_salt"] = "s1";
  HttpAnswer a3 = post_json(*a, "/v1/completions", salted);
  REQUIRE(a3.status == 200);
  CHECK(cached_tokens(a3) == 0);

  // Carol and Dave share the namespace "team".
  HttpAnswer c1 =
      post_json(*client_with(*d, "c-key"), "/v1/completions", completion(kLongPrompt, 8));
  REQUIRE(c1.status == 200);
  CHECK(cached_tokens(c1) == 0);
  HttpAnswer d1 =
      post_json(*client_with(*d, "d-key"), "/v1/completions", completion(kLongPrompt, 8));
  REQUIRE(d1.status == 200);
  CHECK(cached_tokens(d1) > 0);
  CHECK(d1.body["choices"][0]["text"] == a1.body["choices"][0]["text"]);

  // The dashboard (admin) lists every namespace's prefixes, and its pin by id
  // pins in the namespace the prefix was seen in.
  auto admin = client_with(*d, "d-key");
  HttpAnswer list = get(*admin, "/v1/cache/prefixes?limit=50");
  REQUIRE(list.status == 200);
  std::string alice_id;
  for (const json& row : list.body["prefixes"]) {
    const std::string salt = row["cache_salt"];
    if (salt.size() >= 9 && salt.compare(salt.size() - 9, 9, "ns5:alice") == 0)
      alice_id = row["id"];
  }
  REQUIRE(!alice_id.empty());
  HttpAnswer pinned = post_json(*admin, "/v1/cache/prefixes/pin", json{{"id", alice_id}});
  REQUIRE(pinned.status == 200);
  CHECK(pinned.body["pinned_blocks"].get<int>() > 0);
  CHECK(d->stop() == 0);
}

TEST_CASE(
    "namespaces on disk: the single key keeps a keyless daemon's blocks; a tenant does not hit "
    "them") {
  TempDir dir;
  const std::string cache = dir.path + "/disk";
  auto disk_args = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--disk-cache-dir", cache, "--restore-policy", "always"});
    return stories_args(extra);
  };
  const std::vector<int32_t> prompt = id_prompt(96, 1);
  std::string text;
  {
    auto d = start_or_fail(disk_args({}));
    auto c = d->client();
    HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt, 4));
    REQUIRE(a.status == 200);
    text = a.body["choices"][0]["text"];
    // Write-through is asynchronous: wait until the disk tier holds the blocks.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline &&
           get(*c, "/v1/cache/stats").body["tiers"]["disk"]["blocks"].get<int64_t>() < 6)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(get(*c, "/v1/cache/stats").body["tiers"]["disk"]["blocks"].get<int64_t>() >= 6);
    CHECK(d->stop() == 0);
  }
  {
    auto d = start_or_fail(disk_args({"--api-key", "one-key"}));
    HttpAnswer a = post_json(*client_with(*d, "one-key"), "/v1/completions", completion(prompt, 4));
    REQUIRE(a.status == 200);
    CHECK(a.body["prefix_cache"]["disk_tokens"].get<int>() > 0);  // the same hashes as without keys
    CHECK(a.body["choices"][0]["text"] == text);
    CHECK(d->stop() == 0);
  }
  {
    const std::string path =
        key_file(dir, {{{"key", "a-key"}, {"tenant", "alice"}, {"role", "admin"}}});
    auto d = start_or_fail(disk_args({"--api-keys", path}));
    auto a = client_with(*d, "a-key");
    HttpAnswer look = post_json(*a, "/v1/cache/lookup", json{{"prompt", prompt}});
    REQUIRE(look.status == 200);
    CHECK(look.body["cached_tokens"] == 0);
    HttpAnswer r = post_json(*a, "/v1/completions", completion(prompt, 4));
    REQUIRE(r.status == 200);
    CHECK(cached_tokens(r) == 0);
    CHECK(r.body["choices"][0]["text"] == text);
    CHECK(d->stop() == 0);
  }
}

TEST_CASE(
    "max_concurrent: a second concurrent request of the tenant gets 429 until the first ends") {
  TempDir dir;
  const std::string path = key_file(dir, {{{"key", "a-key"},
                                           {"tenant", "alice"},
                                           {"role", "user"},
                                           {"limits", {{"max_concurrent", 1}}}},
                                          {{"key", "b-key"}, {"tenant", "bob"}, {"role", "user"}}});
  auto d = start_or_fail({"--model", "demo", "--threads", "1", "--api-keys", path});
  std::atomic<bool> first_token{false};
  std::atomic<bool> release{false};
  SseAnswer held;
  std::thread holder([&] {
    auto hc = client_with(*d, "a-key");
    json body{{"prompt", "The sea is"},
              {"max_tokens", 3000},
              {"temperature", 0},
              {"stream", true},
              {"ignore_eos", true}};
    held = post_sse(*hc, "/v1/completions", body, [&](size_t) {
      first_token = true;
      return !release.load();
    });
  });
  const auto wait_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!first_token.load() && std::chrono::steady_clock::now() < wait_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(first_token.load());
  auto a = client_with(*d, "a-key");
  HttpAnswer second = post_json(*a, "/v1/completions", completion("The sea is", 2));
  check_error(second, 429, "tenant_concurrency_limit");
  CHECK(retry_after(second) >= 1);
  json stream_body = completion("The sea is", 2);
  stream_body["stream"] = true;
  check_error(post_json(*a, "/v1/completions", stream_body), 429, "tenant_concurrency_limit");
  check_error(post_json(*a, "/v1/cache/prefetch", json{{"prompt", "The sea is"}}), 429,
              "tenant_concurrency_limit");
  // Another tenant is not held back.
  CHECK(
      post_json(*client_with(*d, "b-key"), "/v1/completions", completion("The sea is", 2)).status ==
      200);
  release = true;
  holder.join();
  CHECK(held.aborted);
  // The client went away: its slot is released; a new request succeeds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  HttpAnswer after;
  do {
    after = post_json(*a, "/v1/completions", completion("The sea is", 2));
    if (after.status == 429) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (after.status == 429 && std::chrono::steady_clock::now() < deadline);
  CHECK(after.status == 200);
  // And after a whole (non-stream) request the slot is free at once.
  CHECK(post_json(*a, "/v1/completions", completion("The sea is", 2)).status == 200);
  CHECK(d->stop() == 0);
}

TEST_CASE(
    "requests_per_minute: the third request of a limit of 2 gets 429 with Retry-After 1..60") {
  TempDir dir;
  const std::string path = key_file(dir, {{{"key", "a-key"},
                                           {"tenant", "alice"},
                                           {"role", "user"},
                                           {"limits", {{"requests_per_minute", 2}}}},
                                          {{"key", "b-key"}, {"tenant", "bob"}, {"role", "user"}}});
  auto d = start_or_fail(stories_args({"--api-keys", path}));
  auto a = client_with(*d, "a-key");
  CHECK(post_json(*a, "/v1/completions", completion("Once upon a time", 2)).status == 200);
  CHECK(get(*a, "/v1/models").status == 200);
  HttpAnswer third = post_json(*a, "/v1/completions", completion("Once upon a time", 2));
  check_error(third, 429, "tenant_rate_limit");
  const int wait_s = retry_after(third);
  CHECK(wait_s >= 1);
  CHECK(wait_s <= 60);
  check_error(get(*a, "/v1/models"), 429, "tenant_rate_limit");
  // Bob has no limit; a bad key is still 401, not 429.
  for (int i = 0; i < 5; ++i) CHECK(get(*client_with(*d, "b-key"), "/v1/models").status == 200);
  check_error(get(*client_with(*d, "a-key-wrong"), "/v1/models"), 401, "invalid_api_key");
  CHECK(d->stop() == 0);
}

TEST_CASE("max_pinned_blocks: a pin beyond the tenant's limit gets 429; unpinning makes room") {
  TempDir dir;
  const std::string path = key_file(dir, {{{"key", "ops-key"},
                                           {"tenant", "ops"},
                                           {"role", "admin"},
                                           {"limits", {{"max_pinned_blocks", 2}}}}});
  auto d = start_or_fail(stories_args({"--api-keys", path}));
  auto c = client_with(*d, "ops-key");
  const std::vector<int32_t> prompt = id_prompt(64, 2);  // four blocks of 16
  REQUIRE(post_json(*c, "/v1/completions", completion(prompt, 1)).status == 200);
  const std::vector<int32_t> two_blocks(prompt.begin(), prompt.begin() + 32);

  HttpAnswer too_many = post_json(*c, "/v1/cache/pin", json{{"prompt", prompt}});
  check_error(too_many, 429, "tenant_pin_limit");
  CHECK(too_many.body["error"]["message"].get<std::string>().find("max_pinned_blocks of 2") !=
        std::string::npos);
  HttpAnswer pinned = post_json(*c, "/v1/cache/pin", json{{"prompt", two_blocks}});
  REQUIRE(pinned.status == 200);
  CHECK(pinned.body["pinned_blocks"] == 2);
  check_error(post_json(*c, "/v1/cache/pin", json{{"prompt", two_blocks}}), 429,
              "tenant_pin_limit");
  HttpAnswer unpinned = post_json(*c, "/v1/cache/unpin", json{{"prompt", two_blocks}});
  REQUIRE(unpinned.status == 200);
  CHECK(unpinned.body["pinned_blocks"] == 2);
  CHECK(post_json(*c, "/v1/cache/pin", json{{"prompt", two_blocks}}).status == 200);
  std::string m = get(*c, "/metrics").raw;
  CHECK(metric(m, "prefixd_tenant_limited_total{tenant=\"ops\",limit=\"max_pinned_blocks\"}") == 2);
  CHECK(d->stop() == 0);
}

TEST_CASE("/metrics has tenant series for the configured tenants only") {
  TempDir dir;
  const std::string path =
      key_file(dir, {{{"key", "a-key"}, {"tenant", "alice"}, {"role", "user"}},
                     {{"key", "a-key-2"}, {"tenant", "alice"}, {"role", "user"}},
                     {{"key", "ops-key"}, {"tenant", "ops"}, {"role", "admin"}}});
  auto d = start_or_fail(stories_args({"--api-keys", path}));
  auto a = client_with(*d, "a-key");
  HttpAnswer r = post_json(*a, "/v1/completions", completion("Once upon a time", 3));
  REQUIRE(r.status == 200);
  REQUIRE(
      post_json(*client_with(*d, "a-key-2"), "/v1/completions", completion("Once upon a time", 3))
          .status == 200);
  CHECK(post_json(*a, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", -1}}).status == 400);
  check_error(post_json(*client_with(*d, "nobody"), "/v1/completions", completion("Once", 2)), 401,
              "invalid_api_key");
  const std::string m = get(*client_with(*d, "ops-key"), "/metrics").raw;
  CHECK(metric(m, "prefixd_tenant_requests_total{tenant=\"alice\",status=\"completed\"}") == 2);
  CHECK(metric(m, "prefixd_tenant_requests_total{tenant=\"alice\",status=\"invalid\"}") == 1);
  CHECK(metric(m, "prefixd_tenant_requests_total{tenant=\"ops\",status=\"completed\"}") == 0);
  CHECK(metric(m, "prefixd_tenant_generated_tokens_total{tenant=\"alice\"}") == 6);
  CHECK(metric(m, "prefixd_tenant_prompt_tokens_total{tenant=\"alice\"}") ==
        2 * r.body["usage"]["prompt_tokens"].get<int>());
  CHECK(metric(m, "prefixd_tenant_cached_tokens_total{tenant=\"alice\"}") == 0);  // under one block
  CHECK(metric(m, "prefixd_requests_total{status=\"completed\"}") == 2);
  // Only configured tenants appear as label values.
  std::istringstream in(m);
  std::string line;
  int tenant_lines = 0;
  while (std::getline(in, line)) {
    const size_t at = line.find("tenant=\"");
    if (at == std::string::npos || line[0] == '#') continue;
    ++tenant_lines;
    const std::string name = line.substr(at + 8, line.find('"', at + 8) - at - 8);
    CHECK_MESSAGE((name == "alice" || name == "ops"), line);
  }
  CHECK(tenant_lines == 2 * (5 + 3 + 3));
  // Without a key file there is no tenant series.
  auto plain = start_or_fail(stories_args({"--api-key", "one-key"}));
  const std::string pm = get(*client_with(*plain, "one-key"), "/metrics").raw;
  CHECK(pm.find("tenant=") == std::string::npos);
  CHECK(plain->stop() == 0);
  CHECK(d->stop() == 0);
}
