// RemoteTier on libmemcached: a pool of handles for readers, one writer
// thread with its own handle behind a byte-bounded queue. Timeouts are the
// library's; which servers form the ketama ring is the tier's, one view for
// every handle (a server that refuses connections leaves it, then is retried).
#include "storage/remote_tier.h"

#include <libmemcached/memcached.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "storage/record_mac.h"

namespace prefixd {
namespace {

constexpr char kKeyPrefix[] = "pfxd1:";
constexpr size_t kKeyBytes = sizeof(kKeyPrefix) - 1 + 48;  // prefix + 3 x 16 hex digits
// memcached stores key + value + an item header (about 50 bytes with CAS) in
// one item of at most item_size_max bytes.
constexpr uint64_t kItemHeaderBytes = 64;
// Readers take a handle each; more concurrent get_chain() calls wait.
constexpr size_t kMaxReaderHandles = 16;
// Keys this process recently stored or read: put_async() skips them.
constexpr size_t kRecentKeys = 64 * 1024;

std::string server_name(const RemoteServer& s) {
  const bool v6 = s.host.find(':') != std::string::npos;
  return (v6 ? "[" + s.host + "]" : s.host) + ":" + std::to_string(s.port);
}

struct MemcachedDeleter {
  void operator()(memcached_st* m) const { memcached_free(m); }
};
using MemcachedPtr = std::unique_ptr<memcached_st, MemcachedDeleter>;

struct ResultDeleter {
  void operator()(memcached_result_st* r) const { memcached_result_free(r); }
};
using ResultPtr = std::unique_ptr<memcached_result_st, ResultDeleter>;

// A timed-out operation: libmemcached's own poll timeout, or a socket
// timeout (SO_SNDTIMEO / SO_RCVTIMEO, connect) reported through errno.
bool is_timeout(memcached_st* memc, memcached_return_t rc) {
  if (rc == MEMCACHED_TIMEOUT) return true;
  if (rc != MEMCACHED_ERRNO || memc == nullptr) return false;
  const int e = memcached_last_error_errno(memc);
  return e == ETIMEDOUT || e == EAGAIN || e == EWOULDBLOCK || e == EINPROGRESS;
}

// Applies the tier's behaviours to a handle (before servers are added).
Status configure(memcached_st* memc, const RemoteTierOptions& o) {
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

Result<MemcachedPtr> make_handle(const RemoteTierOptions& o,
                                 std::span<const RemoteServer> servers) {
  MemcachedPtr memc(memcached_create(nullptr));
  if (!memc) return Status::error("remote cache: memcached_create failed (out of memory)");
  Status s = configure(memc.get(), o);
  if (!s.ok()) return s;
  for (const RemoteServer& server : servers) {
    const memcached_return_t rc =
        memcached_server_add(memc.get(), server.host.c_str(), server.port);
    if (memcached_failed(rc)) {
      return Status::error("remote cache: cannot add memcached server " + server_name(server) +
                           ": " + memcached_strerror(memc.get(), rc));
    }
  }
  return memc;
}

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

// Asks one server for "stats settings" and checks that a value fits.
// *unreachable tells a server that did not answer from one that answered no.
Status check_server(const RemoteTierOptions& o, const RemoteServer& server, bool* unreachable) {
  *unreachable = false;
  auto memc = make_handle(o, std::span<const RemoteServer>(&server, 1));
  if (!memc.ok()) return memc.status();
  SettingsProbe probe;
  const memcached_return_t rc =
      memcached_stat_execute(memc->get(), "settings", read_setting, &probe);
  if (memcached_failed(rc)) {
    *unreachable = true;
    return Status::error("remote cache: memcached at " + server_name(server) +
                         " does not answer (timeout " + std::to_string(o.timeout.count()) +
                         " ms): " + memcached_last_error_message(memc->get()));
  }
  if (!probe.found) {
    return Status::error("remote cache: memcached at " + server_name(server) +
                         " did not report item_size_max in \"stats settings\"");
  }
  const uint64_t value_bytes = o.record_bytes + RecordMac::kTrailerBytes;
  const uint64_t item_bytes = value_bytes + kKeyBytes + kItemHeaderBytes;
  if (item_bytes > probe.item_size_max) {
    const uint64_t mib = (item_bytes + (1u << 20) - 1) >> 20;
    return Status::error("remote cache: memcached at " + server_name(server) +
                         " stores items of at most " + std::to_string(probe.item_size_max) +
                         " bytes (item_size_max); a block record needs " +
                         std::to_string(item_bytes) + " bytes (" + std::to_string(value_bytes) +
                         " of value, key and item header): start memcached with -I " +
                         std::to_string(mib) + "m or larger");
  }
  return Status::ok_status();
}

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

std::string RemoteTier::memcached_key(const BlockKey& key) {
  char buf[kKeyBytes + 1];
  std::snprintf(buf, sizeof(buf), "%s%016llx%016llx%016llx", kKeyPrefix,
                static_cast<unsigned long long>(key.namespace_seed),
                static_cast<unsigned long long>(key.block_hash.hi),
                static_cast<unsigned long long>(key.block_hash.lo));
  return std::string(buf, kKeyBytes);
}

namespace {

// A connection failure (not a timeout: a server that accepts and then
// stalls stays in the ring, each operation waiting the timeout).
bool is_connection_failure(memcached_st* memc, memcached_return_t rc) {
  switch (rc) {
    case MEMCACHED_CONNECTION_FAILURE:
    case MEMCACHED_CONNECTION_SOCKET_CREATE_FAILURE:
    case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
    case MEMCACHED_SERVER_MARKED_DEAD:
    case MEMCACHED_UNKNOWN_READ_FAILURE:
    case MEMCACHED_READ_FAILURE:
    case MEMCACHED_WRITE_FAILURE:
    case MEMCACHED_ERRNO:
      return !is_timeout(memc, rc);
    default:
      return false;
  }
}

}  // namespace

struct RemoteTier::Impl {
  RemoteTierOptions options;
  std::unique_ptr<RecordMac> mac;

  // The ring every handle uses: the servers not marked down. A server that
  // fails failure_limit connects in a row is marked down for retry_interval
  // (its keys move to the others in every handle of this process at once),
  // then joins again; `ring` counts changes, and a handle built for an older
  // ring is rebuilt before its next operation.
  using Clock = std::chrono::steady_clock;
  std::mutex ring_mu;
  std::vector<Clock::time_point> down_until;  // per options.servers; {} = in the ring
  std::vector<int32_t> failures;             // connects failed since it joined
  uint64_t ring = 1;

  struct Handle {
    MemcachedPtr memc;
    uint64_t ring = 0;  // the ring its server list came from
  };
  // Reader handles: idle ones in `idle_handles`; `n_handles` made so far.
  std::mutex handles_mu;
  std::condition_variable handle_freed;
  std::vector<Handle> idle_handles;
  size_t n_handles = 0;

  mutable std::mutex stats_mu;
  RemoteTierStats stats;

  // Write queue (writer thread owns `writer_handle`).
  struct PendingWrite {
    BlockKey key;
    RecordPtr record;
    uint64_t n_bytes = 0;  // value bytes: record + MAC trailer
  };
  std::mutex queue_mu;  // guards the members below, down to `stopping`
  std::condition_variable queue_changed;
  std::condition_variable queue_idle;
  std::deque<PendingWrite> queue;
  std::unordered_set<BlockKey, BlockKeyHasher> queued_keys;
  std::deque<BlockKey> recent_order;  // FIFO of recent_keys, oldest first
  std::unordered_set<BlockKey, BlockKeyHasher> recent_keys;
  uint64_t pending_bytes = 0;
  bool writing = false;
  bool stopping = false;
  bool drop_rest = false;  // the last write timed out: when stopping, drop the queue
  bool has_deadline = false;  // begin_shutdown(): from `deadline` on, drop the queue
  std::chrono::steady_clock::time_point deadline{};
  Handle writer_handle;
  std::thread writer;
  std::atomic<pid_t> writer_tid{0};

  // The current ring's generation; servers whose time out of it is over join
  // again first. *servers (optional): its servers (all when every one is down,
  // so that operations keep trying).
  uint64_t current_ring(std::vector<RemoteServer>* servers);
  // Marks the server of a connection failure on `memc` (its last disconnect)
  // down once it has failed failure_limit times.
  void note_failure(memcached_st* memc, memcached_return_t rc);
  // Rebuilds the handle when the ring changed since it was made (memc null
  // when out of memory: the caller treats it as a failed operation).
  void refresh(Handle& h);
  Handle acquire_handle();
  void release_handle(Handle handle);
  void note_recent_locked(const BlockKey& key);
  void count_failure(memcached_st* memc, memcached_return_t rc);
  void writer_loop();
  memcached_return_t store(memcached_st* memc, const std::string& key,
                           std::span<const uint8_t> record);
};

uint64_t RemoteTier::Impl::current_ring(std::vector<RemoteServer>* servers) {
  std::lock_guard<std::mutex> lock(ring_mu);
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < down_until.size(); ++i) {
    if (down_until[i] != Clock::time_point{} && down_until[i] <= now) {
      down_until[i] = Clock::time_point{};
      failures[i] = 0;
      ++ring;
    }
  }
  if (servers != nullptr) {
    servers->clear();
    for (size_t i = 0; i < options.servers.size(); ++i) {
      if (down_until[i] == Clock::time_point{}) servers->push_back(options.servers[i]);
    }
    if (servers->empty()) *servers = options.servers;
  }
  return ring;
}

void RemoteTier::Impl::note_failure(memcached_st* memc, memcached_return_t rc) {
  if (memc == nullptr || !is_connection_failure(memc, rc)) return;
  const memcached_instance_st* server = memcached_server_get_last_disconnect(memc);
  if (server == nullptr) return;
  const std::string host = memcached_server_name(server);
  const auto port = static_cast<uint16_t>(memcached_server_port(server));
  std::lock_guard<std::mutex> lock(ring_mu);
  for (size_t i = 0; i < options.servers.size(); ++i) {
    if (options.servers[i].host != host || options.servers[i].port != port) continue;
    if (down_until[i] != Clock::time_point{}) return;  // already out
    if (++failures[i] >= options.failure_limit) {
      down_until[i] = Clock::now() + options.retry_interval;
      ++ring;
    }
    return;
  }
}

void RemoteTier::Impl::refresh(Handle& h) {
  std::vector<RemoteServer> servers;
  const uint64_t r = current_ring(&servers);
  if (h.memc && h.ring == r) return;
  auto made = make_handle(options, servers);
  h.memc = made.ok() ? std::move(made).value() : nullptr;
  h.ring = r;
}

RemoteTier::Impl::Handle RemoteTier::Impl::acquire_handle() {
  Handle h;
  {
    std::unique_lock<std::mutex> lock(handles_mu);
    handle_freed.wait(lock, [&] { return !idle_handles.empty() || n_handles < kMaxReaderHandles; });
    if (!idle_handles.empty()) {
      h = std::move(idle_handles.back());
      idle_handles.pop_back();
    } else {
      ++n_handles;
    }
  }
  refresh(h);
  return h;
}

void RemoteTier::Impl::release_handle(Handle handle) {
  {
    std::lock_guard<std::mutex> lock(handles_mu);
    idle_handles.push_back(std::move(handle));
  }
  handle_freed.notify_one();
}

void RemoteTier::Impl::note_recent_locked(const BlockKey& key) {
  if (!recent_keys.insert(key).second) return;
  recent_order.push_back(key);
  if (recent_order.size() > kRecentKeys) {
    recent_keys.erase(recent_order.front());
    recent_order.pop_front();
  }
}

void RemoteTier::Impl::count_failure(memcached_st* memc, memcached_return_t rc) {
  const bool timed_out = is_timeout(memc, rc);
  std::lock_guard<std::mutex> lock(stats_mu);
  ++stats.errors;
  if (timed_out) ++stats.timeouts;
}

memcached_return_t RemoteTier::Impl::store(memcached_st* memc, const std::string& key,
                                           std::span<const uint8_t> record) {
  const RecordMac::Trailer trailer = mac->sign(record);
  std::vector<uint8_t> value(record.size() + trailer.size());
  std::memcpy(value.data(), record.data(), record.size());
  std::memcpy(value.data() + record.size(), trailer.data(), trailer.size());
  return memcached_set(memc, key.data(), key.size(), reinterpret_cast<const char*>(value.data()),
                       value.size(), /*expiration=*/0, /*flags=*/0);
}

void RemoteTier::Impl::writer_loop() {
  // Writes run only on otherwise idle CPU time, as the disk tier's do
  // (TierManager): sealing and sending 46 MB per 2000-token prompt must not
  // slow the next prefill down. Under constant load the queue fills and
  // writes are dropped (counted). Best effort: a refusal is harmless.
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  sched_param param{};
  if (sched_setscheduler(tid, SCHED_IDLE, &param) != 0) {
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
  }
  writer_tid.store(tid);
  std::unique_lock<std::mutex> lock(queue_mu);
  while (true) {
    queue_changed.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;  // stopping, and drained
    const bool past_deadline = has_deadline && std::chrono::steady_clock::now() >= deadline;
    if ((stopping && drop_rest) || past_deadline) {
      // Shutting down behind a server that times out (one timeout per queued
      // write could hold the exit for minutes), or past the shutdown's flush
      // bound: the rest is dropped (counted).
      {
        std::lock_guard<std::mutex> stats_lock(stats_mu);
        stats.writes_dropped += queue.size();
      }
      queue.clear();
      queued_keys.clear();
      pending_bytes = 0;
      queue_idle.notify_all();
      if (stopping) return;
      continue;  // past the deadline, not yet stopping: later writes are dropped too
    }
    PendingWrite w = std::move(queue.front());
    queue.pop_front();
    writing = true;
    lock.unlock();

    memcached_return_t rc = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    refresh(writer_handle);
    const std::string name = memcached_key(w.key);
    if (writer_handle.memc) {
      rc = store(writer_handle.memc.get(), name, w.record->bytes());
      // Refused (the server is down): once more, on the ring without it
      // when that made it leave.
      if (memcached_failed(rc) && !is_timeout(writer_handle.memc.get(), rc)) {
        count_failure(writer_handle.memc.get(), rc);
        note_failure(writer_handle.memc.get(), rc);
        refresh(writer_handle);
        if (writer_handle.memc) rc = store(writer_handle.memc.get(), name, w.record->bytes());
      }
    }
    memcached_st* const memc = writer_handle.memc.get();
    if (memcached_success(rc)) {
      std::lock_guard<std::mutex> stats_lock(stats_mu);
      ++stats.writes;
      stats.written_bytes += w.n_bytes;
    } else {
      count_failure(memc, rc);
      note_failure(memc, rc);
    }
    const bool timed_out = !memcached_success(rc) && is_timeout(memc, rc);

    lock.lock();
    drop_rest = timed_out;
    queued_keys.erase(w.key);
    pending_bytes -= w.n_bytes;
    if (memcached_success(rc)) note_recent_locked(w.key);
    writing = false;
    if (queue.empty()) queue_idle.notify_all();
  }
}

Result<std::unique_ptr<RemoteTier>> RemoteTier::open(const RemoteTierOptions& options) {
  if (options.servers.empty()) return Status::error("remote cache: no memcached servers given");
  if (options.record_bytes == 0) return Status::error("remote cache: record_bytes is 0");
  if (options.timeout.count() <= 0) {
    return Status::error("remote cache: the timeout must be positive (got " +
                         std::to_string(options.timeout.count()) + " ms)");
  }
  if (options.failure_limit < 1) {
    return Status::error("remote cache: failure_limit must be at least 1 (got " +
                         std::to_string(options.failure_limit) + ")");
  }
  if (options.retry_interval.count() <= 0) {
    return Status::error("remote cache: retry_interval must be positive (got " +
                         std::to_string(options.retry_interval.count()) + " ms)");
  }
  if (options.allocator.alloc == nullptr || options.allocator.free == nullptr) {
    return Status::error("remote cache: the host allocator has no alloc or free function");
  }
  // A server that does not answer now starts out of the ring (tried again
  // every retry_interval) as long as another one answers, so that a replica
  // starts while one cache server is down; its item size is then unchecked
  // (a set it refuses is counted as an error).
  std::vector<std::string> unanswered;
  std::vector<size_t> unanswered_index;
  for (size_t i = 0; i < options.servers.size(); ++i) {
    bool unreachable = false;
    Status s = check_server(options, options.servers[i], &unreachable);
    if (!s.ok() && !unreachable) return s;
    if (!s.ok()) {
      unanswered.push_back(s.message());
      unanswered_index.push_back(i);
    }
  }
  if (unanswered.size() == options.servers.size()) {
    return Status::error(unanswered.size() == 1 ? unanswered.front()
                                                : "remote cache: no memcached server answers; " +
                                                      unanswered.front());
  }
  for (const std::string& line : unanswered) {
    if (options.log_warning) options.log_warning(line + "; starting without it until it answers");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->mac = std::make_unique<RecordMac>(options.deployment_secret);
  impl->down_until.assign(options.servers.size(), RemoteTier::Impl::Clock::time_point{});
  impl->failures.assign(options.servers.size(), 0);
  for (size_t i : unanswered_index) impl->down_until[i] = RemoteTier::Impl::Clock::now() + options.retry_interval;
  auto first = make_handle(options, options.servers);  // checks every server can be added
  if (!first.ok()) return first.status();
  impl->refresh(impl->writer_handle);
  if (!impl->writer_handle.memc) return Status::error("remote cache: memcached_create failed (out of memory)");
  impl->stats.servers = static_cast<int32_t>(options.servers.size());
  Impl* raw = impl.get();
  impl->writer = std::thread([raw] { raw->writer_loop(); });
  return std::unique_ptr<RemoteTier>(new RemoteTier(std::move(impl)));
}

RemoteTier::RemoteTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

bool RemoteTier::begin_shutdown(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(impl_->queue_mu);
    impl_->has_deadline = true;
    impl_->deadline = deadline;
  }
  impl_->queue_changed.notify_all();
  const pid_t tid = impl_->writer_tid.load();
  if (tid == 0) return false;
  // Leaving SCHED_IDLE (or nice 19) needs CAP_SYS_NICE or an RLIMIT_NICE of 20.
  sched_param param{};
  return sched_setscheduler(tid, SCHED_OTHER, &param) == 0 &&
         setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 0) == 0;
}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard<std::mutex> lock(impl_->queue_mu);
    impl_->stopping = true;
  }
  impl_->queue_changed.notify_all();
  if (impl_->writer.joinable()) impl_->writer.join();
}

std::vector<RecordPtr> RemoteTier::get_chain(std::span<const BlockKey> keys,
                                             std::span<const RecordExpectations> expected) {
  PREFIXD_CHECK(keys.size() == expected.size(), "get_chain: keys and expected differ in length");
  std::vector<RecordPtr> out;
  if (keys.empty()) return out;
  Impl& d = *impl_;

  std::vector<std::string> names(keys.size());
  std::vector<const char*> name_ptrs(keys.size());
  std::vector<size_t> name_lengths(keys.size());
  std::unordered_map<std::string, size_t> index_of;
  for (size_t i = 0; i < keys.size(); ++i) {
    names[i] = memcached_key(keys[i]);
    name_ptrs[i] = names[i].data();
    name_lengths[i] = names[i].size();
    index_of.emplace(names[i], i);  // a repeated key keeps its first position
  }

  RemoteTier::Impl::Handle handle = d.acquire_handle();
  if (!handle.memc) {
    d.count_failure(nullptr, MEMCACHED_MEMORY_ALLOCATION_FAILURE);
    d.release_handle(std::move(handle));
    std::lock_guard<std::mutex> lock(d.stats_mu);
    d.stats.misses += keys.size();
    return out;
  }
  // One multi-get: libmemcached writes each server's keys, then reads the
  // answers as they come; keys on a server that is down are simply not
  // answered. Handles replaced during the call stay alive until the end: the
  // values they fetched point back to them.
  std::vector<MemcachedPtr> retired;
  std::vector<ResultPtr> values(keys.size());
  uint64_t received_bytes = 0;
  // Asks for the keys from `first` on that have no value yet. Returns the
  // failure seen (MEMCACHED_SUCCESS when none).
  auto multi_get = [&](size_t first) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lengths;
    for (size_t i = first; i < keys.size(); ++i) {
      if (values[i]) continue;
      ptrs.push_back(name_ptrs[i]);
      lengths.push_back(name_lengths[i]);
    }
    memcached_return_t rc = memcached_mget(handle.memc.get(), ptrs.data(), lengths.data(), ptrs.size());
    bool failed = memcached_failed(rc) && rc != MEMCACHED_NOTFOUND;
    // Fetched even when mget failed: its status is that of the last server it
    // connected to, and the keys sent to the others are answered. With nothing
    // sent, the first fetch returns at once. Each answer needs a live server,
    // so the loop ends; the bound only guards against a misbehaving library.
    const size_t max_fetches = ptrs.size() * 2 + 16;
    for (size_t n = 0; n < max_fetches; ++n) {
      memcached_return_t fetch_rc = MEMCACHED_SUCCESS;
      ResultPtr r(memcached_fetch_result(handle.memc.get(), nullptr, &fetch_rc));
      if (!r) {
        if (fetch_rc != MEMCACHED_END && fetch_rc != MEMCACHED_NOTFOUND) failed = true;
        break;
      }
      received_bytes += memcached_result_length(r.get());
      auto it = index_of.find(
          std::string(memcached_result_key_value(r.get()), memcached_result_key_length(r.get())));
      if (it != index_of.end() && !values[it->second]) values[it->second] = std::move(r);
    }
    // Errors recorded on the handle during this query (a server refused the
    // connection, timed out, was skipped as dead) even when others answered.
    const memcached_return_t last = memcached_last_error(handle.memc.get());
    if (memcached_failed(last) && last != MEMCACHED_NOTFOUND) {
      failed = true;
      rc = last;
    }
    return failed ? (memcached_failed(rc) ? rc : MEMCACHED_FAILURE) : MEMCACHED_SUCCESS;
  };
  memcached_return_t rc = multi_get(0);
  if (memcached_failed(rc)) {
    d.count_failure(handle.memc.get(), rc);
    // A server that refused the connection is out of the ring now (after
    // failure_limit refusals), or it is one that joined again after
    // retry_interval: ask once more for what is missing, on the ring without
    // it, where the blocks recomputed since it died were written. A timeout
    // is not asked again (it would wait once more).
    if (!is_timeout(handle.memc.get(), rc)) {
      d.note_failure(handle.memc.get(), rc);
      retired.push_back(std::move(handle.memc));
      d.refresh(handle);
      size_t first_missing = 0;
      while (first_missing < keys.size() && values[first_missing]) ++first_missing;
      if (handle.memc && first_missing < keys.size()) {
        memcached_return_t again = multi_get(first_missing);
        if (memcached_failed(again)) {
          d.count_failure(handle.memc.get(), again);
          d.note_failure(handle.memc.get(), again);
        }
      }
    }
  }

  // Walk the chain in order: MAC, then the record against its expectations.
  std::vector<size_t> bad;  // indices of values to delete from the pool
  uint64_t n_unauthenticated = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!values[i]) break;
    const auto* value = reinterpret_cast<const uint8_t*>(memcached_result_value(values[i].get()));
    const size_t value_bytes = memcached_result_length(values[i].get());
    if (value_bytes <= RecordMac::kTrailerBytes) {  // too short for a trailer: a forgery
      bad.push_back(i);
      ++n_unauthenticated;
      break;
    }
    const size_t record_bytes = value_bytes - RecordMac::kTrailerBytes;
    const std::span<const uint8_t> record_span(value, record_bytes);
    if (!d.mac->verify(record_span, std::span<const uint8_t, RecordMac::kTrailerBytes>(
                                        value + record_bytes, RecordMac::kTrailerBytes))) {
      bad.push_back(i);
      ++n_unauthenticated;
      break;
    }
    BlockRecordView view;
    RecordCheck check = check_block_record(value, record_bytes, expected[i], &view);
    if (check == RecordCheck::kOk && (view.info.namespace_seed != keys[i].namespace_seed ||
                                      view.info.block_hash != keys[i].block_hash)) {
      check = RecordCheck::kBlockHash;
    }
    if (check != RecordCheck::kOk) {
      bad.push_back(i);
      break;
    }
    std::shared_ptr<RecordBuffer> record =
        RecordBuffer::allocate(record_bytes, d.options.allocator);
    if (!record) break;  // out of host memory: a miss, nothing wrong with the value
    std::memcpy(record->mutable_data(), value, record_bytes);
    out.push_back(std::move(record));
    values[i].reset();
  }
  values.clear();

  for (size_t i : bad) {
    if (!handle.memc) break;
    const memcached_return_t del_rc =
        memcached_delete(handle.memc.get(), names[i].data(), names[i].size(), 0);
    if (memcached_failed(del_rc) && del_rc != MEMCACHED_NOTFOUND) {
      d.count_failure(handle.memc.get(), del_rc);
    }
  }
  d.release_handle(std::move(handle));

  {
    std::lock_guard<std::mutex> lock(d.queue_mu);
    for (size_t i = 0; i < out.size(); ++i) d.note_recent_locked(keys[i]);
    // The rest is not in the pool (lost with a server, evicted, never
    // written): forget that this process stored it, so that the blocks the
    // caller now recomputes are written again. (A stale FIFO entry at most
    // makes a later write go out twice.)
    for (size_t i = out.size(); i < keys.size(); ++i) d.recent_keys.erase(keys[i]);
  }
  std::lock_guard<std::mutex> lock(d.stats_mu);
  d.stats.hits += out.size();
  d.stats.misses += keys.size() - out.size();
  d.stats.read_bytes += received_bytes;
  d.stats.corrupt_records += bad.size();
  d.stats.unauthenticated_records += n_unauthenticated;
  return out;
}

void RemoteTier::put_async(const BlockKey& key, RecordPtr record) {
  if (!record) return;
  Impl& d = *impl_;
  const uint64_t n_bytes = record->size() + RecordMac::kTrailerBytes;
  {
    std::lock_guard<std::mutex> lock(d.queue_mu);
    if (d.stopping) return;
    if (d.queued_keys.count(key) != 0 || d.recent_keys.count(key) != 0) return;
    if (d.pending_bytes + n_bytes > d.options.max_pending_write_bytes) {
      std::lock_guard<std::mutex> stats_lock(d.stats_mu);
      ++d.stats.writes_dropped;
      return;
    }
    d.queue.push_back(Impl::PendingWrite{key, std::move(record), n_bytes});
    d.queued_keys.insert(key);
    d.pending_bytes += n_bytes;
  }
  d.queue_changed.notify_one();
}

void RemoteTier::wait_idle() {
  Impl& d = *impl_;
  std::unique_lock<std::mutex> lock(d.queue_mu);
  d.queue_idle.wait(lock, [&] { return d.queue.empty() && !d.writing; });
}

RemoteTierStats RemoteTier::stats() const {
  Impl& d = *impl_;
  uint64_t pending = 0;
  {
    std::lock_guard<std::mutex> lock(d.queue_mu);
    pending = d.pending_bytes;
  }
  std::lock_guard<std::mutex> lock(d.stats_mu);
  RemoteTierStats s = d.stats;
  s.pending_write_bytes = pending;
  return s;
}

Status RemoteTier::debug_set_value(const BlockKey& key, std::span<const uint8_t> value) {
  Impl& d = *impl_;
  RemoteTier::Impl::Handle handle = d.acquire_handle();
  if (!handle.memc) {
    d.release_handle(std::move(handle));
    return Status::error("remote cache: memcached_create failed (out of memory)");
  }
  const std::string name = memcached_key(key);
  const memcached_return_t rc =
      memcached_set(handle.memc.get(), name.data(), name.size(),
                    reinterpret_cast<const char*>(value.data()), value.size(), 0, 0);
  Status s = memcached_success(rc) ? Status::ok_status()
                                   : Status::error("remote cache: set " + name + ": " +
                                                   memcached_last_error_message(handle.memc.get()));
  d.release_handle(std::move(handle));
  return s;
}

}  // namespace prefixd
