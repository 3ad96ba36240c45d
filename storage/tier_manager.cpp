// TierManager: host inserts happen on the caller's thread (memory only); disk
// writes and onboards are jobs for a small pool of I/O threads; remote writes
// go to the remote tier's own writer thread. With two or
// more, one low-priority thread writes to disk and the others onboard, so a
// waiting request never queues behind writes and writes yield to prefill.
#include "storage/tier_manager.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace prefixd {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* write_policy_name(WritePolicy policy) {
  return policy == WritePolicy::kWriteThrough ? "write-through" : "evict-only";
}

Result<WritePolicy> parse_write_policy(const std::string& name) {
  if (name == "write-through") return WritePolicy::kWriteThrough;
  if (name == "evict-only") return WritePolicy::kEvictOnly;
  return Status::error("unknown write policy '" + name + "' (write-through or evict-only)");
}

TierManager::TierManager(const TierManagerOptions& options) : options_(options) {}

Result<std::unique_ptr<TierManager>> TierManager::create(const TierManagerOptions& options) {
  if (!options.geometry.valid()) return Status::error("tier manager: invalid block geometry");
  if (options.n_io_threads < 1) return Status::error("tier manager: n_io_threads must be >= 1");
  if (options.allocator.alloc == nullptr || options.allocator.free == nullptr) {
    return Status::error("tier manager: allocator needs alloc and free");
  }
  std::unique_ptr<TierManager> tm(new TierManager(options));
  tm->slabs_.reset(new RecordSlabAllocator(block_record_bytes(options.geometry), options.allocator));
  tm->options_.allocator = tm->slabs_->allocator();
  tm->host_ = std::make_unique<HostTier>(HostTierOptions{options.host_capacity_bytes});
  if (options.remote && !options.deployment_secret) {
    // Replicas share blocks only under one secret; a random one would match nothing.
    return Status::error("remote tier: needs the deployment's secret (--cache-secret-file)");
  }
  if (options.disk) {
    DiskTierOptions disk_options = *options.disk;
    disk_options.allocator = tm->options_.allocator;
    disk_options.deployment_secret = options.deployment_secret;
    auto disk = DiskTier::open(disk_options);
    if (!disk.ok()) return disk.status();
    tm->disk_ = std::move(disk).value();
    tm->secret_ = tm->disk_->deployment_secret();
  } else if (options.deployment_secret) {
    tm->secret_ = *options.deployment_secret;
  } else {
    std::random_device rd;
    for (size_t i = 0; i < tm->secret_.size(); i += 4) {
      const uint32_t r = rd();
      std::memcpy(tm->secret_.data() + i, &r, 4);
    }
  }
  if (options.remote) {
    RemoteTierOptions remote_options = *options.remote;
    remote_options.deployment_secret = tm->secret_;
    remote_options.record_bytes = block_record_bytes(options.geometry);
    remote_options.writer_priority = options.writer_priority;
    remote_options.allocator = tm->options_.allocator;
    remote_options.pool_namespace = options.model_fingerprint;  // replicas of this model share it
    auto remote = RemoteTier::open(remote_options);
    if (!remote.ok()) return remote.status();
    tm->remote_ = std::move(remote).value();
  }
  TierManager* self = tm.get();
  // Host evictions go down to disk and remote (under write-through they
  // usually are there already).
  tm->host_->set_evict_callback(
      [self](const BlockKey& key, RecordPtr record) { self->write_below(key, record); });
  for (int32_t i = 0; i < options.n_io_threads; ++i) {
    // With two or more threads, thread 0 writes to disk at a low CPU priority
    // (write-through must not slow prefill down) and the others onboard.
    const IoRole role = options.n_io_threads == 1 ? IoRole::kAll
                        : i == 0                  ? IoRole::kOffload
                                                  : IoRole::kOnboard;
    tm->io_threads_.emplace_back([self, role] { self->io_loop(role); });
  }
  return tm;
}

TierManager::~TierManager() {
  stop_prefault_.store(true);
  (void)drain_for_shutdown();  // queued disk writes, on this thread too
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : io_threads_) t.join();
  host_->set_evict_callback(nullptr);
  remote_.reset();  // finishes its queued writes
  disk_.reset();    // flushes and closes
}

std::shared_ptr<RecordBuffer> TierManager::start_record(uint64_t namespace_seed,
                                                        const Hash128& block_hash,
                                                        const Hash128& parent_hash,
                                                        std::span<const int32_t> token_ids) const {
  PREFIXD_CHECK(token_ids.size() == static_cast<size_t>(options_.geometry.block_size),
                "start_record needs block_size token ids");
  BlockRecordInfo info;
  info.model_fingerprint = options_.model_fingerprint;
  info.namespace_seed = namespace_seed;
  info.geometry = options_.geometry;
  info.block_hash = block_hash;
  info.parent_hash = parent_hash;
  return start_block_record(info, token_ids, options_.allocator);
}

void TierManager::queue_disk_write(const BlockKey& key, RecordPtr record,
                                   std::chrono::steady_clock::time_point since) {
  if (!disk_ || disk_->contains(key)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_disk_keys_.count(key) != 0) return;
    if (pending_offload_bytes_ + record->size() > options_.max_pending_offload_bytes) {
      ++counters_.offload_dropped;
      return;
    }
    pending_offload_bytes_ += record->size();
    queued_disk_keys_.insert(key);
    offload_queue_.push_back(OffloadJob{key, std::move(record), since});
  }
  work_cv_.notify_all();  // threads differ in the jobs they take
}

void TierManager::write_below(const BlockKey& key, const RecordPtr& record,
                              std::chrono::steady_clock::time_point since) {
  if (remote_) remote_->put_async(key, record);
  queue_disk_write(key, record, since);
}

void TierManager::offload(const BlockKey& key, RecordPtr record, OffloadReason reason) {
  offload_since(key, std::move(record), reason, std::chrono::steady_clock::now());
}

void TierManager::offload_since(const BlockKey& key, RecordPtr record, OffloadReason reason,
                                std::chrono::steady_clock::time_point since) {
  PREFIXD_CHECK(record != nullptr, "offload of a null record");
  const bool write_through = options_.write_policy == WritePolicy::kWriteThrough;
  if (reason == OffloadReason::kPublished && !write_through) return;
  const uint64_t n_bytes = record->size();
  const HostInsert inserted = host_->insert(key, record);
  if (inserted == HostInsert::kInserted) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.offload_host_blocks;
    counters_.offload_host_bytes += n_bytes;
  }
  // Disk and remote: always under write-through; under evict-only only when
  // the host cannot hold it (host evictions reach them through the evict callback).
  if (write_through || inserted == HostInsert::kDeclined) write_below(key, record, since);
}

bool TierManager::offload_published_later(uint64_t namespace_seed, const Hash128& block_hash,
                                          const Hash128& parent_hash, std::span<const int32_t> token_ids,
                                          std::function<void(uint8_t*)> fill, std::function<void()> done) {
  PREFIXD_CHECK(token_ids.size() == static_cast<size_t>(options_.geometry.block_size),
                "offload_published_later needs block_size token ids");
  if (options_.write_policy != WritePolicy::kWriteThrough) return false;
  const uint64_t n_bytes = record_bytes();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_build_bytes_ + n_bytes > options_.max_pending_build_bytes) {
      ++counters_.builds_refused;
      return false;
    }
    pending_build_bytes_ += n_bytes;
    ++counters_.builds_deferred;
    build_queue_.push_back(BuildJob{namespace_seed, block_hash, parent_hash,
                                    std::vector<int32_t>(token_ids.begin(), token_ids.end()),
                                    std::move(fill), std::move(done), std::chrono::steady_clock::now()});
  }
  work_cv_.notify_all();
  return true;
}

void TierManager::run_build(BuildJob& job) {
  std::shared_ptr<RecordBuffer> rec = start_record(job.namespace_seed, job.block_hash, job.parent_hash, job.token_ids);
  if (rec) {
    job.fill(block_record_payload(*rec));
    seal_block_record(*rec);
  }
  job.done();  // the block may change from here on; the record is complete
  if (rec)
    offload_since(BlockKey{job.namespace_seed, job.block_hash}, std::move(rec), OffloadReason::kPublished,
                  job.queued_at);
}

void TierManager::wait_builds() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (run_next_build(lock)) continue;
    if (build_queue_.empty() && pending_build_bytes_ == 0) return;
    builds_cv_.wait(lock);  // a build runs on an I/O thread
  }
}

RecordExpectations TierManager::expectations(const ChainQuery& query, size_t i) const {
  const size_t block_size = static_cast<size_t>(options_.geometry.block_size);
  RecordExpectations e;
  e.info.model_fingerprint = options_.model_fingerprint;
  e.info.namespace_seed = query.namespace_seed;
  e.info.geometry = options_.geometry;
  e.info.block_hash = query.hashes[i];
  e.info.parent_hash = i == 0 ? query.first_parent : query.hashes[i - 1];
  e.token_ids = std::span<const int32_t>(query.token_ids).subspan(i * block_size, block_size);
  return e;
}

ChainLookup TierManager::lookup_chain(const ChainQuery& query) const {
  PREFIXD_CHECK(query.token_ids.size() ==
                    query.hashes.size() * static_cast<size_t>(options_.geometry.block_size),
                "ChainQuery needs block_size token ids per hash");
  ChainLookup out;
  for (size_t i = 0; i < query.hashes.size(); ++i) {
    const BlockKey key{query.namespace_seed, query.hashes[i]};
    RecordPtr rec = host_->peek(key);
    if (rec != nullptr) {
      const RecordExpectations e = expectations(query, i);
      if (check_block_record(rec->data(), rec->size(), e, nullptr, /*verify_payload=*/false) ==
          RecordCheck::kOk) {
        out.tiers.push_back(StorageTier::kHost);
        ++out.n_host;
        continue;
      }
    }
    if (disk_ && disk_->contains(key)) {
      out.tiers.push_back(StorageTier::kDisk);
      ++out.n_disk;
      continue;
    }
    break;
  }
  out.n_blocks = static_cast<int32_t>(out.tiers.size());
  if (remote_) out.n_remote_candidates = static_cast<int32_t>(query.hashes.size()) - out.n_blocks;
  return out;
}

void TierManager::request_onboard(uint64_t request_id, ChainQuery query) {
  PREFIXD_CHECK(query.token_ids.size() ==
                    query.hashes.size() * static_cast<size_t>(options_.geometry.block_size),
                "ChainQuery needs block_size token ids per hash");
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.onboard_requests;
    onboard_queue_.push_back(OnboardJob{request_id, std::move(query)});
  }
  work_cv_.notify_all();  // threads differ in the jobs they take
}

std::vector<OnboardCompletion> TierManager::poll_completions() {
  std::vector<OnboardCompletion> out;
  std::lock_guard<std::mutex> lock(completions_mu_);
  out.swap(completions_);
  return out;
}

void TierManager::set_completion_notifier(std::function<void()> notifier) {
  std::lock_guard<std::mutex> lock(completions_mu_);
  notifier_ = std::move(notifier);
}

void TierManager::prefault_async(uint64_t n_bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    prefault_bytes_ = std::max(prefault_bytes_, n_bytes);
  }
  work_cv_.notify_all();
}

void TierManager::io_loop(IoRole role) {
  if (role == IoRole::kOffload) {
    // Disk writes (and the builds before them) run at the writer priority:
    // a bounded share of the CPU under load (batch:N), so write-through
    // keeps up without slowing prefill down much; at SCHED_IDLE (idle) they
    // run only in quiet moments, and under constant load the queue fills and
    // writes are dropped (counted). Best effort: a refusal is harmless. At
    // shutdown begin_shutdown() lifts this thread back to normal priority.
    writer_tid_.store(apply_writer_priority(options_.writer_priority));
  }
  const bool onboards = role != IoRole::kOffload;
  const bool offloads = role != IoRole::kOnboard;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto takes_offloads = [&] { return offloads && !(role == IoRole::kOffload && writer_parked_); };
    work_cv_.wait(lock, [&] {
      return stopping_ || (onboards && !onboard_queue_.empty()) ||
             (takes_offloads() &&
              ((!build_queue_.empty() && !build_running_) || !offload_queue_.empty() ||
               prefault_bytes_ > 0));
    });
    // Builds first: each holds a block of the caller's pool. They are drained
    // even while stopping (see offload_published_later).
    if (takes_offloads() && run_next_build(lock)) continue;
    if (takes_offloads() && prefault_bytes_ > 0 && !stopping_ && !shutdown_begun_) {
      const uint64_t n = prefault_bytes_;
      prefault_bytes_ = 0;
      lock.unlock();
      slabs_->reserve(n, &stop_prefault_);
      lock.lock();
      continue;
    }
    prefault_bytes_ = shutdown_begun_ ? 0 : prefault_bytes_;
    if (onboards && !onboard_queue_.empty()) {
      OnboardJob job = std::move(onboard_queue_.front());
      onboard_queue_.pop_front();
      ++active_jobs_;
      lock.unlock();
      run_onboard(job);
      lock.lock();
      --active_jobs_;
      notify_job_done();
      continue;
    }
    if (takes_offloads() && run_next_offload(lock)) continue;
    // Nothing this thread may take now. A build queued behind one running
    // elsewhere is taken by that thread next.
    if (stopping_) return;
  }
}

bool TierManager::past_shutdown_deadline() const {
  return shutdown_begun_ && std::chrono::steady_clock::now() >= shutdown_deadline_;
}

void TierManager::notify_job_done() { idle_cv_.notify_all(); }

bool TierManager::run_next_build(std::unique_lock<std::mutex>& lock) {
  if (build_queue_.empty() || build_running_) return false;
  BuildJob job = std::move(build_queue_.front());
  build_queue_.pop_front();
  build_running_ = true;
  ++active_jobs_;
  const bool drop = past_shutdown_deadline();
  if (drop) ++counters_.shutdown_dropped_builds;
  lock.unlock();
  if (drop) {
    job.done();  // the block is released unread; no record
  } else {
    run_build(job);
  }
  lock.lock();
  pending_build_bytes_ -= record_bytes();
  build_running_ = false;
  --active_jobs_;
  builds_cv_.notify_all();
  work_cv_.notify_all();  // the next build may run on another thread
  notify_job_done();
  return true;
}

bool TierManager::run_next_offload(std::unique_lock<std::mutex>& lock) {
  if (offload_queue_.empty()) return false;
  OffloadJob job = std::move(offload_queue_.front());
  offload_queue_.pop_front();
  ++active_jobs_;
  const bool drop = past_shutdown_deadline();
  if (drop) {
    ++counters_.shutdown_dropped_records;
  } else {
    lock.unlock();
    run_offload(job);
    lock.lock();
  }
  pending_offload_bytes_ -= job.record->size();
  queued_disk_keys_.erase(job.key);
  --active_jobs_;
  notify_job_done();
  return true;
}

void TierManager::begin_shutdown(std::chrono::steady_clock::time_point deadline) {
  stop_prefault_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_begun_) return;
  shutdown_begun_ = true;
  shutdown_deadline_ = deadline;
  shutdown_begun_at_s_ = now_s();
  disk_blocks_at_shutdown_ = counters_.offload_disk_blocks;
  const pid_t tid = writer_tid_.load();
  if (tid != 0) {
    writer_raised_ = raise_writer_to_normal(tid);
    writer_parked_ = !writer_raised_;
  }
  if (remote_) remote_writer_raised_ = remote_->begin_shutdown(deadline);
  work_cv_.notify_all();
}

ShutdownDrain TierManager::drain_for_shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (run_next_offload(lock)) continue;
    if (active_jobs_ == 0) break;
    idle_cv_.wait(lock);  // a job running elsewhere may queue more writes
  }
  ShutdownDrain d;
  if (remote_) {
    lock.unlock();
    remote_->wait_idle();  // past the deadline its writer drops the rest
    d.remote_writes_dropped = remote_->stats().writes_dropped;
    lock.lock();
    d.remote_writer_raised = remote_writer_raised_;
  }
  d.records_written = counters_.offload_disk_blocks - disk_blocks_at_shutdown_;
  d.dropped_builds = counters_.shutdown_dropped_builds;
  d.dropped_records = counters_.shutdown_dropped_records;
  d.dropped_while_serving = counters_.offload_dropped;
  d.writer_raised = writer_raised_;
  d.seconds = shutdown_begun_ ? now_s() - shutdown_begun_at_s_ : 0;
  return d;
}

void TierManager::run_offload(OffloadJob& job) {
  if (disk_->contains(job.key)) return;
  const Status s = disk_->put(job.key, job.record->bytes());
  if (!s.ok()) return;  // counted by the disk tier (io_errors); a cache may drop writes
  if (!disk_->contains(job.key)) return;  // declined (larger than capacity)
  const double lag_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.queued_at).count();
  std::lock_guard<std::mutex> lock(mu_);
  disk_write_lag_.add(lag_ms);
  ++counters_.offload_disk_blocks;
  counters_.offload_disk_bytes += job.record->size();
}

void TierManager::run_onboard(OnboardJob& job) {
  OnboardCompletion c;
  c.request_id = job.request_id;
  const ChainQuery& query = job.query;
  const size_t n = query.hashes.size();
  c.n_requested = static_cast<int32_t>(n);
  c.records.reserve(n);
  // The leading blocks host RAM holds.
  size_t i = 0;
  for (; i < n; ++i) {
    const BlockKey key{query.namespace_seed, query.hashes[i]};
    const RecordExpectations e = expectations(query, i);
    const double t0 = now_s();
    RecordPtr rec = host_->lookup(key);
    if (rec == nullptr) break;
    if (check_block_record(rec->data(), rec->size(), e, nullptr) != RecordCheck::kOk) {
      // A host record that fails: corrupted in memory or a hash collision. Drop it.
      host_->erase(key);
      break;
    }
    c.records.push_back(rec);
    ++c.n_from_host;
    c.host_bytes += rec->size();
    c.host_seconds += now_s() - t0;
  }
  if (disk_ != nullptr && i < n) i = onboard_from_disk(query, i, c);
  if (remote_ != nullptr && i < n) i = onboard_from_remote(query, i, c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.onboard_host_blocks += c.n_from_host;
    counters_.onboard_disk_blocks += c.n_from_disk;
    counters_.onboard_remote_blocks += c.n_from_remote;
    counters_.onboard_bytes += c.host_bytes + c.disk_bytes + c.remote_bytes;
  }
  std::function<void()> notifier;
  {
    std::lock_guard<std::mutex> lock(completions_mu_);
    completions_.push_back(std::move(c));
    notifier = notifier_;
  }
  if (notifier) notifier();
}

// The blocks from i on that the disk holds (or host RAM, for a later one),
// read by up to kDiskReaders threads at once: one read at a time leaves a
// cold restart waiting on the device's latency (page cache dropped, Zen 3 VM
// disk: 46 MB in 162 ms at one read at a time); each get checks its record
// (MAC, header, tokens).
void TierManager::read_disk_run(const ChainQuery& query, size_t i, std::vector<RecordPtr>& got,
                                std::vector<uint8_t>& in_host) {
  auto read = [&](size_t j) {
    const BlockKey key{query.namespace_seed, query.hashes[i + j]};
    const RecordExpectations e = expectations(query, i + j);
    if (j > 0) {
      RecordPtr rec = host_->lookup(key);
      if (rec != nullptr && check_block_record(rec->data(), rec->size(), e, nullptr) == RecordCheck::kOk) {
        got[j] = std::move(rec);
        in_host[j] = 1;
        return;
      }
    }
    got[j] = disk_->get(key, &e);  // checks everything; deletes and counts failures
  };
  // The first block alone: a chain that is not there at all (another model,
  // a damaged directory) costs one read, as before.
  read(0);
  if (got[0] != nullptr && got.size() > 1) {
    constexpr size_t kDiskReaders = 4;
    const size_t readers = got.size() - 1 >= 2 * kDiskReaders ? kDiskReaders : 1;
    auto read_rest = [&](size_t r) {
      for (size_t j = 1 + r; j < got.size(); j += readers) read(j);
    };
    std::vector<std::thread> helpers;
    for (size_t r = 1; r < readers; ++r) helpers.emplace_back(read_rest, r);
    read_rest(0);
    for (std::thread& t : helpers) t.join();
  }
}

size_t TierManager::onboard_from_disk(const ChainQuery& query, size_t i, OnboardCompletion& c) {
  const size_t n = query.hashes.size();
  // The run of blocks the disk index (or host RAM) holds: a block in neither
  // is left to the remote tier without a disk read.
  size_t end = i;
  while (end < n) {
    const BlockKey key{query.namespace_seed, query.hashes[end]};
    if (!disk_->contains(key) && (end == i || host_->peek(key) == nullptr)) break;
    ++end;
  }
  if (end == i) return i;
  const double t1 = now_s();
  std::vector<RecordPtr> got(end - i);
  std::vector<uint8_t> in_host(end - i, 0);  // a later block host RAM still holds
  read_disk_run(query, i, got, in_host);
  c.disk_seconds += now_s() - t1;
  for (size_t j = 0; j < got.size(); ++j, ++i) {
    const BlockKey key{query.namespace_seed, query.hashes[i]};
    if (got[j] == nullptr) {
      // A record that failed its checks: this request recomputes every later
      // block (or takes it from the remote tier). Their disk copies go, so
      // that write-through stores the recomputed ones (it skips keys the disk
      // holds) and a replaced or damaged directory heals in one pass instead
      // of one block per request.
      for (size_t k = i + 1; k < n; ++k) disk_->erase(BlockKey{query.namespace_seed, query.hashes[k]});
      return i;
    }
    c.records.push_back(got[j]);
    if (in_host[j]) {
      ++c.n_from_host;
      c.host_bytes += got[j]->size();
      continue;
    }
    ++c.n_from_disk;
    c.disk_bytes += got[j]->size();
    host_->insert(key, got[j]);  // onboard to host too; may push host records to disk
  }
  return i;
}

// The rest of the chain from the remote tier in one multi-get; what it
// returns goes into host RAM and down to disk as well.
size_t TierManager::onboard_from_remote(const ChainQuery& query, size_t i, OnboardCompletion& c) {
  const size_t n = query.hashes.size();
  std::vector<BlockKey> keys;
  std::vector<RecordExpectations> expected;
  keys.reserve(n - i);
  expected.reserve(n - i);
  for (size_t k = i; k < n; ++k) {
    keys.push_back(BlockKey{query.namespace_seed, query.hashes[k]});
    expected.push_back(expectations(query, k));
  }
  const double t0 = now_s();
  std::vector<RecordPtr> got = remote_->get_chain(keys, expected);
  const double seconds = now_s() - t0;
  if (got.empty()) {
    c.remote_miss_seconds = seconds;
    return i;
  }
  c.remote_seconds = seconds;
  for (size_t j = 0; j < got.size(); ++j, ++i) {
    c.records.push_back(got[j]);
    ++c.n_from_remote;
    c.remote_bytes += got[j]->size();
    host_->insert(keys[j], got[j]);
    queue_disk_write(keys[j], got[j], std::chrono::steady_clock::now());
  }
  return i;
}

void TierManager::wait_idle() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] {
      return active_jobs_ == 0 && onboard_queue_.empty() && offload_queue_.empty() && build_queue_.empty();
    });
  }
  if (remote_) remote_->wait_idle();
}

Status TierManager::clear() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (const OffloadJob& job : offload_queue_) pending_offload_bytes_ -= job.record->size();
    offload_queue_.clear();
    queued_disk_keys_.clear();
    idle_cv_.wait(lock, [this] {
      return active_jobs_ == 0 && onboard_queue_.empty() && offload_queue_.empty() && build_queue_.empty();
    });
  }
  host_->clear();
  if (disk_) return disk_->clear();
  return Status::ok_status();
}

Status TierManager::store_pin(const PinRecord& pin) {
  PREFIXD_CHECK(!pin.block_hashes.empty(), "store_pin of an empty chain");
  if (!disk_) return Status::ok_status();
  const std::vector<uint8_t> key = pin_record_key(pin.namespace_seed, pin.block_hashes.back());
  return disk_->put_pin(key, encode_pin_record(pin));
}

Status TierManager::erase_pin(uint64_t namespace_seed, const Hash128& last_block_hash) {
  if (!disk_) return Status::ok_status();
  return disk_->erase_pin(pin_record_key(namespace_seed, last_block_hash));
}

Result<TierManager::StoredPins> TierManager::stored_pins() {
  StoredPins out;
  if (!disk_) return out;
  Result<std::vector<DiskTier::StoredPin>> stored = disk_->pin_records();
  if (!stored.ok()) return stored.status();
  for (const DiskTier::StoredPin& p : stored.value()) {
    Result<PinRecord> pin = decode_pin_record(p.record);
    if (pin.ok()) {
      out.pins.push_back(std::move(pin).value());
      continue;
    }
    std::string key_hex;
    for (uint8_t b : p.key) {
      static const char* digits = "0123456789abcdef";
      key_hex += digits[b >> 4];
      key_hex += digits[b & 15];
    }
    out.damaged.push_back(key_hex + ": " + pin.message());
    (void)disk_->erase_pin(p.key);
  }
  return out;
}

void TierManager::mark_pinned(std::span<const BlockKey> keys, bool pinned) {
  host_->set_pinned(keys, pinned);
  if (disk_) disk_->set_pinned(keys, pinned);
}

TierManagerStats TierManager::stats() const {
  TierManagerStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = counters_;
    s.pending_offload_bytes = pending_offload_bytes_;
    s.disk_write_lag = disk_write_lag_.summary();
  }
  s.host = host_->stats();
  s.has_disk = disk_ != nullptr;
  if (disk_) s.disk = disk_->stats();
  s.has_remote = remote_ != nullptr;
  if (remote_) s.remote = remote_->stats();
  return s;
}

Result<uint64_t> TierManager::clear_remote() {
  if (!remote_) return Status::error("no remote tier is configured");
  return remote_->clear_pool();
}

int32_t TierManager::lookup_remote(std::span<const BlockKey> keys, std::string* error) const {
  if (error != nullptr) error->clear();
  if (!remote_ || keys.empty()) return 0;
  const std::chrono::milliseconds budget = 2 * options_.remote->timeout;
  return remote_->present_chain(keys, keys.size(), budget, error);
}

void TierManager::offload_snapshot(const BlockKey& key, std::span<const uint8_t> state,
                                   OffloadReason reason) {
  const bool write_through = options_.write_policy == WritePolicy::kWriteThrough;
  if (reason == OffloadReason::kPublished && !write_through) return;
  const std::vector<RecordPtr> pages = encode_snapshot_pages(
      options_.model_fingerprint, options_.geometry, key, state, options_.allocator);
  if (pages.empty()) return;
  uint64_t host_new = 0, host_bytes = 0, below = 0;
  for (uint32_t i = 0; i < pages.size(); ++i) {
    const BlockKey pk = snapshot_page_key(key, i, state.size());
    const HostInsert inserted = host_->insert(pk, pages[i]);
    if (inserted == HostInsert::kInserted) {
      ++host_new;
      host_bytes += pages[i]->size();
    }
    if (write_through || inserted == HostInsert::kDeclined) {
      write_below(pk, pages[i]);
      ++below;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.snapshots_offloaded;
  counters_.offload_host_blocks += host_new;
  counters_.offload_host_bytes += host_bytes;
  counters_.snapshot_pages_host_written += host_new;
  if (disk_) counters_.snapshot_pages_disk_queued += below;
  if (remote_) counters_.snapshot_pages_remote_queued += below;
}

bool TierManager::has_local_snapshot(const BlockKey& key, size_t n_bytes) const {
  const uint32_t n_pages = snapshot_page_count(options_.geometry, n_bytes);
  if (n_pages == 0) return false;
  for (uint32_t i = 0; i < n_pages; ++i) {
    const BlockKey pk = snapshot_page_key(key, i, n_bytes);
    if (!host_->contains(pk) && !(disk_ && disk_->contains(pk))) return false;
  }
  return true;
}

bool TierManager::has_snapshot(const BlockKey& key, size_t n_bytes) const {
  const uint32_t n_pages = snapshot_page_count(options_.geometry, n_bytes);
  if (n_pages == 0) return false;
  if (has_local_snapshot(key, n_bytes)) return true;
  if (!remote_) return false;
  const std::array<BlockKey, 2> probe{snapshot_page_key(key, 0, n_bytes),
                                      snapshot_page_key(key, n_pages - 1, n_bytes)};
  const size_t n_probe = n_pages == 1 ? 1 : 2;
  return remote_->present_chain(std::span<const BlockKey>(probe.data(), n_probe), n_probe,
                                2 * options_.remote->timeout) == static_cast<int32_t>(n_probe);
}

Result<std::vector<uint8_t>> TierManager::reject_snapshot(const BlockKey& key, size_t n_bytes,
                                                          std::span<const BlockKey> keys, SnapshotCheck why,
                                                          uint32_t page) {
  if (why != SnapshotCheck::kMissing) {
    for (const BlockKey& pk : keys) {  // a later write under the key can then be stored
      host_->erase(pk);
      if (disk_) disk_->erase(pk);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (why) {
      case SnapshotCheck::kMissing: ++counters_.snapshot_reads_missed; break;
      case SnapshotCheck::kWrongSize: ++counters_.snapshot_reads_rejected_size; break;
      case SnapshotCheck::kOtherModel: ++counters_.snapshot_reads_rejected_model; break;
      default: ++counters_.snapshot_reads_rejected_damaged; break;
    }
  }
  return Status::error(std::string(snapshot_check_name(why)) + ": state snapshot " + key.block_hash.hex() + " (" +
                       std::to_string(n_bytes) + " bytes), page " + std::to_string(page) + " of " +
                       std::to_string(keys.size()));
}

SnapshotCheck TierManager::gather_snapshot_pages(const BlockKey& key, size_t n_bytes, std::span<const BlockKey> keys,
                                                 std::vector<RecordPtr>& pages, std::vector<uint8_t>& from,
                                                 uint32_t* bad_page) {
  const auto n_pages = static_cast<uint32_t>(keys.size());
  std::vector<uint32_t> remote_wanted;
  const auto check = [&](uint32_t i) {
    *bad_page = i;
    return check_snapshot_page(pages[i]->bytes(), options_.model_fingerprint, options_.geometry, key, i, n_bytes,
                               nullptr);
  };
  for (uint32_t i = 0; i < n_pages; ++i) {
    *bad_page = i;
    pages[i] = host_->lookup(keys[i]);
    if (pages[i] == nullptr && disk_ && disk_->contains(keys[i])) {
      pages[i] = disk_->get(keys[i], nullptr);  // MAC, integrity, key; the page checks below
      if (pages[i] == nullptr) return SnapshotCheck::kDamaged;
      from[i] = 1;
    }
    if (pages[i] == nullptr) {
      if (!remote_) return SnapshotCheck::kMissing;
      remote_wanted.push_back(i);
      continue;
    }
    if (const SnapshotCheck c = check(i); c != SnapshotCheck::kOk) return c;
  }
  if (remote_wanted.empty()) return SnapshotCheck::kOk;
  std::vector<BlockKey> rkeys;
  std::vector<RecordExpectations> rexp;
  std::vector<std::vector<int32_t>> tokens(remote_wanted.size());
  for (size_t j = 0; j < remote_wanted.size(); ++j) {
    rkeys.push_back(keys[remote_wanted[j]]);
    rexp.push_back(snapshot_page_expectations(options_.model_fingerprint, options_.geometry, key, remote_wanted[j],
                                              n_bytes, tokens[j]));
  }
  const std::vector<RecordPtr> got = remote_->get_chain(rkeys, rexp);
  if (got.size() < remote_wanted.size()) {
    *bad_page = remote_wanted[got.size()];
    return SnapshotCheck::kMissing;
  }
  for (size_t j = 0; j < got.size(); ++j) {
    const uint32_t i = remote_wanted[j];
    pages[i] = got[j];
    from[i] = 2;
    if (const SnapshotCheck c = check(i); c != SnapshotCheck::kOk) return c;
  }
  return SnapshotCheck::kOk;
}

Result<std::vector<uint8_t>> TierManager::read_snapshot(const BlockKey& key, size_t n_bytes) {
  const uint32_t n_pages = snapshot_page_count(options_.geometry, n_bytes);
  std::vector<BlockKey> keys(n_pages);
  for (uint32_t i = 0; i < n_pages; ++i) keys[i] = snapshot_page_key(key, i, n_bytes);
  if (n_pages == 0) return reject_snapshot(key, n_bytes, keys, SnapshotCheck::kMissing, 0);
  std::vector<RecordPtr> pages(n_pages);
  std::vector<uint8_t> from(n_pages, 0);  // 0 host, 1 disk, 2 remote
  uint32_t bad_page = 0;
  if (const SnapshotCheck c = gather_snapshot_pages(key, n_bytes, keys, pages, from, &bad_page);
      c != SnapshotCheck::kOk) {
    return reject_snapshot(key, n_bytes, keys, c, bad_page);
  }
  std::vector<uint8_t> state;
  const SnapshotCheck assembled = assemble_snapshot(pages, n_bytes, &state);
  if (assembled != SnapshotCheck::kOk) return reject_snapshot(key, n_bytes, keys, assembled, 0);
  uint64_t n_host = 0, n_disk = 0, n_remote = 0;
  for (uint32_t i = 0; i < n_pages; ++i) {
    if (from[i] == 0) {
      ++n_host;
      continue;
    }
    (from[i] == 1 ? n_disk : n_remote) += 1;
    host_->insert(keys[i], pages[i]);
    if (from[i] == 2) queue_disk_write(keys[i], pages[i], std::chrono::steady_clock::now());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.snapshot_reads_ok;
  counters_.snapshot_pages_host_read += n_host;
  counters_.snapshot_pages_disk_read += n_disk;
  counters_.snapshot_pages_remote_read += n_remote;
  return state;
}

}  // namespace prefixd
