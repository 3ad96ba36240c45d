// Security suite, TLS: the real daemon serving HTTPS (--tls-cert/--tls-key)
// with a self-signed certificate this test makes with `openssl req`; the
// client library and prefixctl over https; the refusals of bad certificate
// and key files. Skips (exit 77) when the openssl command is missing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/temp_dir.h"

using namespace prefixd::testing;
namespace client = prefixd::client;

namespace {

// A shell command's exit code and its stdout and stderr together.
struct ShellRun {
  int code = -1;
  std::string output;
};

ShellRun shell(const std::string& command) {
  ShellRun r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool have_openssl() { return shell("command -v openssl").code == 0; }

struct CertPair {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key, mode 0600
};

// A self-signed P-256 certificate for CN=localhost, valid for a day, naming
// localhost and 127.0.0.1.
CertPair make_cert(const std::string& dir, const std::string& name) {
  CertPair p{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  ShellRun r = shell(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
      " -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
      p.key + " -out " + p.cert);
  REQUIRE_MESSAGE(r.code == 0, r.output);
  REQUIRE(chmod(p.key.c_str(), 0600) == 0);
  return p;
}

// What the tests share: the temporary directory, two certificate pairs, and
// the daemons (started on first use, stopped at exit).
struct Shared {
  TempDir dir;
  CertPair pair;   // the daemon's
  CertPair other;  // another key and certificate
  std::unique_ptr<DaemonProcess> https_daemon;
  std::unique_ptr<DaemonProcess> http_daemon;
};
std::unique_ptr<Shared> g_shared;

Shared& shared() {
  if (!g_shared) {
    auto s = std::make_unique<Shared>();
    s->pair = make_cert(s->dir.path, "daemon");
    s->other = make_cert(s->dir.path, "other");
    g_shared = std::move(s);
  }
  return *g_shared;
}

DaemonProcess& https_daemon() {
  Shared& s = shared();
  if (!s.https_daemon) {
    s.https_daemon =
        start_or_fail(stories_args({"--tls-cert", s.pair.cert, "--tls-key", s.pair.key}));
  }
  return *s.https_daemon;
}

DaemonProcess& http_daemon() {
  Shared& s = shared();
  if (!s.http_daemon) s.http_daemon = start_or_fail(stories_args());
  return *s.http_daemon;
}

client::ClientOptions options_for(const std::string& url) {
  client::ClientOptions o;
  REQUIRE(o.set_url(url).ok());
  o.connect_timeout_s = 10;
  o.read_timeout_s = 120;
  return o;
}

std::string https_url(const std::string& host = "localhost") {
  return "https://" + host + ":" + std::to_string(https_daemon().port());
}

// A deterministic completion: greedy, token-id prompt.
client::CompletionRequest greedy_request() {
  client::CompletionRequest req;
  req.prompt = std::vector<int32_t>{1, 403, 407};
  req.params.max_tokens = 6;
  req.params.temperature = 0.0;
  return req;
}

// prefixd run to its end with `args` (validation failures exit before the
// model loads).
ProcessExit run_daemon(std::vector<std::string> args) {
  std::vector<std::string> a = {"--model", stories_model_path(), "--port", "0", "--cache-dir",
                                test_cache_dir()};
  a.insert(a.end(), args.begin(), args.end());
  return run_prefixd(a, {}, std::chrono::seconds(60));
}

std::string prefixctl() { return std::string(PREFIXD_BUILD_DIR) + "/prefixctl"; }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the daemon serves https and says so on its start-up line") {
  DaemonProcess& d = https_daemon();
  CHECK(d.tls());
  client::ClientOptions o = options_for(https_url());
  o.ca_cert_path = shared().pair.cert;
  client::Client verified(o);
  auto h = verified.health();
  REQUIRE_MESSAGE(h.ok(), h.message());
  CHECK(h->status == "ok");
  CHECK_FALSE(http_daemon().tls());
}

TEST_CASE("a greedy completion over https with the CA file equals the same one over http") {
  client::ClientOptions o = options_for(https_url());
  o.ca_cert_path = shared().pair.cert;
  client::Client tls(o);
  auto over_tls = tls.complete(greedy_request());
  REQUIRE_MESSAGE(over_tls.ok(), over_tls.message());
  CHECK(tls.last_error().http_status == 0);  // a 2xx answer
  CHECK_FALSE(over_tls->text.empty());
  REQUIRE(over_tls->usage.has_value());
  CHECK(over_tls->usage->completion_tokens == 6);

  client::Client plain(options_for("http://127.0.0.1:" + std::to_string(http_daemon().port())));
  auto over_http = plain.complete(greedy_request());
  REQUIRE_MESSAGE(over_http.ok(), over_http.message());
  CHECK(over_tls->text == over_http->text);

  // Streamed over TLS, and with the certificate's IP address as the host.
  client::ClientOptions by_ip = options_for(https_url("127.0.0.1"));
  by_ip.ca_cert_path = shared().pair.cert;
  client::Client tls_ip(by_ip);
  auto streamed = tls_ip.complete_stream(greedy_request(), nullptr);
  REQUIRE_MESSAGE(streamed.ok(), streamed.message());
  CHECK(streamed->text == over_http->text);
  CHECK(streamed->finish_reason == over_http->finish_reason);
}

TEST_CASE("with verification on and no CA file the client refuses the self-signed certificate") {
  client::Client c(options_for(https_url()));
  auto r = c.complete(greedy_request());
  REQUIRE_FALSE(r.ok());
  CHECK(c.last_error().http_status == 0);
  CHECK_MESSAGE(contains(r.message(), "certificate"), r.message());
  CHECK_MESSAGE(contains(r.message(), "self-signed"), r.message());
  CHECK_MESSAGE(contains(r.message(), https_url()), r.message());

  // Another certificate as the CA: not the daemon's issuer either.
  client::ClientOptions wrong_ca = options_for(https_url());
  wrong_ca.ca_cert_path = shared().other.cert;
  client::Client c2(wrong_ca);
  auto r2 = c2.health();
  REQUIRE_FALSE(r2.ok());
  CHECK_MESSAGE(contains(r2.message(), "certificate"), r2.message());

  // A CA file that does not exist.
  client::ClientOptions missing_ca = options_for(https_url());
  missing_ca.ca_cert_path = shared().dir.path + "/missing.pem";
  client::Client c3(missing_ca);
  auto r3 = c3.health();
  REQUIRE_FALSE(r3.ok());
  CHECK_MESSAGE(contains(r3.message(), missing_ca.ca_cert_path), r3.message());

  // The explicit insecure option skips verification.
  client::ClientOptions insecure = options_for(https_url());
  insecure.insecure = true;
  client::Client c4(insecure);
  auto r4 = c4.complete(greedy_request());
  CHECK_MESSAGE(r4.ok(), r4.message());
}

TEST_CASE("plain http to the https port gets no answer") {
  const int port = https_daemon().port();
  httplib::Client raw("127.0.0.1", port);
  raw.set_connection_timeout(5, 0);
  raw.set_read_timeout(5, 0);
  auto r = raw.Get("/health");
  CHECK_FALSE(r);

  client::Client c(options_for("http://127.0.0.1:" + std::to_string(port)));
  auto h = c.health();
  REQUIRE_FALSE(h.ok());
  CHECK(c.last_error().http_status == 0);

  // And https to a plain http daemon fails the handshake.
  client::ClientOptions o = options_for("https://127.0.0.1:" + std::to_string(http_daemon().port()));
  o.insecure = true;
  client::Client mismatched(o);
  auto m = mismatched.health();
  REQUIRE_FALSE(m.ok());
  CHECK_MESSAGE(contains(m.message(), "is the daemon serving https?"), m.message());
}

TEST_CASE("the https port refuses TLS 1.1 and accepts TLS 1.2 and 1.3") {
  const std::string connect =
      "openssl s_client -connect 127.0.0.1:" + std::to_string(https_daemon().port()) +
      " -servername localhost";
  // The client side drops its own floor (security level 0) so that only the daemon can refuse.
  ShellRun old = shell(connect + " -tls1_1 -cipher DEFAULT@SECLEVEL=0 < /dev/null");
  CHECK_MESSAGE(old.code != 0, old.output);
  ShellRun v12 = shell(connect + " -tls1_2 < /dev/null");
  CHECK_MESSAGE(v12.code == 0, v12.output);
  CHECK(contains(v12.output, "TLSv1.2"));
  ShellRun v13 = shell(connect + " -tls1_3 < /dev/null");
  CHECK_MESSAGE(v13.code == 0, v13.output);
  CHECK(contains(v13.output, "TLSv1.3"));
}

TEST_CASE("prefixctl talks to the https daemon with --ca-cert, and refuses it without") {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixctl()), "build the prefixctl target: " << prefixctl());
  const std::string base = prefixctl() + " --url " + https_url();
  const std::string complete = " complete --ids 1,403,407 -n 6 --temperature 0";

  ShellRun ok = shell(base + " --ca-cert " + shared().pair.cert + complete);
  CHECK_MESSAGE(ok.code == 0, ok.output);
  CHECK_MESSAGE(contains(ok.output, "finish_reason="), ok.output);
  ShellRun health = shell(base + " --ca-cert " + shared().pair.cert + " health");
  CHECK_MESSAGE(health.code == 0, health.output);

  ShellRun unverified = shell(base + complete);
  CHECK_MESSAGE(unverified.code == 1, unverified.output);
  CHECK_MESSAGE(contains(unverified.output, "certificate"), unverified.output);

  ShellRun insecure = shell(base + " --insecure" + complete);
  CHECK_MESSAGE(insecure.code == 0, insecure.output);

  // Usage errors: TLS options with an http URL; a URL that is not one.
  ShellRun plain = shell(prefixctl() + " --url http://127.0.0.1:1 --ca-cert " +
                         shared().pair.cert + " health");
  CHECK_MESSAGE(plain.code == 2, plain.output);
  ShellRun bad = shell(prefixctl() + " --url ftp://localhost health");
  CHECK_MESSAGE(bad.code == 2, bad.output);
  CHECK(contains(bad.output, "http:// or https://"));

  ShellRun help = shell(prefixctl() + " --help");
  CHECK(contains(help.output, "--ca-cert"));
  CHECK(contains(help.output, "--insecure"));
  CHECK(contains(help.output, "--url"));
}

TEST_CASE("the daemon refuses --tls-cert without --tls-key, and the other way round") {
  Shared& s = shared();
  ProcessExit cert_only = run_daemon({"--tls-cert", s.pair.cert});
  CHECK(cert_only.code == 2);
  CHECK_MESSAGE(contains(cert_only.output, "--tls-cert needs --tls-key"), cert_only.output);
  ProcessExit key_only = run_daemon({"--tls-key", s.pair.key});
  CHECK(key_only.code == 2);
  CHECK_MESSAGE(contains(key_only.output, "--tls-key needs --tls-cert"), key_only.output);
}

TEST_CASE("the daemon refuses a key that is not the certificate's, naming the file") {
  Shared& s = shared();
  ProcessExit r = run_daemon({"--tls-cert", s.pair.cert, "--tls-key", s.other.key});
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.output, "--tls-key " + s.other.key + " is not the private key of"),
                r.output);
  CHECK_FALSE(contains(r.output, "listening on"));
}

TEST_CASE("the daemon refuses missing, non-PEM and world-readable certificate files") {
  Shared& s = shared();
  const std::string missing = s.dir.path + "/missing.pem";
  ProcessExit r = run_daemon({"--tls-cert", missing, "--tls-key", s.pair.key});
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.output, "--tls-cert " + missing + ": cannot open"), r.output);

  const std::string not_pem = s.dir.path + "/not.pem";
  std::ofstream(not_pem) << "hello\n";
  r = run_daemon({"--tls-cert", not_pem, "--tls-key", s.pair.key});
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.output, "--tls-cert " + not_pem + " holds no PEM certificate"),
                r.output);

  // The certificate given as the key: a 0600 file, but no private key in it.
  const std::string cert_as_key = s.dir.path + "/cert_as.key";
  std::filesystem::copy_file(s.pair.cert, cert_as_key);
  REQUIRE(chmod(cert_as_key.c_str(), 0600) == 0);
  r = run_daemon({"--tls-cert", s.pair.cert, "--tls-key", cert_as_key});
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.output, "--tls-key " + cert_as_key + " holds no PEM private key"),
                r.output);

  const std::string open_key = s.dir.path + "/open.key";
  std::filesystem::copy_file(s.pair.key, open_key);
  for (mode_t mode : {0644, 0640, 0604}) {
    REQUIRE(chmod(open_key.c_str(), mode) == 0);
    r = run_daemon({"--tls-cert", s.pair.cert, "--tls-key", open_key});
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.output, "--tls-key " + open_key + " is open to group or others"),
                  r.output);
    CHECK(contains(r.output, "chmod 600 " + open_key));
  }
}

int main(int argc, char** argv) {
  if (!have_openssl()) {
    std::fprintf(stderr, "test_tls: skipped: the openssl command is not installed\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  const int result = context.run();
  g_shared.reset();  // stops the daemons, removes the temporary directory
  return result;
}
