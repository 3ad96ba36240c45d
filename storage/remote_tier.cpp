// RemoteTier on libmemcached: a pool of handles for readers, one writer
// thread with its own handle behind a byte-bounded queue. Timeouts are the
// library's; which servers form the ketama ring is the tier's, one view for
// every handle (a server that refuses connections leaves it, then is retried).
#include "storage/remote_tier.h"

#include <libmemcached/memcached.h>
#include <openssl/evp.h>
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
#include "storage/signed_record.h"

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

MemcachedSettings memcached_settings(const RemoteTierOptions& o) {
  return MemcachedSettings{o.timeout, o.retry_interval};
}

}  // namespace

std::string RemoteTier::memcached_key(const BlockKey& key, uint64_t generation) {
  char buf[kKeyBytes + 1];
  std::snprintf(buf, sizeof(buf), "%s%016llx%016llx%016llx", kKeyPrefix,
                static_cast<unsigned long long>(key.namespace_seed),
                static_cast<unsigned long long>(key.block_hash.hi),
                static_cast<unsigned long long>(key.block_hash.lo));
  std::string name(buf, kKeyBytes);
  if (generation != 0) {
    // Generation 0 keeps the keys of replicas that predate generations.
    std::snprintf(buf, sizeof(buf), ":%llx", static_cast<unsigned long long>(generation));
    name += buf;
  }
  return name;
}

std::string RemoteTier::generation_key(const std::array<uint8_t, 16>& secret,
                                       const Hash128& pool_namespace) {
  uint8_t message[16];
  for (int i = 0; i < 8; ++i) {
    message[i] = static_cast<uint8_t>(pool_namespace.hi >> (56 - 8 * i));
    message[8 + i] = static_cast<uint8_t>(pool_namespace.lo >> (56 - 8 * i));
  }
  uint8_t mac[32];
  size_t mac_bytes = 0;
  const bool ok = EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(),
                            secret.size(), message, sizeof(message), mac, sizeof(mac),
                            &mac_bytes) != nullptr;
  PREFIXD_CHECK(ok && mac_bytes == sizeof(mac), "OpenSSL HMAC-SHA256 failed");
  std::string name = "pfxd1:gen:";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof(hex), "%02x", mac[i]);
    name += hex;
  }
  return name;
}

namespace {

// The memcached keys of one get_chain() call and the values fetched for them.
struct ChainFetch {
  ChainFetch(std::span<const BlockKey> keys, uint64_t generation)
      : names(keys.size()), values(keys.size()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      names[i] = RemoteTier::memcached_key(keys[i], generation);
      index_of.emplace(names[i], i);  // a repeated key keeps its first position
    }
  }
  std::vector<std::string> names;                   // [n keys]
  std::unordered_map<std::string, size_t> index_of;  // name -> first position
  // Handles replaced during the call stay alive until the values they
  // fetched are freed (a value points back to its handle): `retired` is
  // declared before `values` so that it is destroyed after them.
  std::vector<MemcachedPtr> retired;
  std::vector<ResultPtr> values;  // [n keys]; null: not received
  uint64_t received_bytes = 0;
  // The servers (of the last multi_get's handle) that were asked for keys,
  // and those that answered at least one (RemoteServerRing's timeout count).
  std::unordered_set<const memcached_instance_st*> asked;
  std::unordered_set<const memcached_instance_st*> answered;

  // Asks for the keys from `first` on that have no value yet. Returns the
  // failure seen (MEMCACHED_SUCCESS when none).
  memcached_return_t multi_get(memcached_st* memc, size_t first);
  size_t first_missing() const {
    size_t i = 0;
    while (i < values.size() && values[i]) ++i;
    return i;
  }
};

// What verify_chain() kept and refused.
struct ChainRead {
  std::vector<RecordPtr> records;  // the leading records that passed every check
  std::vector<size_t> bad;         // positions of values that failed (to delete)
  uint64_t n_unauthenticated = 0;  // of those, the ones whose MAC did not verify
};

memcached_return_t ChainFetch::multi_get(memcached_st* memc, size_t first) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lengths;
  asked.clear();
  answered.clear();
  for (size_t i = first; i < names.size(); ++i) {
    if (values[i]) continue;
    ptrs.push_back(names[i].data());
    lengths.push_back(names[i].size());
    memcached_return_t by_key_rc = MEMCACHED_SUCCESS;
    const memcached_instance_st* server =
        memcached_server_by_key(memc, names[i].data(), names[i].size(), &by_key_rc);
    if (server != nullptr) asked.insert(server);
  }
  memcached_return_t rc = memcached_mget(memc, ptrs.data(), lengths.data(), ptrs.size());
  bool failed = memcached_failed(rc) && rc != MEMCACHED_NOTFOUND;
  // Fetched even when mget failed: its status is that of the last server it
  // connected to, and the keys sent to the others are answered. With nothing
  // sent, the first fetch returns at once. Each answer needs a live server,
  // so the loop ends; the bound only guards against a misbehaving library.
  const size_t max_fetches = ptrs.size() * 2 + 16;
  for (size_t n = 0; n < max_fetches; ++n) {
    memcached_return_t fetch_rc = MEMCACHED_SUCCESS;
    ResultPtr r(memcached_fetch_result(memc, nullptr, &fetch_rc));
    if (!r) {
      if (fetch_rc != MEMCACHED_END && fetch_rc != MEMCACHED_NOTFOUND) failed = true;
      break;
    }
    received_bytes += memcached_result_length(r.get());
    memcached_return_t by_key_rc = MEMCACHED_SUCCESS;
    const memcached_instance_st* server =
        memcached_server_by_key(memc, memcached_result_key_value(r.get()),
                                memcached_result_key_length(r.get()), &by_key_rc);
    if (server != nullptr) answered.insert(server);
    auto it = index_of.find(
        std::string(memcached_result_key_value(r.get()), memcached_result_key_length(r.get())));
    if (it != index_of.end() && !values[it->second]) values[it->second] = std::move(r);
  }
  // Errors recorded on the handle during this query (a server refused the
  // connection, timed out, was skipped as dead) even when others answered.
  const memcached_return_t last = memcached_last_error(memc);
  if (memcached_failed(last) && last != MEMCACHED_NOTFOUND) {
    failed = true;
    rc = last;
  }
  return failed ? (memcached_failed(rc) ? rc : MEMCACHED_FAILURE) : MEMCACHED_SUCCESS;
}

}  // namespace

struct RemoteTier::Impl {
  RemoteTierOptions options;
  std::unique_ptr<RecordMac> mac;

  // The ring every handle uses: the servers not marked down.
  std::unique_ptr<RemoteServerRing> ring;

  struct Handle {
    MemcachedPtr memc;
    uint64_t ring = 0;  // the ring generation its server list came from
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
    uint64_t n_bytes = 0;     // value bytes: record + MAC trailer
    uint64_t generation = 0;  // the pool's generation when it was queued
  };

  // The pool namespace's generation (clear_pool): the one in every key.
  std::string generation_key;
  std::atomic<uint64_t> generation{0};
  std::mutex refresh_mu;  // one refresh at a time; guards next_refresh
  std::chrono::steady_clock::time_point next_refresh{};
  // The generation to use now: when generation_refresh has passed, the
  // counter is read again on `memc` first (one round trip; on a failure the
  // known one stays). Never goes back: a counter lower than the known one
  // (lost with its server, or recreated elsewhere) is set to it again.
  uint64_t current_generation(memcached_st* memc);
  // Reads (offset 0) or bumps (offset 1) the counter on `memc`, creating
  // it with the known generation (+ offset) when the pool lost it; adopts
  // the result. Returns the memcached status.
  memcached_return_t sync_generation(memcached_st* memc, uint64_t offset, uint64_t* value);
  // Moves to `g` if it is newer: this process's recent keys are forgotten
  // (so that blocks are written again under it). Returns the generation now.
  uint64_t adopt_generation(uint64_t g);
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

  // Marks the server of a connection failure on `memc` (its last disconnect)
  // down once it has failed failure_limit times.
  void note_failure(memcached_st* memc, memcached_return_t rc);
  // Tells the ring how the server `key` maps to on `memc` fared in a
  // one-key operation that returned rc: timed out, or answered.
  void note_key_outcome(memcached_st* memc, const std::string& key, memcached_return_t rc);
  // A refused connect in a one-key operation, told to the ring by the
  // server `key` maps to (libmemcached does not record every such failure
  // as its last disconnect, which note_failure() reads).
  void note_key_failure(memcached_st* memc, const std::string& key, memcached_return_t rc);
  // The same after a multi-get: a server asked for keys that answered none
  // and whose last error is a timeout timed out; one that answered, answered.
  // (libmemcached keeps a server's last error until the next error, so a
  // server counts as timed out only when it answered nothing this time.)
  void note_multi_get_outcome(memcached_st* memc, const ChainFetch& fetch, memcached_return_t rc);
  // Rebuilds the handle when the ring changed since it was made (memc null
  // when out of memory: the caller treats it as a failed operation).
  void refresh(Handle& h);
  Handle acquire_handle();
  void release_handle(Handle handle);
  void note_recent_locked(const BlockKey& key);
  void count_failure(memcached_st* memc, memcached_return_t rc);
  void writer_loop();
  // writer_loop()'s steps: drop every queued write (counted; queue_mu held),
  // and write one record (once more on a new ring after a refusal), counted.
  void drop_queue_locked();
  memcached_return_t write_one(const PendingWrite& w);
  memcached_return_t store(memcached_st* memc, const std::string& key,
                           std::span<const uint8_t> record);

  // get_chain()'s steps: fetch the values (one multi-get, asked once more on
  // the ring without a server that refused), verify the chain in order, delete
  // the values that failed, then count and remember what was read.
  void fetch_chain(Handle& handle, ChainFetch& fetch);
  ChainRead verify_chain(ChainFetch& fetch, std::span<const BlockKey> keys,
                         std::span<const RecordExpectations> expected);
  void drop_bad_values(Handle& handle, const ChainFetch& fetch, const ChainRead& read);
  void note_chain_read(std::span<const BlockKey> keys, const ChainRead& read,
                       uint64_t received_bytes);
};

void RemoteTier::Impl::note_failure(memcached_st* memc, memcached_return_t rc) {
  if (memc == nullptr || !is_connection_failure(memc, rc)) return;
  const memcached_instance_st* server = memcached_server_get_last_disconnect(memc);
  if (server == nullptr) return;
  const std::string host = memcached_server_name(server);
  const auto port = static_cast<uint16_t>(memcached_server_port(server));
  ring->note_connection_failure(host, port);
}

void RemoteTier::Impl::note_key_outcome(memcached_st* memc, const std::string& key,
                                        memcached_return_t rc) {
  if (memc == nullptr) return;
  const bool timed_out = is_timeout(memc, rc);
  // Answers: stored, found, not found, exists; anything else says nothing.
  const bool answered = memcached_success(rc) || rc == MEMCACHED_NOTFOUND ||
                        rc == MEMCACHED_NOTSTORED || rc == MEMCACHED_DATA_EXISTS;
  if (!timed_out && !answered) return;
  memcached_return_t by_key_rc = MEMCACHED_SUCCESS;
  const memcached_instance_st* server =
      memcached_server_by_key(memc, key.data(), key.size(), &by_key_rc);
  if (server == nullptr) return;
  const std::string host = memcached_server_name(server);
  const auto port = static_cast<uint16_t>(memcached_server_port(server));
  if (timed_out) {
    ring->note_timeout(host, port);
  } else {
    ring->note_answer(host, port);
  }
}

void RemoteTier::Impl::note_key_failure(memcached_st* memc, const std::string& key,
                                        memcached_return_t rc) {
  if (memc == nullptr || !is_connection_failure(memc, rc)) return;
  memcached_return_t by_key_rc = MEMCACHED_SUCCESS;
  const memcached_instance_st* server =
      memcached_server_by_key(memc, key.data(), key.size(), &by_key_rc);
  if (server == nullptr) return;
  ring->note_connection_failure(memcached_server_name(server),
                                static_cast<uint16_t>(memcached_server_port(server)));
}

void RemoteTier::Impl::note_multi_get_outcome(memcached_st* memc, const ChainFetch& fetch,
                                              memcached_return_t rc) {
  if (memc == nullptr) return;
  const bool timed_out = !memcached_success(rc) && is_timeout(memc, rc);
  for (const memcached_instance_st* server : fetch.asked) {
    const std::string host = memcached_server_name(server);
    const auto port = static_cast<uint16_t>(memcached_server_port(server));
    if (fetch.answered.count(server) != 0) {
      ring->note_answer(host, port);
    } else if (timed_out && memcached_server_error_return(server) == MEMCACHED_TIMEOUT) {
      ring->note_timeout(host, port);
    }
  }
}

uint64_t RemoteTier::Impl::current_generation(memcached_st* memc) {
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(refresh_mu, std::try_to_lock);
  // Another thread is refreshing: use the known generation meanwhile.
  if (!lock.owns_lock() || memc == nullptr || now < next_refresh) return generation.load();
  next_refresh = now + options.generation_refresh;
  uint64_t value = 0;
  (void)sync_generation(memc, 0, &value);
  return generation.load();
}

memcached_return_t RemoteTier::Impl::sync_generation(memcached_st* memc, uint64_t offset,
                                                     uint64_t* value) {
  const uint64_t known = generation.load();
  const memcached_return_t rc = memcached_increment_with_initial(
      memc, generation_key.data(), generation_key.size(), offset, known + offset,
      /*expiration=*/0, value);
  note_key_outcome(memc, generation_key, rc);
  if (memcached_failed(rc)) {
    count_failure(memc, rc);
    note_key_failure(memc, generation_key, rc);
    return rc;
  }
  if (*value < known + offset) {
    // The pool's counter is behind what this process knows (a server lost
    // it and it was created again lower): put it back, never go back.
    *value = known + offset;
    const std::string text = std::to_string(*value);
    const memcached_return_t set_rc = memcached_set(memc, generation_key.data(),
                                                    generation_key.size(), text.data(),
                                                    text.size(), 0, 0);
    if (memcached_failed(set_rc)) count_failure(memc, set_rc);
  }
  adopt_generation(*value);
  return rc;
}

uint64_t RemoteTier::Impl::adopt_generation(uint64_t g) {
  uint64_t known = generation.load();
  while (g > known && !generation.compare_exchange_weak(known, g)) {
  }
  if (g <= known) return generation.load();
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    recent_keys.clear();
    recent_order.clear();
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  ++stats.generation_changes;
  return g;
}

void RemoteTier::Impl::refresh(Handle& h) {
  std::vector<RemoteServer> servers;
  const uint64_t r = ring->current(&servers);
  if (h.memc && h.ring == r) return;
  auto made = make_memcached_handle(memcached_settings(options), servers);
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
  const std::vector<uint8_t> value = sign_record_value(*mac, record);
  return memcached_set(memc, key.data(), key.size(), reinterpret_cast<const char*>(value.data()),
                       value.size(), /*expiration=*/0, /*flags=*/0);
}

void RemoteTier::Impl::writer_loop() {
  // Writes run at the tiers' writer priority, as the disk tier's do
  // (TierManager, writer_priority.h): sealing and sending 46 MB per
  // 2000-token prompt takes a bounded share of the CPU under load (batch:N)
  // or only idle time (idle: under constant load the queue fills and writes
  // are dropped, counted). Best effort: a refusal is harmless.
  const pid_t tid = apply_writer_priority(options.writer_priority);
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
      drop_queue_locked();
      if (stopping) return;
      continue;  // past the deadline, not yet stopping: later writes are dropped too
    }
    PendingWrite w = std::move(queue.front());
    queue.pop_front();
    writing = true;
    lock.unlock();
    const memcached_return_t rc = write_one(w);
    const bool timed_out = !memcached_success(rc) && is_timeout(writer_handle.memc.get(), rc);
    lock.lock();
    drop_rest = timed_out;
    queued_keys.erase(w.key);
    pending_bytes -= w.n_bytes;
    if (memcached_success(rc)) note_recent_locked(w.key);
    writing = false;
    if (queue.empty()) queue_idle.notify_all();
  }
}

void RemoteTier::Impl::drop_queue_locked() {
  {
    std::lock_guard<std::mutex> stats_lock(stats_mu);
    stats.writes_dropped += queue.size();
  }
  queue.clear();
  queued_keys.clear();
  pending_bytes = 0;
  queue_idle.notify_all();
}

memcached_return_t RemoteTier::Impl::write_one(const PendingWrite& w) {
  memcached_return_t rc = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
  refresh(writer_handle);
  const uint64_t gen = current_generation(writer_handle.memc.get());
  refresh(writer_handle);  // a server the generation refresh took out is not asked
  if (gen != w.generation) {
    // Queued before the pool was cleared (here or by another replica): its
    // block belongs to what was cleared.
    std::lock_guard<std::mutex> stats_lock(stats_mu);
    ++stats.writes_dropped;
    return MEMCACHED_NOTSTORED;
  }
  const std::string name = memcached_key(w.key, gen);
  if (writer_handle.memc) {
    rc = store(writer_handle.memc.get(), name, w.record->bytes());
    note_key_outcome(writer_handle.memc.get(), name, rc);
    // Refused (the server is down): once more, on the ring without it
    // when that made it leave.
    if (memcached_failed(rc) && !is_timeout(writer_handle.memc.get(), rc)) {
      count_failure(writer_handle.memc.get(), rc);
      note_failure(writer_handle.memc.get(), rc);
      refresh(writer_handle);
      if (writer_handle.memc) {
        rc = store(writer_handle.memc.get(), name, w.record->bytes());
        note_key_outcome(writer_handle.memc.get(), name, rc);
      }
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
  return rc;
}

// The options' bounds, each refusal naming the option and its value.
static Status check_remote_options(const RemoteTierOptions& options) {
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
  if (options.timeout_limit < 1) {
    return Status::error("remote cache: timeout_limit must be at least 1 (got " +
                         std::to_string(options.timeout_limit) + ")");
  }
  if (options.retry_interval.count() <= 0) {
    return Status::error("remote cache: retry_interval must be positive (got " +
                         std::to_string(options.retry_interval.count()) + " ms)");
  }
  if (options.allocator.alloc == nullptr || options.allocator.free == nullptr) {
    return Status::error("remote cache: the host allocator has no alloc or free function");
  }
  if (options.generation_refresh.count() <= 0) {
    return Status::error("remote cache: generation_refresh must be positive (got " +
                         std::to_string(options.generation_refresh.count()) + " ms)");
  }
  return Status::ok_status();
}

Result<std::unique_ptr<RemoteTier>> RemoteTier::open(const RemoteTierOptions& options) {
  if (Status s = check_remote_options(options); !s.ok()) return s;
  // A server that does not answer now starts out of the ring (tried again
  // every retry_interval) as long as another one answers, so that a replica
  // starts while one cache server is down; its item size is then unchecked
  // (a set it refuses is counted as an error).
  std::vector<std::string> unanswered;
  std::vector<size_t> unanswered_index;
  for (size_t i = 0; i < options.servers.size(); ++i) {
    bool unreachable = false;
    const uint64_t value_bytes = options.record_bytes + RecordMac::kTrailerBytes;
    Status s = probe_remote_server(memcached_settings(options), options.servers[i], value_bytes,
                                   value_bytes + kKeyBytes + kItemHeaderBytes, &unreachable);
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
  impl->ring = std::make_unique<RemoteServerRing>(options.servers, options.failure_limit,
                                                  options.timeout_limit, options.retry_interval);
  for (size_t i : unanswered_index) impl->ring->mark_down(i);
  // Checks that every server can be added.
  auto first = make_memcached_handle(memcached_settings(options), options.servers);
  if (!first.ok()) return first.status();
  impl->refresh(impl->writer_handle);
  if (!impl->writer_handle.memc) return Status::error("remote cache: memcached_create failed (out of memory)");
  // The pool's generation: read now (created at 0 in a new pool); when its
  // server does not answer, 0 until a refresh reads it.
  impl->generation_key = generation_key(options.deployment_secret, options.pool_namespace);
  {
    std::lock_guard<std::mutex> lock(impl->refresh_mu);
    uint64_t value = 0;
    const memcached_return_t rc = impl->sync_generation(impl->writer_handle.memc.get(), 0, &value);
    if (memcached_failed(rc) && options.log_warning) {
      options.log_warning(std::string("remote cache: cannot read the pool's generation counter (") +
                          memcached_strerror(impl->writer_handle.memc.get(), rc) +
                          "); using 0 until it answers");
    }
    impl->next_refresh = std::chrono::steady_clock::now() + options.generation_refresh;
  }
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
  return raise_writer_to_normal(tid);
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
  if (keys.empty()) return {};
  Impl& d = *impl_;
  Impl::Handle handle = d.acquire_handle();
  const uint64_t gen = d.current_generation(handle.memc.get());
  d.refresh(handle);  // a server the generation refresh took out is not asked
  ChainFetch fetch(keys, gen);
  if (!handle.memc) {
    d.count_failure(nullptr, MEMCACHED_MEMORY_ALLOCATION_FAILURE);
    d.release_handle(std::move(handle));
    std::lock_guard<std::mutex> lock(d.stats_mu);
    d.stats.misses += keys.size();
    return {};
  }
  d.fetch_chain(handle, fetch);
  ChainRead read = d.verify_chain(fetch, keys, expected);
  fetch.values.clear();  // before the handle they point back to is released
  d.drop_bad_values(handle, fetch, read);
  d.release_handle(std::move(handle));
  d.note_chain_read(keys, read, fetch.received_bytes);
  return std::move(read.records);
}

void RemoteTier::Impl::fetch_chain(Handle& handle, ChainFetch& fetch) {
  // One multi-get: libmemcached writes each server's keys, then reads the
  // answers as they come; keys on a server that is down are simply not
  // answered.
  const memcached_return_t rc = fetch.multi_get(handle.memc.get(), 0);
  note_multi_get_outcome(handle.memc.get(), fetch, rc);
  if (memcached_success(rc)) return;
  count_failure(handle.memc.get(), rc);
  // A server that refused the connection is out of the ring now (after
  // failure_limit refusals), or it is one that joined again after
  // retry_interval: ask once more for what is missing, on the ring without
  // it, where the blocks recomputed since it died were written. A timeout
  // is not asked again (it would wait once more).
  if (is_timeout(handle.memc.get(), rc)) return;
  note_failure(handle.memc.get(), rc);
  fetch.retired.push_back(std::move(handle.memc));
  refresh(handle);
  const size_t first_missing = fetch.first_missing();
  if (!handle.memc || first_missing == fetch.values.size()) return;
  const memcached_return_t again = fetch.multi_get(handle.memc.get(), first_missing);
  note_multi_get_outcome(handle.memc.get(), fetch, again);
  if (memcached_failed(again)) {
    count_failure(handle.memc.get(), again);
    note_failure(handle.memc.get(), again);
  }
}

ChainRead RemoteTier::Impl::verify_chain(ChainFetch& fetch, std::span<const BlockKey> keys,
                                         std::span<const RecordExpectations> expected) {
  // Walk the chain in order: MAC, then the record against its expectations.
  ChainRead read;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!fetch.values[i]) break;
    const std::span<const uint8_t> value(
        reinterpret_cast<const uint8_t*>(memcached_result_value(fetch.values[i].get())),
        memcached_result_length(fetch.values[i].get()));
    const SignedRecordCheck check = verify_signed_record(*mac, value, keys[i], &expected[i]);
    if (!check.ok()) {
      read.bad.push_back(i);
      if (!check.authentic) ++read.n_unauthenticated;
      break;
    }
    const size_t record_bytes = value.size() - RecordMac::kTrailerBytes;
    std::shared_ptr<RecordBuffer> record = RecordBuffer::allocate(record_bytes, options.allocator);
    if (!record) break;  // out of host memory: a miss, nothing wrong with the value
    std::memcpy(record->mutable_data(), value.data(), record_bytes);
    read.records.push_back(std::move(record));
    fetch.values[i].reset();
  }
  return read;
}

void RemoteTier::Impl::drop_bad_values(Handle& handle, const ChainFetch& fetch,
                                       const ChainRead& read) {
  for (size_t i : read.bad) {
    if (!handle.memc) break;
    const std::string& name = fetch.names[i];
    const memcached_return_t rc = memcached_delete(handle.memc.get(), name.data(), name.size(), 0);
    if (memcached_failed(rc) && rc != MEMCACHED_NOTFOUND) count_failure(handle.memc.get(), rc);
  }
}

void RemoteTier::Impl::note_chain_read(std::span<const BlockKey> keys, const ChainRead& read,
                                       uint64_t received_bytes) {
  const size_t n_read = read.records.size();
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    for (size_t i = 0; i < n_read; ++i) note_recent_locked(keys[i]);
    // The rest is not in the pool (lost with a server, evicted, never
    // written): forget that this process stored it, so that the blocks the
    // caller now recomputes are written again. (A stale FIFO entry at most
    // makes a later write go out twice.)
    for (size_t i = n_read; i < keys.size(); ++i) recent_keys.erase(keys[i]);
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.hits += n_read;
  stats.misses += keys.size() - n_read;
  stats.read_bytes += received_bytes;
  stats.corrupt_records += read.bad.size();
  stats.unauthenticated_records += read.n_unauthenticated;
}

Result<uint64_t> RemoteTier::clear_pool() {
  Impl& d = *impl_;
  Impl::Handle handle = d.acquire_handle();
  if (!handle.memc) {
    d.release_handle(std::move(handle));
    return Status::error("remote cache: memcached_create failed (out of memory)");
  }
  uint64_t value = 0;
  memcached_return_t rc = MEMCACHED_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(d.refresh_mu);
    rc = d.sync_generation(handle.memc.get(), 1, &value);
    if (memcached_failed(rc) && !is_timeout(handle.memc.get(), rc)) {
      // Refused: once more on the ring without the server, when it left.
      d.refresh(handle);
      if (handle.memc) rc = d.sync_generation(handle.memc.get(), 1, &value);
    }
  }
  Result<uint64_t> out = value;
  if (!handle.memc) {
    out = Status::error("remote cache: memcached_create failed (out of memory)");
  } else if (memcached_failed(rc)) {
    out = Status::error(std::string("remote cache: the pool's generation counter could not be "
                                    "bumped (") +
                        (is_timeout(handle.memc.get(), rc) ? "timed out" : "failed") + ": " +
                        memcached_last_error_message(handle.memc.get()) +
                        "); the pool was not cleared");
  }
  d.release_handle(std::move(handle));
  return out;
}

int32_t RemoteTier::present_chain(std::span<const BlockKey> keys, size_t max_keys,
                                  std::chrono::milliseconds budget, std::string* error) {
  if (error != nullptr) error->clear();
  const size_t n_asked = std::min(keys.size(), max_keys);
  if (n_asked == 0) return 0;
  Impl& d = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  Impl::Handle handle = d.acquire_handle();
  size_t n_found = 0;
  std::string why;
  if (!handle.memc) {
    d.count_failure(nullptr, MEMCACHED_MEMORY_ALLOCATION_FAILURE);
    why = "memcached_create failed (out of memory)";
  }
  const uint64_t gen = d.current_generation(handle.memc.get());
  d.refresh(handle);  // a server the generation refresh took out is not asked
  while (handle.memc && n_found < n_asked) {
    if (std::chrono::steady_clock::now() >= deadline) {
      why = "the lookup's time budget (" + std::to_string(budget.count()) + " ms) ran out after " +
            std::to_string(n_found) + " blocks";
      break;
    }
    const std::string name = memcached_key(keys[n_found], gen);
    memcached_return_t rc = memcached_exist(handle.memc.get(), name.data(), name.size());
    d.note_key_outcome(handle.memc.get(), name, rc);
    if (memcached_failed(rc) && rc != MEMCACHED_NOTFOUND && !is_timeout(handle.memc.get(), rc)) {
      // Refused: once more on the ring without the server, when it left.
      d.count_failure(handle.memc.get(), rc);
      d.note_key_failure(handle.memc.get(), name, rc);
      d.refresh(handle);
      if (!handle.memc) break;
      rc = memcached_exist(handle.memc.get(), name.data(), name.size());
      d.note_key_outcome(handle.memc.get(), name, rc);
    }
    if (memcached_success(rc)) {
      ++n_found;
      continue;
    }
    if (rc != MEMCACHED_NOTFOUND) {
      d.count_failure(handle.memc.get(), rc);
      d.note_key_failure(handle.memc.get(), name, rc);
      why = std::string(is_timeout(handle.memc.get(), rc) ? "timed out" : "failed") + " asking " +
            "for block " + std::to_string(n_found) + ": " +
            memcached_last_error_message(handle.memc.get());
    }
    break;
  }
  d.release_handle(std::move(handle));
  if (error != nullptr) *error = "remote cache: " + why;
  if (error != nullptr && why.empty()) error->clear();
  std::lock_guard<std::mutex> lock(d.stats_mu);
  d.stats.lookup_hits += n_found;
  d.stats.lookup_misses += n_asked - n_found;
  return static_cast<int32_t>(n_found);
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
    d.queue.push_back(Impl::PendingWrite{key, std::move(record), n_bytes, d.generation.load()});
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
  std::vector<RemoteServerState> states = d.ring->states();
  int32_t in_ring = 0;
  for (const RemoteServerState& st : states) in_ring += st.in_ring ? 1 : 0;
  const uint64_t ejections = d.ring->ejections();
  std::lock_guard<std::mutex> lock(d.stats_mu);
  RemoteTierStats s = d.stats;
  s.pending_write_bytes = pending;
  s.servers_in_ring = in_ring;
  s.server_ejections = ejections;
  s.server_states = std::move(states);
  s.generation = d.generation.load();
  return s;
}

Status RemoteTier::debug_set_value(const BlockKey& key, std::span<const uint8_t> value) {
  Impl& d = *impl_;
  RemoteTier::Impl::Handle handle = d.acquire_handle();
  if (!handle.memc) {
    d.release_handle(std::move(handle));
    return Status::error("remote cache: memcached_create failed (out of memory)");
  }
  const std::string name = memcached_key(key, d.current_generation(handle.memc.get()));
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
