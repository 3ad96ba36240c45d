// DiskTier: block records in a RocksDB database (BlobDB values, WAL off), with
// byte-bounded approximate-LRU eviction and a per-deployment secret, both of
// which survive restarts. Every stored record carries a keyed MAC.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "storage/block_record.h"
#include "storage/record_mac.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace prefixd {

struct DiskTierOptions {
  std::string path;                      // database directory (created if missing)
  uint64_t capacity_bytes = 8ull << 30;  // bound on the sum of stored record sizes
  uint64_t min_blob_size = 4096;         // values at least this big go to blob files
  HostAllocator allocator = default_host_allocator();  // buffers returned by get()
  // After a failed write (no space left, an I/O error) writes stop: put()
  // refuses at once, counted, until this long has passed; then the next put()
  // calls RocksDB's Resume() and tries again.
  std::chrono::milliseconds write_retry_interval{2000};
  // Told one line when writes stop and one when they resume (at most one
  // "stopped" line a minute), on the thread that called put(). May be empty.
  std::function<void(const std::string&)> log_warning;
  // A database RocksDB finds damaged at open (a truncated or missing table
  // file, MANIFEST or CURRENT; a corrupt block the open reads) is refused,
  // or with this set, renamed to PATH.corrupt-YYYYmmdd-HHMMSS (kept 0700,
  // told to log_warning) and replaced by an empty one.
  bool reset_on_corruption = false;
  // The deployment secret from the operator (--cache-secret-file), shared by
  // replicas. Empty: the directory keeps its own, made at its first open. A
  // directory whose stored secret differs is emptied (its keys could never
  // match again) and then stores this one.
  std::optional<std::array<uint8_t, 16>> deployment_secret;
};

struct DiskTierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // sum of stored value sizes: record + MAC trailer (logical;
                            // blob files may hold garbage until RocksDB collects it)
  uint64_t blocks = 0;
  uint64_t hits = 0;             // get() returned a record that passed its checks
  uint64_t misses = 0;           // get() found nothing, or a record that failed (below)
  uint64_t evictions = 0;        // records removed by capacity
  uint64_t corrupt_records = 0;  // records that failed a check: deleted, counted as misses
  uint64_t unauthenticated_records = 0;  // of those, the ones whose MAC did not verify
  uint64_t io_errors = 0;        // RocksDB errors other than NotFound (reads: misses)
  uint64_t inserts = 0;          // records written
  uint64_t declined = 0;         // records larger than the whole capacity
  uint64_t write_errors = 0;     // records not written: the write failed (no space, I/O
                                 // error), or writes were stopped after such a failure
  bool writes_stopped = false;   // now: puts are refused until a retry succeeds
};

// Thread-safety: every method may be called from any thread. contains(),
// size queries and stats() only take a short in-memory lock and never wait on
// RocksDB, so the engine thread may call them. put(), get(), erase() and
// clear() do I/O and belong on tier I/O threads; mutations are serialized by
// a write lock, reads of values run in parallel.
//
// Layout: column family "default" (blob files) maps key -> record bytes ||
// RecordMac trailer (nonce, Poly1305 tag under a key derived from the
// deployment secret); "access" maps key -> (last-access sequence u64 LE,
// stored bytes u64 LE);
// "meta" holds the deployment secret and the layout version; "pins" holds
// TTL pin records (pin_record.h), written with the WAL so that a pin survives
// a crash. Block keys are
// namespace seed (8 bytes big-endian) || block hash (hi then lo, 8 bytes
// big-endian each). atomic_flush keeps the three families consistent with the
// WAL off: a crash loses recent writes, never half of one.
class DiskTier {
 public:
  using Key = std::array<uint8_t, 24>;
  static Key encode_key(const BlockKey& key);

  // Opens (or creates) the database and loads the key index from "access".
  // A damaged database fails with a message naming the directory and what to
  // do, unless options.reset_on_corruption moves it aside (never serves it).
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierOptions& options);
  // Flushes memtables (WAL is off) and closes the database.
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // 16 random bytes made on the first open of this directory, the same after
  // every reopen (or options.deployment_secret). Mixed into namespace seeds
  // so block keys stay valid.
  const std::array<uint8_t, 16>& deployment_secret() const { return secret_; }

  // Stores a record with its MAC trailer (overwrites the key), evicting least
  // recently used records first so that used_bytes stays within capacity. A
  // record larger than the capacity is declined: returns ok without storing it.
  // A failed write (the disk is full: RocksDB's NoSpace, or another I/O
  // error) changes nothing in the index, counts write_errors and stops
  // writes; while stopped, put() fails at once (counted) until
  // write_retry_interval has passed, when it calls RocksDB's Resume() (which
  // retries the flush that failed) and tries again. Reads go on throughout.
  Status put(const BlockKey& key, std::span<const uint8_t> record);
  // Reads a record and checks it: always its MAC, its integrity and that it
  // belongs to `key`; also every field of `expected` when not null. A record that fails
  // is deleted and counted (corrupt_records) and the result is a miss
  // (nullptr); so is one RocksDB cannot read back (a block or blob whose
  // checksum fails). A hit refreshes the key's LRU position.
  RecordPtr get(const BlockKey& key, const RecordExpectations* expected);
  // In-memory index only; never touches RocksDB.
  bool contains(const BlockKey& key) const;
  // Removes a record if present. Returns whether it was indexed.
  bool erase(const BlockKey& key);
  // Removes every record (keeps the deployment secret and the pin records).
  Status clear();

  // Pin records ("pins" family; the bytes are pin_record.h's). put_pin
  // overwrites a key; pin_records() lists them all, in key order.
  Status put_pin(std::span<const uint8_t> key, std::span<const uint8_t> record);
  Status erase_pin(std::span<const uint8_t> key);
  struct StoredPin {
    std::vector<uint8_t> key;
    std::vector<uint8_t> record;
  };
  Result<std::vector<StoredPin>> pin_records() const;
  // Marks (pinned = true) or unmarks the blocks of a pinned chain: a count
  // per key, so overlapping pins add up; keys need not be stored (a block
  // written later is marked from the start). put() evicts every unmarked
  // record before a marked one. In memory only: the owner marks again after
  // a restart from pin_records().
  void set_pinned(std::span<const BlockKey> keys, bool pinned);
  uint64_t pinned_blocks() const;  // stored records that are marked
  // Writes memtables to disk (all column families, atomically).
  Status flush();
  DiskTierStats stats() const;

  // Test hooks: replace the stored value of `key` through RocksDB, leaving the
  // index as it is: with raw bytes (bit flips, truncation, a forged record
  // with no valid MAC), or with a record and a valid MAC trailer.
  Status debug_overwrite_value(const BlockKey& key, std::span<const uint8_t> bytes);
  Status debug_overwrite_signed(const BlockKey& key, std::span<const uint8_t> record);

 private:
  struct IndexEntry {
    uint64_t access_seq = 0;
    uint64_t record_bytes = 0;
  };
  struct KeyHasher {
    size_t operator()(const Key& k) const;
  };

  DiskTier() = default;
  // One attempt at open(); *damaged tells a database RocksDB found damaged
  // from other failures (in use, permissions).
  static Result<std::unique_ptr<DiskTier>> open_once(const DiskTierOptions& options,
                                                     bool* damaged);
  Status load_index();
  Status load_or_create_secret();
  // Empties the record families (before records had MACs; another secret).
  Status drop_records(const char* why);
  // get()'s steps: read the value and verify it (nullptr and *miss on a
  // miss); count a miss, removing the value where *miss says; count a hit
  // and refresh its LRU position.
  struct GetMiss {
    bool remove = false;           // delete the value and its index entry
    bool corrupt = false;          // count it in corrupt_records
    bool unauthenticated = false;  // and in unauthenticated_records
    bool io_error = false;         // count an io_error
  };
  RecordPtr read_checked(const Key& k, const BlockKey& key, const RecordExpectations* expected,
                         GetMiss* miss);
  void count_miss(const Key& k, const GetMiss& miss);
  void count_hit_locked_write(const Key& k);
  // Deletes a key's record and access entry and drops it from the index.
  void remove_locked_write(const Key& key, bool count_corrupt, bool unauthenticated);
  // Write-stop bookkeeping of put() (write_mu_ held): whether a put may be
  // tried now, and what its outcome means for the stopped state.
  bool may_write_locked_write();
  void on_write_failed_locked_write(const std::string& error);
  void on_write_ok_locked_write();
  // put()'s index update once its batch is written (write_mu_ held): the
  // victims and k's old entry leave, k's new entry (access seq, n_bytes)
  // comes in.
  void index_written_put_locked_write(const Key& k, uint64_t seq, uint64_t n_bytes,
                                      const std::vector<Key>& victims);

  DiskTierOptions options_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* records_cf_ = nullptr;  // "default"
  rocksdb::ColumnFamilyHandle* access_cf_ = nullptr;   // "access"
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;     // "meta"
  rocksdb::ColumnFamilyHandle* pins_cf_ = nullptr;     // "pins"
  std::array<uint8_t, 16> secret_{};
  std::unique_ptr<RecordMac> mac_;  // keyed by secret_

  std::mutex write_mu_;  // serializes every RocksDB mutation; taken before index_mu_
  // Guarded by write_mu_: the write-stop state (see put()).
  bool writes_stopped_ = false;
  std::chrono::steady_clock::time_point write_retry_at_{};
  std::chrono::steady_clock::time_point last_stop_logged_{};
  bool stop_logged_ = false;          // the current stop was told to log_warning
  bool stop_logged_before_ = false;   // some stop was (last_stop_logged_ is set)
  uint64_t write_errors_at_stop_ = 0;  // stats_.write_errors when writes stopped

  mutable std::mutex index_mu_;  // guards the members below
  std::unordered_map<Key, IndexEntry, KeyHasher> index_;
  std::map<uint64_t, Key> lru_;  // access_seq -> key, oldest first
  std::unordered_map<Key, int32_t, KeyHasher> pin_counts_;  // set_pinned marks (> 0)
  uint64_t next_seq_ = 1;
  DiskTierStats stats_;
};

}  // namespace prefixd
