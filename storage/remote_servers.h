// The remote tier's memcached servers: the URL that lists them, libmemcached
// handles configured for them, the probe each answers at open, and the ring
// of servers not marked down that every handle of one tier shares.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

struct memcached_st;  // libmemcached's handle

namespace prefixd {

struct RemoteServer {
  std::string host;
  uint16_t port = 11211;
};

// "memcached://HOST:PORT[,HOST:PORT...]" -> servers. Refuses (naming the
// part) another scheme, an empty list, a missing or out-of-range port.
Result<std::vector<RemoteServer>> parse_remote_cache_url(const std::string& url);

// "HOST:PORT", or "[HOST]:PORT" for an IPv6 address.
std::string remote_server_name(const RemoteServer& server);

// What a handle is configured with (from RemoteTierOptions).
struct MemcachedSettings {
  std::chrono::milliseconds timeout{200};          // per operation: connect, send, receive
  std::chrono::milliseconds retry_interval{2000};  // a handle skips a server whose connect
                                                   // failed this long (whole seconds, at least 1)
};

struct MemcachedDeleter {
  void operator()(memcached_st* memc) const;
};
using MemcachedPtr = std::unique_ptr<memcached_st, MemcachedDeleter>;

// A handle on `servers`: binary protocol, libketama-compatible consistent
// hashing (every replica given the same list maps a key to the same server),
// the settings' timeouts, and no ejection of its own (RemoteServerRing
// decides). Fails naming a server libmemcached refuses to add.
Result<MemcachedPtr> make_memcached_handle(const MemcachedSettings& settings,
                                           std::span<const RemoteServer> servers);

// Asks one server for "stats settings" and checks that an item of
// item_bytes (a value of value_bytes, its key and memcached's item header)
// fits its item_size_max; the refusal names memcached's -I option.
// *unreachable tells a server that did not answer within the timeout from
// one that answered no.
Status probe_remote_server(const MemcachedSettings& settings, const RemoteServer& server,
                           uint64_t value_bytes, uint64_t item_bytes, bool* unreachable);

// Which servers form the ketama ring every handle of a tier uses: those not
// marked down. A server that fails failure_limit connects in a row is marked
// down for retry_interval (its keys move to the others in every handle at
// once), then joins again. The generation counts changes; a handle built for
// an older generation is rebuilt before its next operation. Thread-safe.
class RemoteServerRing {
 public:
  RemoteServerRing(std::vector<RemoteServer> servers, int32_t failure_limit,
                   std::chrono::milliseconds retry_interval);

  // Marks servers[i] down for retry_interval from now (one that did not
  // answer at open).
  void mark_down(size_t i);
  // The current generation; servers whose time out of the ring is over join
  // again first. *servers (optional): the ring's servers (all of them when
  // every one is down, so that operations keep trying).
  uint64_t current(std::vector<RemoteServer>* servers);
  // A connect to host:port failed: counted, and the server marked down at
  // failure_limit failures since it joined. A server not in the list, or one
  // already down, is ignored.
  void note_connection_failure(const std::string& host, uint16_t port);

 private:
  using Clock = std::chrono::steady_clock;
  const std::vector<RemoteServer> servers_;
  const int32_t failure_limit_;
  const std::chrono::milliseconds retry_interval_;
  std::mutex mu_;                            // guards the members below
  std::vector<Clock::time_point> down_until_;  // per server; {} = in the ring
  std::vector<int32_t> failures_;              // connects failed since it joined
  uint64_t generation_ = 1;
};

}  // namespace prefixd
