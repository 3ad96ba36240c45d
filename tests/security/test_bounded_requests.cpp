// Security suite, memory before authentication: what one connection that
// holds no key can make the daemon read or hold (daemon/http/request_bounds.h,
// daemon/api.md "Request limits"). Starts the real daemon on a free loopback
// port and talks raw HTTP to it; each attack asserts the answer, that the
// connection is closed (so the unread body is never parsed as a request), that
// the daemon's peak RSS (VmHWM) grew by less than 64 MiB, and that a normal
// completion still works afterwards.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <arpa/inet.h>
#include <brotli/decode.h>
#include <brotli/encode.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/daemon_process.h"

using namespace prefixd::testing;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
// Every resource attack must leave the daemon's peak RSS below this growth.
constexpr uint64_t kMaxGrowthBytes = 64 * kMiB;

std::unique_ptr<DaemonProcess> start_or_fail(const std::vector<std::string>& extra = {}) {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  std::vector<std::string> args = {"--model", stories_model_path()};
  for (const char* a : {"--threads", "1", "--kv-dtype", "f32"}) args.push_back(a);
  args.insert(args.end(), extra.begin(), extra.end());
  std::string error;
  auto d = DaemonProcess::start(args, &error);
  REQUIRE_MESSAGE(d != nullptr, error);
  return d;
}

const std::string kCompletion = R"({"prompt": [1, 403, 407], "max_tokens": 2})";

// A normal completion works (the daemon kept serving after the attack).
void check_serves(DaemonProcess& d, const httplib::Headers& headers = {}) {
  auto r = d.client()->Post("/v1/completions", headers, kCompletion, "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(json::parse(r->body, nullptr, false)["usage"]["completion_tokens"] == 2);
}

// The daemon's peak resident set (VmHWM) in bytes.
uint64_t peak_rss_bytes(const DaemonProcess& d) {
  std::ifstream in("/proc/" + std::to_string(d.pid()) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  FAIL("no VmHWM in /proc/PID/status");
  return 0;
}

// Fills `piece` with the next bytes of a body; false when the body is done.
using BodySource = std::function<bool(std::string& piece)>;

// What came back on one raw connection.
struct RawAnswer {
  int status = 0;           // 0: no complete answer came
  std::string head;         // status line and headers
  std::string body;         // the answer's body (by its Content-Length)
  bool closed = false;      // the daemon closed the connection after answering
  uint64_t bytes_sent = 0;  // request bytes the kernel took, head included

  std::string header(const std::string& name) const {
    const std::string key = "\r\n" + name + ": ";
    const size_t at = head.find(key);
    if (at == std::string::npos) return "";
    const size_t from = at + key.size();
    return head.substr(from, head.find("\r\n", from) - from);
  }
  std::string error_code() const {
    json j = json::parse(body, nullptr, false);
    return j.is_object() && j["error"]["code"].is_string() ? j["error"]["code"].get<std::string>()
                                                           : "";
  }
  std::string error_message() const {
    json j = json::parse(body, nullptr, false);
    return j.is_object() ? j["error"].value("message", "") : "";
  }
};

// Sends `head` and then the pieces of `body` on a new connection to the
// daemon, reading as it goes. Stops sending as soon as an answer arrives or
// the daemon stops reading (reset, closed); then waits up to 2 s for the
// daemon to close (it closes at once, or keeps the connection for its 5 s
// keep-alive). Everything ends after `limit`.
RawAnswer exchange(int port, const std::string& head, const BodySource& body,
                   std::chrono::seconds limit = std::chrono::seconds(120)) {
  RawAnswer a;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

  std::string pending = head, in;
  size_t pending_at = 0;
  bool sending = true, answered = false;
  const auto deadline = Clock::now() + limit;
  auto close_deadline = deadline;
  while (Clock::now() < std::min(deadline, close_deadline)) {
    if (sending && pending_at == pending.size()) {
      pending.clear();
      pending_at = 0;
      if (!body || !body(pending)) sending = false;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        in.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        a.closed = answered;  // EOF or reset (before an answer: status stays 0)
        break;
      }
    }
    if (!answered) {
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos) {
        a.head = in.substr(0, end + 2);
        const std::string length = a.header("Content-Length");
        const size_t body_len = length.empty() ? 0 : std::stoull(length);
        if (in.size() >= end + 4 + body_len) {
          a.body = in.substr(end + 4, body_len);
          a.status = std::stoi(a.head.substr(9, 3));
          answered = true;
          sending = false;  // the answer came: the daemon wants no more
          close_deadline = Clock::now() + std::chrono::seconds(2);
        }
      }
    }
    if (sending && (p.revents & POLLOUT)) {
      const ssize_t n =
          send(fd, pending.data() + pending_at, pending.size() - pending_at, MSG_NOSIGNAL);
      if (n > 0) {
        pending_at += static_cast<size_t>(n);
        a.bytes_sent += static_cast<uint64_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        sending = false;  // EPIPE/ECONNRESET: the daemon stopped reading; its answer may be queued
      }
    }
  }
  close(fd);
  return a;
}

// `total` bytes of 'a' as a chunked body in 64 KiB chunks, then the last chunk.
BodySource chunked_body(uint64_t total) {
  auto sent = std::make_shared<uint64_t>(0);
  auto done = std::make_shared<bool>(false);
  return [=](std::string& piece) {
    if (*done) return false;
    if (*sent >= total) {
      piece = "0\r\n\r\n";
      *done = true;
      return true;
    }
    const uint64_t n = std::min<uint64_t>(64 * 1024, total - *sent);
    char size_line[32];
    std::snprintf(size_line, sizeof(size_line), "%llx\r\n", static_cast<unsigned long long>(n));
    piece = size_line + std::string(n, 'a') + "\r\n";
    *sent += n;
    return true;
  };
}

// `text` as a chunked body, in chunks of `chunk_bytes`.
std::string chunked(const std::string& text, size_t chunk_bytes) {
  std::string out;
  for (size_t at = 0; at < text.size(); at += chunk_bytes) {
    const std::string chunk = text.substr(at, chunk_bytes);
    char size_line[32];
    std::snprintf(size_line, sizeof(size_line), "%zx\r\n", chunk.size());
    out += size_line + chunk + "\r\n";
  }
  return out + "0\r\n\r\n";
}

// `total` bytes of `byte`, in 64 KiB pieces.
BodySource repeated_bytes(uint64_t total, char byte) {
  auto sent = std::make_shared<uint64_t>(0);
  return [=](std::string& piece) {
    if (*sent >= total) return false;
    const uint64_t n = std::min<uint64_t>(64 * 1024, total - *sent);
    piece.assign(n, byte);
    *sent += n;
    return true;
  };
}

// `bytes`, in 64 KiB pieces.
BodySource pieces_of(std::shared_ptr<const std::string> bytes) {
  auto at = std::make_shared<size_t>(0);
  return [=](std::string& piece) {
    if (*at >= bytes->size()) return false;
    piece = bytes->substr(*at, 64 * 1024);
    *at += piece.size();
    return true;
  };
}

std::string request_head(const std::string& method, const std::string& path,
                         const std::vector<std::string>& headers) {
  std::string head = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const std::string& h : headers) head += h + "\r\n";
  return head + "\r\n";
}

// A gzip member that inflates to `n_mib` MiB of zeros while only about 1 KiB
// per MiB is built or sent: one deflate segment (1 MiB of zeros, ended with a
// full flush: byte-aligned and referring to nothing before it) repeated, then
// an empty final block and the trailer (CRC-32 and length of the whole).
std::string gzip_of_zeros(uint64_t n_mib) {
  const std::string zeros(kMiB, '\0');
  auto raw_deflate = [&](const std::string& input, int flush) {
    z_stream z{};
    REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string out(deflateBound(&z, input.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input.data()));
    z.avail_in = static_cast<uInt>(input.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    REQUIRE(deflate(&z, flush) != Z_STREAM_ERROR);
    REQUIRE(z.avail_in == 0);
    out.resize(out.size() - z.avail_out);
    deflateEnd(&z);
    return out;
  };
  const std::string segment = raw_deflate(zeros, Z_FULL_FLUSH);
  const std::string last_block = raw_deflate("", Z_FINISH);
  const uLong segment_crc = crc32(0, reinterpret_cast<const Bytef*>(zeros.data()), kMiB);
  uLong crc = crc32(0, nullptr, 0);
  std::string gz = std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  gz.reserve(10 + segment.size() * n_mib + 16);
  for (uint64_t i = 0; i < n_mib; ++i) {
    gz += segment;
    crc = crc32_combine(crc, segment_crc, static_cast<z_off_t>(kMiB));
  }
  gz += last_block;
  const uint32_t isize = static_cast<uint32_t>(n_mib * kMiB);  // modulo 2^32 (RFC 1952)
  for (int i = 0; i < 4; ++i) gz += static_cast<char>((crc >> (8 * i)) & 0xff);
  for (int i = 0; i < 4; ++i) gz += static_cast<char>((isize >> (8 * i)) & 0xff);
  return gz;
}

// How many bytes `gz` inflates to (streamed through a 1 MiB buffer); 0 when
// it is not one valid gzip member.
uint64_t gunzipped_size(const std::string& gz) {
  z_stream z{};
  REQUIRE(inflateInit2(&z, 16 + 15) == Z_OK);
  std::string out(kMiB, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  uint64_t total = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    rc = inflate(&z, Z_NO_FLUSH);
    total += out.size() - z.avail_out;
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END ? total : 0;
}

// A brotli stream of `n_mib` MiB of zeros (quality 1: about 2 s and 190 KiB
// per GiB).
std::string brotli_of_zeros(uint64_t n_mib) {
  BrotliEncoderState* s = BrotliEncoderCreateInstance(nullptr, nullptr, nullptr);
  REQUIRE(s != nullptr);
  BrotliEncoderSetParameter(s, BROTLI_PARAM_QUALITY, 1);
  const std::string zeros(kMiB, '\0');
  std::string out;
  std::vector<uint8_t> buf(64 * 1024);
  bool ok = true;
  for (uint64_t i = 0; i < n_mib && ok; ++i) {
    const BrotliEncoderOperation op =
        i + 1 == n_mib ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_PROCESS;
    size_t avail_in = zeros.size();
    const uint8_t* next_in = reinterpret_cast<const uint8_t*>(zeros.data());
    do {
      size_t avail_out = buf.size();
      uint8_t* next_out = buf.data();
      ok = BrotliEncoderCompressStream(s, op, &avail_in, &next_in, &avail_out, &next_out,
                                       nullptr) == BROTLI_TRUE;
      out.append(reinterpret_cast<const char*>(buf.data()), buf.size() - avail_out);
    } while (ok && (avail_in > 0 || BrotliEncoderHasMoreOutput(s) ||
                    (op == BROTLI_OPERATION_FINISH && !BrotliEncoderIsFinished(s))));
  }
  BrotliEncoderDestroyInstance(s);
  REQUIRE(ok);
  return out;
}

// How many bytes `br` decompresses to (streamed); 0 when it is not valid.
uint64_t unbrotlied_size(const std::string& br) {
  BrotliDecoderState* s = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
  REQUIRE(s != nullptr);
  std::vector<uint8_t> buf(kMiB);
  size_t avail_in = br.size();
  const uint8_t* next_in = reinterpret_cast<const uint8_t*>(br.data());
  uint64_t total = 0;
  BrotliDecoderResult rc = BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT;
  while (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) {
    size_t avail_out = buf.size();
    uint8_t* next_out = buf.data();
    rc = BrotliDecoderDecompressStream(s, &avail_in, &next_in, &avail_out, &next_out, nullptr);
    total += buf.size() - avail_out;
  }
  BrotliDecoderDestroyInstance(s);
  return rc == BROTLI_DECODER_RESULT_SUCCESS ? total : 0;
}

// One attack on a fresh daemon: the peak RSS before it (after a warm-up
// completion), the exchange, then the growth check and a normal completion.
struct Attack {
  std::unique_ptr<DaemonProcess> daemon;
  httplib::Headers auth;  // what a normal completion sends
  uint64_t peak_before = 0;

  explicit Attack(const std::vector<std::string>& daemon_args = {}, httplib::Headers auth_ = {})
      : daemon(start_or_fail(daemon_args)), auth(std::move(auth_)) {
    check_serves(*daemon, auth);
    peak_before = peak_rss_bytes(*daemon);
  }
  RawAnswer send(const std::string& head, const BodySource& body) {
    return exchange(daemon->port(), head, body);
  }
  uint64_t growth() const { return peak_rss_bytes(*daemon) - peak_before; }
  void check_bounded_and_serving(uint64_t max_growth = kMaxGrowthBytes) {
    const uint64_t grown = growth();
    MESSAGE("peak RSS grew by " << grown / 1024 << " KiB");
    CHECK(grown < max_growth);
    check_serves(*daemon, auth);
    CHECK(daemon->stop() == 0);
  }
};

// A refusal before the body was read: the exact status and code, and, when a
// body was sent (`closes`), the connection closed once the answer was sent.
void check_refused(const RawAnswer& a, int status, const std::string& code, bool closes = true) {
  CAPTURE(a.head);
  CAPTURE(a.body);
  CHECK(a.status == status);
  CHECK(a.error_code() == code);
  CHECK(a.closed == closes);
  CHECK((a.header("Connection") == "close") == closes);
  if (closes) CHECK(a.header("Keep-Alive").empty());
}

}  // namespace

TEST_CASE("a gzip body that inflates to 2 GiB is refused with 415 before it is read") {
  const auto gz = std::make_shared<const std::string>(gzip_of_zeros(2 * 1024));
  MESSAGE("gzip body: " << gz->size() << " bytes");
  REQUIRE(gz->size() < 4 * kMiB);  // within --max-body-bytes: only the encoding is refused
  CHECK(gunzipped_size(*gz) == 2 * kGiB);

  Attack attack;
  // httplib would inflate it into memory for a dashboard POST route, and
  // inflate it into read_body (bounded there) for the generation routes.
  for (const char* path : {"/v1/cache/prefixes/pin", "/v1/completions", "/health"}) {
    CAPTURE(path);
    const RawAnswer a =
        attack.send(request_head("POST", path,
                                 {"Content-Type: application/json", "Content-Encoding: gzip",
                                  "Content-Length: " + std::to_string(gz->size())}),
                    pieces_of(gz));
    check_refused(a, 415, "unsupported_media_type");
    CHECK(a.error_message().find("Content-Encoding 'gzip'") != std::string::npos);
  }
  // Any encoding but identity, on any request (no body: the connection stays).
  RawAnswer a = attack.send(request_head("GET", "/v1/models", {"Content-Encoding: deflate"}), {});
  check_refused(a, 415, "unsupported_media_type", /*closes=*/false);
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Content-Encoding: identity",
                                "Content-Length: " + std::to_string(kCompletion.size())}) +
                      kCompletion,
                  {});
  CHECK(a.status == 200);
  attack.check_bounded_and_serving();
}

TEST_CASE("a br body that inflates to 2 GiB is refused with 415 before it is read") {
  const auto br = std::make_shared<const std::string>(brotli_of_zeros(2 * 1024));
  MESSAGE("br body: " << br->size() << " bytes");
  CHECK(unbrotlied_size(*br) == 2 * kGiB);

  Attack attack;
  for (const char* path : {"/v1/cache/prefixes/unpin", "/v1/chat/completions"}) {
    CAPTURE(path);
    const RawAnswer a =
        attack.send(request_head("POST", path,
                                 {"Content-Type: application/json", "Content-Encoding: br",
                                  "Content-Length: " + std::to_string(br->size())}),
                    pieces_of(br));
    check_refused(a, 415, "unsupported_media_type");
    CHECK(a.error_message().find("Content-Encoding 'br'") != std::string::npos);
  }
  attack.check_bounded_and_serving();
}

TEST_CASE("a 1 GiB chunked body to /health: 405 for POST, 400 for GET, nothing read") {
  Attack attack;
  RawAnswer a = attack.send(request_head("POST", "/health", {"Transfer-Encoding: chunked"}),
                            chunked_body(kGiB));
  check_refused(a, 405, "method_not_allowed");
  CHECK(a.header("Allow") == "GET, HEAD");
  CHECK(a.bytes_sent < 64 * kMiB);  // refused early: the test stopped sending
  a = attack.send(request_head("GET", "/health", {"Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 400, "body_not_allowed");
  CHECK(a.bytes_sent < 64 * kMiB);
  // Other methods without a body get 405 too; GET and HEAD answer.
  a = attack.send(request_head("DELETE", "/health", {}), {});
  check_refused(a, 405, "method_not_allowed", /*closes=*/false);
  a = attack.send(request_head("GET", "/health", {}), {});
  CHECK(a.status == 200);
  attack.check_bounded_and_serving();
}

TEST_CASE("a 1 GiB body to an unknown path is refused with 404 before it is read") {
  Attack attack;
  RawAnswer a = attack.send(request_head("POST", "/v1/nothing", {"Transfer-Encoding: chunked"}),
                            chunked_body(kGiB));
  check_refused(a, 404, "not_found");
  CHECK(a.bytes_sent < 64 * kMiB);
  // Without Content-Length or Transfer-Encoding httplib would read a POST
  // until the connection ends.
  a = attack.send(request_head("POST", "/v1/nothing", {}), repeated_bytes(kGiB, 'a'));
  check_refused(a, 404, "not_found");
  CHECK(a.bytes_sent < 64 * kMiB);
  a = attack.send(request_head("PUT", "/v1/completions", {"Content-Length: 1073741824"}),
                  repeated_bytes(kGiB, 'a'));
  check_refused(a, 404, "not_found");
  CHECK(a.bytes_sent < 64 * kMiB);
  attack.check_bounded_and_serving();
}

TEST_CASE("a 1 GiB chunked body to /v1/completions stops at --max-body-bytes with 413") {
  Attack attack;
  RawAnswer a =
      attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 413, "request_too_large");
  CHECK(a.bytes_sent < 64 * kMiB);
  // A declared length above the limit is refused before any of it is read.
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Content-Length: 1073741824"}),
                  repeated_bytes(kGiB, 'a'));
  check_refused(a, 413, "request_too_large");
  CHECK(a.bytes_sent < 64 * kMiB);
  // A chunked body within the limit is served.
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Transfer-Encoding: chunked"}),
                  pieces_of(std::make_shared<const std::string>(chunked(kCompletion, 16))));
  CHECK(a.status == 200);
  attack.check_bounded_and_serving();
}

TEST_CASE("a 1 GiB chunked body to a dashboard POST route (read whole by httplib) gets 411") {
  Attack attack;
  RawAnswer a =
      attack.send(request_head("POST", "/v1/cache/prefixes/pin",
                               {"Content-Type: application/json", "Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 411, "length_required");
  CHECK(a.bytes_sent < 64 * kMiB);
  a = attack.send(
      request_head("POST", "/v1/cache/prefixes/unpin", {"Content-Type: application/json"}),
      repeated_bytes(kGiB, 'a'));
  check_refused(a, 411, "length_required");
  CHECK(a.bytes_sent < 64 * kMiB);
  attack.check_bounded_and_serving();
}

TEST_CASE("an 8 MiB Content-Length body on a GET route is refused with 400, unread") {
  Attack attack;
  RawAnswer a = attack.send(
      request_head("GET", "/v1/models", {"Content-Length: " + std::to_string(8 * kMiB)}),
      repeated_bytes(8 * kMiB, 'a'));
  check_refused(a, 400, "body_not_allowed");
  a = attack.send(request_head("DELETE", "/v1/cache", {"Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 400, "body_not_allowed");
  CHECK(a.bytes_sent < 64 * kMiB);
  attack.check_bounded_and_serving();
}

TEST_CASE("Host, Origin and key refusals close the connection when a 1 GiB body follows") {
  Attack attack({"--api-key", "s3cret"}, {{"Authorization", "Bearer s3cret"}});
  RawAnswer a = attack.send(
      "POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
      chunked_body(kGiB));
  check_refused(a, 421, "host_not_allowed");
  CHECK(a.bytes_sent < 64 * kMiB);
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Origin: https://evil.example", "Content-Type: application/json",
                                "Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 403, "origin_not_allowed");
  CHECK(a.bytes_sent < 64 * kMiB);
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 401, "invalid_api_key");
  CHECK(a.bytes_sent < 64 * kMiB);
  // The body checks come before the key: no key is needed to be refused.
  a = attack.send(request_head("POST", "/v1/cache/prefixes/pin",
                               {"Content-Type: application/json", "Transfer-Encoding: chunked"}),
                  chunked_body(kGiB));
  check_refused(a, 411, "length_required");
  // Without a body a refusal keeps the connection.
  a = attack.send(request_head("GET", "/v1/models", {}), {});
  check_refused(a, 401, "invalid_api_key", /*closes=*/false);
  attack.check_bounded_and_serving();
}

TEST_CASE("ambiguous body framing is refused with 400 before anything is read") {
  Attack attack;
  RawAnswer a = attack.send(request_head("POST", "/v1/completions",
                                         {"Content-Type: application/json", "Content-Length: 10",
                                          "Transfer-Encoding: chunked"}),
                            chunked_body(kMiB));
  check_refused(a, 400, "conflicting_body_length");
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Transfer-Encoding: gzip"}),
                  repeated_bytes(kMiB, 'a'));
  check_refused(a, 400, "unsupported_transfer_encoding");
  a = attack.send(request_head("POST", "/v1/completions",
                               {"Content-Type: application/json", "Content-Length: 12, 99"}),
                  repeated_bytes(kMiB, 'a'));
  check_refused(a, 400, "invalid_content_length");
  attack.check_bounded_and_serving();
}

TEST_CASE("a 64 MiB header line without '\\n' is held whole: the documented cost, then 400") {
  // cpp-httplib 0.11.4 reads a request or header line into a std::string
  // until '\n' before checking its 8 KiB limit; nothing the daemon runs can
  // stop it. daemon/api.md gives the cost measured here (about twice the line,
  // the string's doubling); ops/haproxy/ bounds it in front of the daemon.
  Attack attack;
  BodySource line = repeated_bytes(64 * kMiB, 'a');
  auto ended = std::make_shared<bool>(false);
  RawAnswer a =
      attack.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ", [=](std::string& piece) {
        if (line(piece)) return true;
        if (*ended) return false;
        piece = "\r\n\r\n";  // the daemon answers once the line ends
        *ended = true;
        return true;
      });
  CHECK(a.status == 400);
  const uint64_t grown = attack.growth();
  MESSAGE("a 64 MiB header line: peak RSS grew by " << grown / kMiB << " MiB");
  CHECK(grown > 64 * kMiB);   // held whole (if this fails, httplib now bounds it: update api.md)
  CHECK(grown < 200 * kMiB);  // the documented bound: about 2x the line
  attack.check_bounded_and_serving(200 * kMiB);
}

TEST_CASE("a 64 MiB request line without '\\n' is held whole: the documented cost, then 414") {
  Attack attack;
  BodySource line = repeated_bytes(64 * kMiB, 'a');
  auto ended = std::make_shared<bool>(false);
  RawAnswer a = attack.send("GET /", [=](std::string& piece) {
    if (line(piece)) return true;
    if (*ended) return false;
    piece = " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    *ended = true;
    return true;
  });
  CHECK(a.status == 414);
  const uint64_t grown = attack.growth();
  MESSAGE("a 64 MiB request line: peak RSS grew by " << grown / kMiB << " MiB");
  CHECK(grown > 64 * kMiB);
  CHECK(grown < 200 * kMiB);
  attack.check_bounded_and_serving(200 * kMiB);
}

TEST_CASE("64 MiB of 8 KB header lines are held whole: the documented cost, then answered") {
  // Each line is within httplib's 8 KiB limit, and nothing limits how many
  // there are (ops/haproxy/ allows 64).
  Attack attack;
  const std::string line = "X-Filler: " + std::string(8000, 'a') + "\r\n";
  auto sent = std::make_shared<uint64_t>(0);
  RawAnswer a = attack.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", [=](std::string& piece) {
    if (*sent > 64 * kMiB) return false;
    if (*sent + line.size() > 64 * kMiB) {
      piece = "\r\n";  // the end of the headers
      *sent = 65 * kMiB;
      return true;
    }
    piece.clear();
    for (int i = 0; i < 8; ++i) piece += line;
    *sent += piece.size();
    return true;
  });
  CHECK(a.status == 200);
  const uint64_t grown = attack.growth();
  MESSAGE("64 MiB of header lines: peak RSS grew by " << grown / kMiB << " MiB");
  CHECK(grown > 64 * kMiB);   // held whole (if this fails, httplib now bounds it: update api.md)
  CHECK(grown < 200 * kMiB);  // the documented bound: about 1.5x the headers
  attack.check_bounded_and_serving(200 * kMiB);
}

TEST_CASE("an 8 MiB nested-JSON body is refused with 400 at depth 64, its memory bounded") {
  Attack attack;
  // {"prompt": [[[[ ... 8 MiB of '[' ... : the parser stops at level 65.
  const uint64_t n = 8 * kMiB - 16;
  auto body = std::make_shared<const std::string>("{\"prompt\":" + std::string(n, '['));
  RawAnswer a = attack.send(request_head("POST", "/v1/completions",
                                         {"Content-Type: application/json",
                                          "Content-Length: " + std::to_string(body->size())}),
                            pieces_of(body));
  CAPTURE(a.body);
  CHECK(a.status == 400);
  CHECK(a.error_code() == "json_too_deep");
  attack.check_bounded_and_serving();
}

TEST_CASE("a body of 1,000,001 JSON values is refused with 400 at the value limit") {
  Attack attack;
  // Many values, shallow: 1,000,001 zeros in one array.
  std::string many = "{\"prompt\":[0";
  for (int i = 0; i < 1000000; ++i) many += ",0";
  many += "]}";
  auto many_body = std::make_shared<const std::string>(std::move(many));
  RawAnswer a = attack.send(request_head("POST", "/v1/completions",
                                         {"Content-Type: application/json",
                                          "Content-Length: " + std::to_string(many_body->size())}),
                            pieces_of(many_body));
  CHECK(a.status == 400);
  CHECK(a.error_code() == "json_too_many_values");
  attack.check_bounded_and_serving();
}

TEST_CASE("a 1 MiB cache_salt is refused with 400 and nothing of it is kept") {
  Attack attack;
  for (int i = 0; i < 8; ++i) {  // 8 of them: none may be stored with the prefix tracker
    const json body = {{"prompt", {1, 403, 407}}, {"max_tokens", 1},
                       {"cache_salt", std::string(kMiB, static_cast<char>('a' + i))}};
    auto text = std::make_shared<const std::string>(body.dump());
    RawAnswer a = attack.send(request_head("POST", "/v1/completions",
                                           {"Content-Type: application/json",
                                            "Content-Length: " + std::to_string(text->size())}),
                              pieces_of(text));
    CAPTURE(a.body);
    CHECK(a.status == 400);
    CHECK(a.error_code() == "invalid_value");
    CHECK(a.error_message().find("cache_salt") != std::string::npos);
  }
  auto prefixes = attack.daemon->client()->Get("/v1/cache/prefixes");
  REQUIRE(prefixes);
  CHECK(prefixes->body.size() < 64 * 1024);
  attack.check_bounded_and_serving();
}
