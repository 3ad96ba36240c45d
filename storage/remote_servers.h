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

// One server's place in the ring, for /v1/cache/stats and the logs.
struct RemoteServerState {
  RemoteServer server;
  bool in_ring = true;
  int64_t back_in_ms = 0;        // out of the ring: when it is tried again (0 when in)
  std::string reason;            // out of the ring: why ("refused N connects", ...); else empty
  int32_t timeouts_in_a_row = 0;  // timeouts since its last answer
};

// Which servers form the ketama ring every handle of a tier uses: those not
// marked down. A server leaves the ring for retry_interval (its keys move to
// the others in every handle at once), then joins again, when it
//   - refused failure_limit connects in a row (a dead process), or
//   - timed out timeout_limit operations in a row with no answer between
//     (a stalled one: SIGSTOP, a hung host; it accepts TCP connects through
//     the kernel's backlog but never answers, so every operation on it would
//     wait the whole timeout).
// A server that joins again after a timeout ejection is on probation: its
// next timeout takes it out again at once (not after timeout_limit more), its
// next answer ends the probation. The generation counts changes; a handle
// built for an older generation is rebuilt before its next operation.
// Thread-safe.
class RemoteServerRing {
 public:
  RemoteServerRing(std::vector<RemoteServer> servers, int32_t failure_limit,
                   int32_t timeout_limit, std::chrono::milliseconds retry_interval);

  // Marks servers[i] down for retry_interval from now (one that did not
  // answer at open).
  void mark_down(size_t i);
  // The current generation; servers whose time out of the ring is over join
  // again first. *servers (optional): the ring's servers (all of them when
  // every one is down, so that operations keep trying).
  uint64_t current(std::vector<RemoteServer>* servers);
  // A connect to host:port failed: counted, and the server marked down at
  // failure_limit failures since it joined. A server not in the list, or one
  // already down, is ignored (as in the two calls below).
  void note_connection_failure(const std::string& host, uint16_t port);
  // An operation on host:port timed out: counted, and the server marked down
  // at timeout_limit timeouts in a row (at the first one on probation).
  void note_timeout(const std::string& host, uint16_t port);
  // host:port answered an operation: its timeouts in a row and its probation end.
  void note_answer(const std::string& host, uint16_t port);

  // Servers not marked down now (0 when every one is out, although
  // operations then try them all).
  int32_t servers_in_ring();
  // Times a server was taken out of the ring (connects refused, timeouts or
  // no answer at open), since construction.
  uint64_t ejections();
  std::vector<RemoteServerState> states();

 private:
  using Clock = std::chrono::steady_clock;
  // servers_[i] with host:port, or -1. mu_ held or not: servers_ is const.
  int64_t index_of(const std::string& host, uint16_t port) const;
  void eject_locked(size_t i, std::string reason);
  void rejoin_due_locked(Clock::time_point now);

  const std::vector<RemoteServer> servers_;
  const int32_t failure_limit_;
  const int32_t timeout_limit_;
  const std::chrono::milliseconds retry_interval_;
  std::mutex mu_;                            // guards the members below
  std::vector<Clock::time_point> down_until_;  // per server; {} = in the ring
  std::vector<int32_t> failures_;              // connects failed since it joined
  std::vector<int32_t> timeouts_;              // timeouts since its last answer
  std::vector<bool> probation_;                // joined again after a timeout ejection
  std::vector<std::string> reasons_;           // why it is out ("" when in)
  uint64_t ejections_ = 0;
  uint64_t generation_ = 1;
};

}  // namespace prefixd
