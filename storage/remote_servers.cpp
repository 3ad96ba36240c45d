// The remote tier's memcached servers: parsing their URL, handles configured
// for them, the probe at open, and the ring of servers not marked down.
#include "storage/remote_servers.h"

#include <libmemcached/memcached.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace prefixd {

std::string remote_server_name(const RemoteServer& s) {
  const bool v6 = s.host.find(':') != std::string::npos;
  return (v6 ? "[" + s.host + "]" : s.host) + ":" + std::to_string(s.port);
}

namespace {

// Applies the tier's behaviours to a handle (before servers are added).
Status configure(memcached_st* memc, const MemcachedSettings& o) {
  const uint64_t timeout_ms = static_cast<uint64_t>(o.timeout.count());
  // The library counts retry and dead timeouts in whole seconds.
  const uint64_t retry_s =
      std::max<uint64_t>(1, (static_cast<uint64_t>(o.retry_interval.count()) + 999) / 1000);
  const std::pair<memcached_behavior_t, uint64_t> behaviours[] = {
      {MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1},
      // libketama-compatible consistent hashing (MD5 keys and points), so
      // every replica given the same server list maps a key to the same server.
      {MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1},
      {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
      {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, timeout_ms},
      {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, timeout_ms},
      {MEMCACHED_BEHAVIOR_SND_TIMEOUT, timeout_ms * 1000},  // microseconds
      {MEMCACHED_BEHAVIOR_RCV_TIMEOUT, timeout_ms * 1000},
      // A server whose connect fails is skipped by this handle for retry_s.
      // Leaving the ring is the tier's decision, for every handle at once
      // (RemoteTier::Impl::note_failure): libmemcached's own ejection is per
      // handle, and a reader and the writer that disagreed about where a key
      // lives could miss a block they had just written, for good.
      {MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, 0},
      {MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, retry_s},
  };
  for (const auto& [behaviour, value] : behaviours) {
    const memcached_return_t rc = memcached_behavior_set(memc, behaviour, value);
    if (memcached_failed(rc)) {
      return Status::error(std::string("remote cache: libmemcached refused behaviour ") +
                           std::to_string(static_cast<int>(behaviour)) + ": " +
                           memcached_strerror(memc, rc));
    }
  }
  return Status::ok_status();
}

}  // namespace

void MemcachedDeleter::operator()(memcached_st* m) const { memcached_free(m); }

Result<MemcachedPtr> make_memcached_handle(const MemcachedSettings& o,
                                           std::span<const RemoteServer> servers) {
  MemcachedPtr memc(memcached_create(nullptr));
  if (!memc) return Status::error("remote cache: memcached_create failed (out of memory)");
  Status s = configure(memc.get(), o);
  if (!s.ok()) return s;
  for (const RemoteServer& server : servers) {
    const memcached_return_t rc =
        memcached_server_add(memc.get(), server.host.c_str(), server.port);
    if (memcached_failed(rc)) {
      return Status::error("remote cache: cannot add memcached server " + remote_server_name(server) +
                           ": " + memcached_strerror(memc.get(), rc));
    }
  }
  return memc;
}

namespace {

struct SettingsProbe {
  bool found = false;
  uint64_t item_size_max = 0;
};

memcached_return_t read_setting(const memcached_instance_st*, const char* key, size_t key_length,
                                const char* value, size_t value_length, void* context) {
  auto* probe = static_cast<SettingsProbe*>(context);
  if (std::string_view(key, key_length) == "item_size_max") {
    const std::string v(value, value_length);
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (errno == 0 && end != v.c_str() && *end == '\0') {
      probe->found = true;
      probe->item_size_max = n;
    }
  }
  return MEMCACHED_SUCCESS;
}

}  // namespace

Status probe_remote_server(const MemcachedSettings& o, const RemoteServer& server,
                           uint64_t value_bytes, uint64_t item_bytes, bool* unreachable) {
  *unreachable = false;
  auto memc = make_memcached_handle(o, std::span<const RemoteServer>(&server, 1));
  if (!memc.ok()) return memc.status();
  SettingsProbe probe;
  const memcached_return_t rc =
      memcached_stat_execute(memc->get(), "settings", read_setting, &probe);
  if (memcached_failed(rc)) {
    *unreachable = true;
    return Status::error("remote cache: memcached at " + remote_server_name(server) +
                         " does not answer (timeout " + std::to_string(o.timeout.count()) +
                         " ms): " + memcached_last_error_message(memc->get()));
  }
  if (!probe.found) {
    return Status::error("remote cache: memcached at " + remote_server_name(server) +
                         " did not report item_size_max in \"stats settings\"");
  }
  if (item_bytes > probe.item_size_max) {
    const uint64_t mib = (item_bytes + (1u << 20) - 1) >> 20;
    return Status::error("remote cache: memcached at " + remote_server_name(server) +
                         " stores items of at most " + std::to_string(probe.item_size_max) +
                         " bytes (item_size_max); a block record needs " +
                         std::to_string(item_bytes) + " bytes (" + std::to_string(value_bytes) +
                         " of value, key and item header): start memcached with -I " +
                         std::to_string(mib) + "m or larger");
  }
  return Status::ok_status();
}

namespace {

bool parse_port(const std::string& text, uint16_t* port) {
  if (text.empty() || text.size() > 5) return false;
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0 || v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

Result<std::vector<RemoteServer>> parse_remote_cache_url(const std::string& url) {
  const std::string scheme = "memcached://";
  const auto fail = [&](const std::string& why) {
    return Status::error("remote cache URL '" + url + "': " + why +
                         " (expected memcached://HOST:PORT[,HOST:PORT...])");
  };
  if (url.compare(0, scheme.size(), scheme) != 0) return fail("the scheme must be memcached://");
  const std::string list = url.substr(scheme.size());
  if (list.empty()) return fail("no servers");
  std::vector<RemoteServer> servers;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string part = list.substr(start, end - start);
    start = end + 1;
    if (part.empty()) return fail("an empty server entry");
    RemoteServer server;
    std::string port_text;
    if (part[0] == '[') {  // [IPv6]:PORT
      const size_t close = part.find(']');
      if (close == std::string::npos) return fail("'" + part + "': unclosed '['");
      server.host = part.substr(1, close - 1);
      if (close + 1 >= part.size() || part[close + 1] != ':') {
        return fail("'" + part + "': missing :PORT");
      }
      port_text = part.substr(close + 2);
    } else {
      const size_t colon = part.rfind(':');
      if (colon == std::string::npos) return fail("'" + part + "': missing :PORT");
      server.host = part.substr(0, colon);
      if (server.host.find(':') != std::string::npos) {
        return fail("'" + part + "': write an IPv6 address as [ADDRESS]:PORT");
      }
      port_text = part.substr(colon + 1);
    }
    if (server.host.empty()) return fail("'" + part + "': empty host");
    if (server.host.find_first_of("/?#@ ") != std::string::npos) {
      return fail("'" + part + "': a host may not contain '/', '?', '#', '@' or spaces");
    }
    if (!parse_port(port_text, &server.port)) {
      return fail("'" + part + "': the port must be a number from 1 to 65535");
    }
    for (const RemoteServer& other : servers) {
      if (other.host == server.host && other.port == server.port) {
        return fail("'" + part + "' is listed twice");
      }
    }
    servers.push_back(std::move(server));
    if (end == list.size()) break;
  }
  return servers;
}

RemoteServerRing::RemoteServerRing(std::vector<RemoteServer> servers, int32_t failure_limit,
                                   int32_t timeout_limit, std::chrono::milliseconds retry_interval)
    : servers_(std::move(servers)),
      failure_limit_(failure_limit),
      timeout_limit_(timeout_limit),
      retry_interval_(retry_interval),
      down_until_(servers_.size(), Clock::time_point{}),
      failures_(servers_.size(), 0),
      timeouts_(servers_.size(), 0),
      probation_(servers_.size(), false),
      reasons_(servers_.size()) {}

int64_t RemoteServerRing::index_of(const std::string& host, uint16_t port) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].host == host && servers_[i].port == port) return static_cast<int64_t>(i);
  }
  return -1;
}

void RemoteServerRing::eject_locked(size_t i, std::string reason) {
  down_until_[i] = Clock::now() + retry_interval_;
  reasons_[i] = std::move(reason);
  ++ejections_;
  ++generation_;
}

void RemoteServerRing::rejoin_due_locked(Clock::time_point now) {
  for (size_t i = 0; i < down_until_.size(); ++i) {
    if (down_until_[i] != Clock::time_point{} && down_until_[i] <= now) {
      down_until_[i] = Clock::time_point{};
      failures_[i] = 0;
      // Out for timeouts (or silent at open): one more timeout takes it out again.
      probation_[i] = timeouts_[i] > 0 || probation_[i];
      timeouts_[i] = 0;
      reasons_[i].clear();
      ++generation_;
    }
  }
}

void RemoteServerRing::mark_down(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  probation_.at(i) = true;
  eject_locked(i, "did not answer at open");
}

uint64_t RemoteServerRing::current(std::vector<RemoteServer>* servers) {
  std::lock_guard<std::mutex> lock(mu_);
  rejoin_due_locked(Clock::now());
  if (servers != nullptr) {
    servers->clear();
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (down_until_[i] == Clock::time_point{}) servers->push_back(servers_[i]);
    }
    if (servers->empty()) *servers = servers_;
  }
  return generation_;
}

void RemoteServerRing::note_connection_failure(const std::string& host, uint16_t port) {
  const int64_t at = index_of(host, port);
  if (at < 0) return;
  const auto i = static_cast<size_t>(at);
  std::lock_guard<std::mutex> lock(mu_);
  if (down_until_[i] != Clock::time_point{}) return;  // already out
  if (++failures_[i] >= failure_limit_) {
    eject_locked(i, "refused " + std::to_string(failures_[i]) + " connect" +
                        (failures_[i] == 1 ? "" : "s"));
  }
}

void RemoteServerRing::note_timeout(const std::string& host, uint16_t port) {
  const int64_t at = index_of(host, port);
  if (at < 0) return;
  const auto i = static_cast<size_t>(at);
  std::lock_guard<std::mutex> lock(mu_);
  if (down_until_[i] != Clock::time_point{}) return;  // already out
  ++timeouts_[i];
  if (probation_[i] || timeouts_[i] >= timeout_limit_) {
    eject_locked(i, probation_[i] ? "timed out again after joining"
                                  : "timed out " + std::to_string(timeouts_[i]) +
                                        " operations in a row");
  }
}

void RemoteServerRing::note_answer(const std::string& host, uint16_t port) {
  const int64_t at = index_of(host, port);
  if (at < 0) return;
  const auto i = static_cast<size_t>(at);
  std::lock_guard<std::mutex> lock(mu_);
  if (down_until_[i] != Clock::time_point{}) return;
  timeouts_[i] = 0;
  probation_[i] = false;
}

int32_t RemoteServerRing::servers_in_ring() {
  std::lock_guard<std::mutex> lock(mu_);
  rejoin_due_locked(Clock::now());
  int32_t n = 0;
  for (const Clock::time_point& t : down_until_) n += t == Clock::time_point{} ? 1 : 0;
  return n;
}

uint64_t RemoteServerRing::ejections() {
  std::lock_guard<std::mutex> lock(mu_);
  return ejections_;
}

std::vector<RemoteServerState> RemoteServerRing::states() {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  rejoin_due_locked(now);
  std::vector<RemoteServerState> out(servers_.size());
  for (size_t i = 0; i < servers_.size(); ++i) {
    out[i].server = servers_[i];
    out[i].in_ring = down_until_[i] == Clock::time_point{};
    out[i].back_in_ms =
        out[i].in_ring ? 0
                       : std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  down_until_[i] - now)
                                                  .count());
    out[i].reason = reasons_[i];
    out[i].timeouts_in_a_row = timeouts_[i];
  }
  return out;
}

}  // namespace prefixd
