// DiskTier on RocksDB. The in-memory index (key -> last access, size) is
// rebuilt at open from the small "access" column family, so opening never
// reads the blob values, and contains() answers without I/O.
#include "storage/disk_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/private_files.h"
#include "storage/signed_record.h"

namespace prefixd {
namespace {

constexpr char kAccessFamily[] = "access";
constexpr char kMetaFamily[] = "meta";
constexpr char kPinsFamily[] = "pins";
constexpr char kSecretKey[] = "deployment_secret";
constexpr char kLayoutKey[] = "layout_version";
constexpr char kLayoutVersion[] = "prefixd-disk-tier-2";  // records carry a MAC trailer
constexpr char kLayoutWithoutMacs[] = "prefixd-disk-tier-1";

void put_be64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
void put_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

rocksdb::Slice key_slice(const DiskTier::Key& k) {
  return rocksdb::Slice(reinterpret_cast<const char*>(k.data()), k.size());
}

// Access value: (access_seq u64 LE, record_bytes u64 LE).
std::array<uint8_t, 16> access_value(uint64_t seq, uint64_t record_bytes) {
  std::array<uint8_t, 16> v;
  put_le64(v.data(), seq);
  put_le64(v.data() + 8, record_bytes);
  return v;
}

rocksdb::Slice bytes_slice(const uint8_t* p, size_t n) {
  return rocksdb::Slice(reinterpret_cast<const char*>(p), n);
}

rocksdb::WriteOptions no_wal() {
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  return wo;
}

Status rocks_error(const char* what, const rocksdb::Status& s) {
  return Status::error(std::string("disk tier: ") + what + ": " + s.ToString());
}

// Who holds RocksDB's LOCK file in `dir` (a POSIX record lock): "process N"
// from F_GETLK, or "process" when that cannot tell. Only for a lock held by
// another process: closing this descriptor would drop this process's own
// record locks on the file.
std::string lock_holder_name(const std::string& dir) {
  const int fd = ::open((dir + "/LOCK").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "process";
  struct flock query {};
  query.l_type = F_WRLCK;
  query.l_whence = SEEK_SET;
  std::string name = "process";
  if (fcntl(fd, F_GETLK, &query) == 0 && query.l_type != F_UNLCK && query.l_pid > 0) {
    name = "process " + std::to_string(query.l_pid);
    std::string comm;
    std::ifstream in("/proc/" + std::to_string(query.l_pid) + "/comm");
    if (std::getline(in, comm) && !comm.empty()) name += " (" + comm + ")";
  }
  ::close(fd);
  return name;
}

// RocksDB's own recovery from a full disk waits (polling every 5 s) for free
// space of a whole default memtable (64 MiB) and meanwhile refuses Resume()
// as busy: on a small or nearly full disk it never resumes. The tier retries
// by itself instead (DiskTier::put), so RocksDB's automatic recovery is off.
class ManualRecovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// Damage, as RocksDB reports it at open: a Corruption status (a truncated
// table file or MANIFEST, a bad checksum, a file size that does not match the
// MANIFEST), or a file the MANIFEST names that is gone.
bool is_damage(const rocksdb::Status& s) {
  if (s.IsCorruption()) return true;
  const std::string text = s.ToString();
  return (s.IsIOError() || s.IsNotFound() || s.IsPathNotFound()) &&
         text.find("While lock file") == std::string::npos &&
         (text.find("No such file") != std::string::npos ||
          text.find("does not exist") != std::string::npos);
}

// A directory holding database files (MANIFEST, table or blob files) but no
// CURRENT file. An empty or new directory is fine.
Status check_current_file(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir + "/CURRENT", ec)) return Status::ok_status();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool db_file = name.rfind("MANIFEST-", 0) == 0 || name.ends_with(".sst") ||
                         name.ends_with(".blob");
    if (db_file) return Status::error("its CURRENT file is missing, beside " + name);
  }
  return Status::ok_status();
}

// Renames `dir` to DIR.corrupt-YYYYmmdd-HHMMSS (a -N suffix when taken) and
// makes it 0700. Returns the new name.
Result<std::string> move_aside(const std::string& dir) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  std::string target = trimmed + ".corrupt-" + stamp;
  for (int n = 1; n < 1000 && ::access(target.c_str(), F_OK) == 0; ++n) {
    target = trimmed + ".corrupt-" + stamp + "-" + std::to_string(n);
  }
  if (::rename(trimmed.c_str(), target.c_str()) != 0) {
    return Status::error("rename to '" + target + "': " + std::strerror(errno));
  }
  if (::chmod(target.c_str(), 0700) != 0) {
    return Status::error("chmod 0700 '" + target + "': " + std::strerror(errno));
  }
  return target;
}

// The database's options: families flushed atomically (they stay consistent
// with the WAL off), RocksDB's errors recovered by hand (ManualRecovery).
rocksdb::DBOptions db_options() {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.atomic_flush = true;  // families stay consistent with the WAL off
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 4;
  db_options.listeners.push_back(std::make_shared<ManualRecovery>());
  return db_options;
}

// "default" holds the records in blob files; "access" and "meta" are small.
std::vector<rocksdb::ColumnFamilyDescriptor> column_families(const DiskTierOptions& options) {
  rocksdb::ColumnFamilyOptions records_options;
  records_options.enable_blob_files = true;
  records_options.min_blob_size = options.min_blob_size;
  records_options.blob_compression_type = rocksdb::kNoCompression;  // KV bytes do not compress
  records_options.enable_blob_garbage_collection = true;  // reclaim space of evicted blobs
  // Records wait in the memtable (RAM outside both tiers' budgets, lost in a
  // crash with the WAL off) until a flush writes them: at most a sixteenth
  // of the capacity, between 1 and 64 MiB (RocksDB's default).
  records_options.write_buffer_size = static_cast<size_t>(
      std::clamp<uint64_t>(options.capacity_bytes / 16, 1ull << 20, 64ull << 20));
  rocksdb::ColumnFamilyOptions small_options;
  return {
      {rocksdb::kDefaultColumnFamilyName, records_options},
      {kAccessFamily, small_options},
      {kMetaFamily, small_options},
      {kPinsFamily, small_options},
  };
}

}  // namespace

size_t DiskTier::KeyHasher::operator()(const Key& k) const {
  uint64_t a, b, c;
  std::memcpy(&a, k.data(), 8);
  std::memcpy(&b, k.data() + 8, 8);
  std::memcpy(&c, k.data() + 16, 8);
  return static_cast<size_t>(c ^ (b * 0x9E3779B97F4A7C15ull) ^ (a * 0xC2B2AE3D27D4EB4Full));
}

DiskTier::Key DiskTier::encode_key(const BlockKey& key) {
  Key k;
  put_be64(k.data(), key.namespace_seed);
  put_be64(k.data() + 8, key.block_hash.hi);
  put_be64(k.data() + 16, key.block_hash.lo);
  return k;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& options) {
  if (options.path.empty()) return Status::error("disk tier: empty database path");
  if (options.capacity_bytes == 0) return Status::error("disk tier: capacity_bytes is 0");
  bool damaged = false;
  auto tier = open_once(options, &damaged);
  if (tier.ok() || !damaged) return tier;
  if (!options.reset_on_corruption) {
    return Status::error("disk tier: the database in '" + options.path + "' is damaged (" +
                         tier.message() +
                         "); nothing is served from it. It is only a cache: move the directory "
                         "aside or delete it, or start with --disk-cache-reset-on-corruption to "
                         "have prefixd move it to '" + options.path +
                         ".corrupt-<time>' and start empty");
  }
  auto aside = move_aside(options.path);
  if (!aside.ok()) {
    return Status::error("disk tier: the database in '" + options.path + "' is damaged (" +
                         tier.message() + ") and cannot be moved aside: " + aside.message());
  }
  if (options.log_warning) {
    options.log_warning("disk tier: the database in '" + options.path + "' is damaged (" +
                        tier.message() + "); moved it to '" + *aside +
                        "' (kept for inspection, 0700) and started an empty one");
  }
  tier = open_once(options, &damaged);
  if (!tier.ok()) {
    return Status::error("disk tier: after moving the damaged database aside: " + tier.message());
  }
  return tier;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open_once(const DiskTierOptions& options,
                                                      bool* damaged) {
  *damaged = false;
  // The records hold prompt token ids and the deployment secret: the directory
  // is created 0700, and one that another user owns or may write is refused.
  // RocksDB creates its files with the umask (the daemon sets 0077); inside a
  // 0700 directory nobody else can reach them either way.
  if (Status st = make_private_dir(options.path); !st.ok()) {
    return Status::error("disk tier: " + st.message());
  }
  // Without CURRENT RocksDB would create a new database over the old files
  // and delete them as obsolete: a database that lost its CURRENT is damaged.
  if (Status st = check_current_file(options.path); !st.ok()) {
    *damaged = true;
    return st;
  }
  std::unique_ptr<DiskTier> tier(new DiskTier());
  tier->options_ = options;
  tier->stats_.capacity_bytes = options.capacity_bytes;

  const std::vector<rocksdb::ColumnFamilyDescriptor> families = column_families(options);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options(), options.path, families, &handles, &tier->db_);
  if (!s.ok() && s.ToString().find("While lock file") != std::string::npos) {
    return Status::error("disk tier: directory '" + options.path + "' is in use by another " +
                         lock_holder_name(options.path) +
                         " (RocksDB's LOCK): two daemons cannot share one disk cache directory; "
                         "give each its own, or stop the other");
  }
  if (!s.ok()) {
    *damaged = is_damage(s);
    return *damaged ? Status::error(s.ToString()) : rocks_error("open", s);
  }
  tier->records_cf_ = handles[0];
  tier->access_cf_ = handles[1];
  tier->meta_cf_ = handles[2];
  tier->pins_cf_ = handles[3];

  // Reading the meta and access families may meet a damaged block too.
  Status st = tier->load_or_create_secret();
  if (st.ok()) {
    tier->mac_ = std::make_unique<RecordMac>(tier->secret_);
    st = tier->load_index();
  }
  if (!st.ok()) {
    *damaged = st.message().find("Corruption") != std::string::npos;
    return st;  // the tier's destructor closes the database
  }
  return tier;
}

DiskTier::~DiskTier() {
  if (db_ == nullptr) return;
  (void)flush();
  for (auto* cf : {records_cf_, access_cf_, meta_cf_, pins_cf_}) {
    if (cf != nullptr) db_->DestroyColumnFamilyHandle(cf);
  }
  db_->Close();
  delete db_;
}

Status DiskTier::load_or_create_secret() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kLayoutKey, &value);
  if (s.ok() && value == kLayoutWithoutMacs) {
    Status st = drop_records("drop records written without MACs");
    if (!st.ok()) return st;
    value = kLayoutVersion;
  }
  if (s.ok() && value != kLayoutVersion) {
    return Status::error("disk tier: database layout '" + value + "' is not " + kLayoutVersion);
  }
  if (!s.ok() && !s.IsNotFound()) return rocks_error("read layout version", s);
  s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kSecretKey, &value);
  if (!s.ok() && !s.IsNotFound()) return rocks_error("read deployment secret", s);
  const bool stored = s.ok() && value.size() == secret_.size();
  if (options_.deployment_secret) {
    secret_ = *options_.deployment_secret;
    if (stored && std::memcmp(value.data(), secret_.data(), secret_.size()) == 0) {
      return Status::ok_status();
    }
    if (stored) {
      // Written under another secret: none of its keys can match again.
      Status st = drop_records("drop records of another deployment secret");
      if (!st.ok()) return st;
    }
  } else if (stored) {
    std::memcpy(secret_.data(), value.data(), secret_.size());
    return Status::ok_status();
  } else {
    // First open (or a damaged secret: a new one only turns old keys into misses).
    std::random_device rd;
    for (size_t i = 0; i < secret_.size(); i += 4) {
      const uint32_t r = rd();
      std::memcpy(secret_.data() + i, &r, 4);
    }
  }
  rocksdb::WriteBatch batch;
  batch.Put(meta_cf_, kLayoutKey, kLayoutVersion);
  batch.Put(meta_cf_, kSecretKey, bytes_slice(secret_.data(), secret_.size()));
  rocksdb::WriteOptions durable;
  durable.sync = true;  // the secret must survive a crash right after first start
  s = db_->Write(durable, &batch);
  if (!s.ok()) return rocks_error("write deployment secret", s);
  s = db_->Flush(rocksdb::FlushOptions(), meta_cf_);
  if (!s.ok()) return rocks_error("flush deployment secret", s);
  return Status::ok_status();
}

Status DiskTier::drop_records(const char* why) {
  // Records written before MACs cannot be told from forged ones, and those of
  // another secret are unreachable: start empty (the secret is kept or set by
  // the caller).
  const std::string end(sizeof(Key) + 1, '\xff');  // above every 24-byte key
  rocksdb::WriteBatch batch;
  for (auto* cf : {records_cf_, access_cf_, pins_cf_}) batch.DeleteRange(cf, rocksdb::Slice(), end);
  batch.Put(meta_cf_, kLayoutKey, kLayoutVersion);
  rocksdb::WriteOptions durable;
  durable.sync = true;
  rocksdb::Status s = db_->Write(durable, &batch);
  if (!s.ok()) return rocks_error(why, s);
  return Status::ok_status();
}

Status DiskTier::load_index() {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), access_cf_));
  std::vector<std::string> bad_keys;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != sizeof(Key) || v.size() != 16) {
      bad_keys.push_back(k.ToString());
      continue;
    }
    Key key;
    std::memcpy(key.data(), k.data(), key.size());
    IndexEntry e;
    e.access_seq = get_le64(reinterpret_cast<const uint8_t*>(v.data()));
    e.record_bytes = get_le64(reinterpret_cast<const uint8_t*>(v.data()) + 8);
    if (lru_.count(e.access_seq) != 0) {
      bad_keys.push_back(k.ToString());  // a sequence is never reused; drop the duplicate
      continue;
    }
    index_.emplace(key, e);
    lru_.emplace(e.access_seq, key);
    stats_.used_bytes += e.record_bytes;
    next_seq_ = std::max(next_seq_, e.access_seq + 1);
  }
  if (!it->status().ok()) return rocks_error("scan access index", it->status());
  stats_.blocks = index_.size();
  for (const std::string& k : bad_keys) {
    rocksdb::WriteBatch batch;
    batch.Delete(access_cf_, k);
    batch.Delete(records_cf_, k);
    (void)db_->Write(no_wal(), &batch);
  }
  // A database written with a larger capacity: evict down to the new bound.
  if (stats_.used_bytes > options_.capacity_bytes) {
    rocksdb::WriteBatch batch;
    while (stats_.used_bytes > options_.capacity_bytes && !lru_.empty()) {
      const Key victim = lru_.begin()->second;
      lru_.erase(lru_.begin());
      stats_.used_bytes -= index_[victim].record_bytes;
      index_.erase(victim);
      ++stats_.evictions;
      batch.Delete(records_cf_, key_slice(victim));
      batch.Delete(access_cf_, key_slice(victim));
    }
    stats_.blocks = index_.size();
    rocksdb::Status s = db_->Write(no_wal(), &batch);
    if (!s.ok()) return rocks_error("evict at open", s);
  }
  return Status::ok_status();
}

Status DiskTier::put(const BlockKey& key, std::span<const uint8_t> record) {
  const Key k = encode_key(key);
  const uint64_t n_bytes = record.size() + RecordMac::kTrailerBytes;
  const RecordMac::Trailer trailer = mac_->sign(record);  // before the lock: it reads every byte
  std::lock_guard<std::mutex> write_lock(write_mu_);
  if (!may_write_locked_write()) {
    return Status::error("disk tier: writes are stopped after a failed write (retried every " +
                         std::to_string(options_.write_retry_interval.count()) + " ms)");
  }
  // The index changes only once the batch is written: a failed write (disk
  // full) leaves it describing what RocksDB holds. Every mutation holds
  // write_mu_, so the entries read here stay as they are until then.
  rocksdb::WriteBatch batch;
  std::vector<Key> victims;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    if (n_bytes > options_.capacity_bytes) {
      ++stats_.declined;
      return Status::ok_status();
    }
    // Replacing a key: its old bytes leave first.
    uint64_t used = stats_.used_bytes;
    if (auto old = index_.find(k); old != index_.end()) used -= old->second.record_bytes;
    // Least recently used first; records of pinned chains only when the
    // unpinned ones do not make room.
    for (const bool take_pinned : {false, true}) {
      for (auto it = lru_.begin(); it != lru_.end() && used + n_bytes > options_.capacity_bytes; ++it) {
        if (it->second == k || (pin_counts_.count(it->second) != 0) != take_pinned) continue;
        used -= index_.at(it->second).record_bytes;
        victims.push_back(it->second);
        batch.Delete(records_cf_, key_slice(it->second));
        batch.Delete(access_cf_, key_slice(it->second));
      }
    }
    PREFIXD_CHECK(used + n_bytes <= options_.capacity_bytes, "disk tier accounting: bytes used with no entries");
    seq = next_seq_++;
  }
  const auto access = access_value(seq, n_bytes);
  const rocksdb::Slice value_parts[2] = {bytes_slice(record.data(), record.size()),
                                         bytes_slice(trailer.data(), trailer.size())};
  const rocksdb::Slice key_part = key_slice(k);
  batch.Put(records_cf_, rocksdb::SliceParts(&key_part, 1), rocksdb::SliceParts(value_parts, 2));
  batch.Put(access_cf_, key_slice(k), bytes_slice(access.data(), access.size()));
  rocksdb::Status s = db_->Write(no_wal(), &batch);
  if (!s.ok()) {
    on_write_failed_locked_write(s.ToString());
    return rocks_error("put", s);
  }
  on_write_ok_locked_write();
  index_written_put_locked_write(k, seq, n_bytes, victims);
  return Status::ok_status();
}

void DiskTier::index_written_put_locked_write(const Key& k, uint64_t seq, uint64_t n_bytes,
                                              const std::vector<Key>& victims) {
  std::lock_guard<std::mutex> lock(index_mu_);
  auto drop = [this](const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    stats_.used_bytes -= it->second.record_bytes;
    lru_.erase(it->second.access_seq);
    index_.erase(it);
  };
  drop(k);
  for (const Key& victim : victims) drop(victim);
  stats_.evictions += victims.size();
  index_[k] = IndexEntry{seq, n_bytes};
  lru_.emplace(seq, k);
  stats_.used_bytes += n_bytes;
  stats_.blocks = index_.size();
  ++stats_.inserts;
}

bool DiskTier::may_write_locked_write() {
  if (!writes_stopped_) return true;
  if (std::chrono::steady_clock::now() >= write_retry_at_) {
    // RocksDB stops writing after a failed flush (a "background error") and
    // retries by itself once space returns; Resume() asks for that retry now.
    // It answers ok when no error is left, an error when the flush fails again.
    (void)db_->Resume();
    return true;
  }
  std::lock_guard<std::mutex> lock(index_mu_);
  ++stats_.write_errors;
  return false;
}

void DiskTier::on_write_failed_locked_write(const std::string& error) {
  const auto now = std::chrono::steady_clock::now();
  const bool was_stopped = writes_stopped_;
  writes_stopped_ = true;
  write_retry_at_ = now + options_.write_retry_interval;
  uint64_t n_errors;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    ++stats_.io_errors;
    ++stats_.write_errors;
    stats_.writes_stopped = true;
    n_errors = stats_.write_errors;
  }
  if (was_stopped) return;
  write_errors_at_stop_ = n_errors - 1;
  // One line per stop, and at most one a minute when the disk flaps.
  stop_logged_ = !stop_logged_before_ || now - last_stop_logged_ >= std::chrono::minutes(1);
  if (!stop_logged_ || !options_.log_warning) return;
  stop_logged_before_ = true;
  last_stop_logged_ = now;
  options_.log_warning("disk tier '" + options_.path + "': a write failed (" + error +
                       "); disk writes stop, requests are served as before, and a write is "
                       "retried every " +
                       std::to_string(options_.write_retry_interval.count()) +
                       " ms (prefixd_disk_write_errors_total counts the records not written)");
}

void DiskTier::on_write_ok_locked_write() {
  if (!writes_stopped_) return;
  writes_stopped_ = false;
  uint64_t n_lost;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    stats_.writes_stopped = false;
    n_lost = stats_.write_errors - write_errors_at_stop_;
  }
  if (stop_logged_ && options_.log_warning) {
    options_.log_warning("disk tier '" + options_.path + "': writes resumed; " +
                         std::to_string(n_lost) + " records were not written while stopped");
  }
}

void DiskTier::remove_locked_write(const Key& k, bool count_corrupt, bool unauthenticated) {
  rocksdb::WriteBatch batch;
  batch.Delete(records_cf_, key_slice(k));
  batch.Delete(access_cf_, key_slice(k));
  rocksdb::Status s = db_->Write(no_wal(), &batch);
  std::lock_guard<std::mutex> lock(index_mu_);
  if (!s.ok()) ++stats_.io_errors;
  if (count_corrupt) ++stats_.corrupt_records;
  if (unauthenticated) ++stats_.unauthenticated_records;
  auto it = index_.find(k);
  if (it == index_.end()) return;
  stats_.used_bytes -= it->second.record_bytes;
  lru_.erase(it->second.access_seq);
  index_.erase(it);
  stats_.blocks = index_.size();
}

RecordPtr DiskTier::get(const BlockKey& key, const RecordExpectations* expected) {
  const Key k = encode_key(key);
  GetMiss miss;
  RecordPtr record = read_checked(k, key, expected, &miss);
  if (!record) {
    count_miss(k, miss);
    return nullptr;
  }
  std::lock_guard<std::mutex> write_lock(write_mu_);
  count_hit_locked_write(k);
  return record;
}

RecordPtr DiskTier::read_checked(const Key& k, const BlockKey& key,
                                 const RecordExpectations* expected, GetMiss* miss) {
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    if (index_.count(k) == 0) return nullptr;  // a plain miss
  }
  rocksdb::PinnableSlice value;
  rocksdb::ReadOptions read_options;
  // RocksDB's own checksums are not verified on this read: the record
  // carries a keyed MAC over every byte and names its own key and tokens
  // (all checked below), so a damaged table block that points elsewhere, or
  // a damaged blob, is caught there and becomes a counted miss. Verifying
  // here too cost a restart's first disk hit about 80 ms per 46 MB (Debian's
  // RocksDB computes the blobs' CRC32C in software).
  read_options.verify_checksums = false;
  rocksdb::Status s = db_->Get(read_options, records_cf_, key_slice(k), &value);
  if (s.IsNotFound()) {  // lost in a crash (WAL off) or removed meanwhile
    *miss = GetMiss{.remove = true};
    return nullptr;
  }
  if (s.IsCorruption()) {  // RocksDB's checksum failed: the record is gone for good
    *miss = GetMiss{.remove = true, .corrupt = true, .io_error = true};
    return nullptr;
  }
  if (!s.ok()) {
    *miss = GetMiss{.io_error = true};
    return nullptr;
  }
  // A value too short for a trailer fails the MAC like any other forgery.
  const std::optional<SignedValue> parts = split_signed_value(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  if (!parts) {
    *miss = GetMiss{.remove = true, .corrupt = true, .unauthenticated = true};
    return nullptr;
  }
  RecordMac::Trailer trailer;
  std::copy(parts->trailer.begin(), parts->trailer.end(), trailer.begin());
  // Copy first, then check the copy (it is hot in cache after the copy).
  const size_t record_bytes = parts->record.size();
  std::shared_ptr<RecordBuffer> record = RecordBuffer::allocate(record_bytes, options_.allocator);
  if (!record) return nullptr;  // out of host memory: a plain miss
  std::memcpy(record->mutable_data(), parts->record.data(), record_bytes);
  value.Reset();
  const SignedRecordCheck check =
      verify_signed_record(*mac_, record->bytes(), trailer, key, expected);
  if (!check.ok()) {
    *miss = GetMiss{.remove = true, .corrupt = true, .unauthenticated = !check.authentic};
    return nullptr;
  }
  return record;
}

void DiskTier::count_miss(const Key& k, const GetMiss& miss) {
  std::unique_lock<std::mutex> write_lock(write_mu_, std::defer_lock);
  if (miss.remove) {
    write_lock.lock();
    remove_locked_write(k, miss.corrupt, miss.unauthenticated);
  }
  std::lock_guard<std::mutex> lock(index_mu_);
  if (miss.io_error) ++stats_.io_errors;
  ++stats_.misses;
}

void DiskTier::count_hit_locked_write(const Key& k) {
  // Refresh the LRU position, in memory and in "access" (so it survives restart).
  uint64_t seq = 0;
  uint64_t n_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    ++stats_.hits;
    auto it = index_.find(k);
    if (it == index_.end()) return;  // erased meanwhile: the record is still a valid answer
    lru_.erase(it->second.access_seq);
    seq = next_seq_++;
    it->second.access_seq = seq;
    n_bytes = it->second.record_bytes;
    lru_.emplace(seq, k);
  }
  const auto access = access_value(seq, n_bytes);
  const rocksdb::Status s =
      db_->Put(no_wal(), access_cf_, key_slice(k), bytes_slice(access.data(), access.size()));
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(index_mu_);
    ++stats_.io_errors;
  }
}

bool DiskTier::contains(const BlockKey& key) const {
  const Key k = encode_key(key);
  std::lock_guard<std::mutex> lock(index_mu_);
  return index_.count(k) != 0;
}

bool DiskTier::erase(const BlockKey& key) {
  const Key k = encode_key(key);
  std::lock_guard<std::mutex> write_lock(write_mu_);
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    if (index_.count(k) == 0) return false;
  }
  remove_locked_write(k, /*count_corrupt=*/false, /*unauthenticated=*/false);
  return true;
}

Status DiskTier::clear() {
  std::lock_guard<std::mutex> write_lock(write_mu_);
  const std::string end(sizeof(Key) + 1, '\xff');  // above every 24-byte key
  for (auto* cf : {records_cf_, access_cf_}) {
    rocksdb::Status s = db_->DeleteRange(no_wal(), cf, rocksdb::Slice(), end);
    if (!s.ok()) return rocks_error("clear", s);
  }
  std::lock_guard<std::mutex> lock(index_mu_);
  index_.clear();
  lru_.clear();
  stats_.used_bytes = 0;
  stats_.blocks = 0;
  return Status::ok_status();
}

Status DiskTier::flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  rocksdb::Status s = db_->Flush(fo, {records_cf_, access_cf_, meta_cf_, pins_cf_});
  if (!s.ok()) return rocks_error("flush", s);
  return Status::ok_status();
}

Status DiskTier::put_pin(std::span<const uint8_t> key, std::span<const uint8_t> record) {
  std::lock_guard<std::mutex> write_lock(write_mu_);
  rocksdb::Status s = db_->Put(rocksdb::WriteOptions(), pins_cf_, bytes_slice(key.data(), key.size()),
                               bytes_slice(record.data(), record.size()));
  if (!s.ok()) return rocks_error("put pin", s);
  return Status::ok_status();
}

Status DiskTier::erase_pin(std::span<const uint8_t> key) {
  std::lock_guard<std::mutex> write_lock(write_mu_);
  rocksdb::Status s = db_->Delete(rocksdb::WriteOptions(), pins_cf_, bytes_slice(key.data(), key.size()));
  if (!s.ok()) return rocks_error("erase pin", s);
  return Status::ok_status();
}

Result<std::vector<DiskTier::StoredPin>> DiskTier::pin_records() const {
  std::vector<StoredPin> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), pins_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    out.push_back(StoredPin{std::vector<uint8_t>(k.data(), k.data() + k.size()),
                            std::vector<uint8_t>(v.data(), v.data() + v.size())});
  }
  if (!it->status().ok()) return rocks_error("read pins", it->status());
  return out;
}

void DiskTier::set_pinned(std::span<const BlockKey> keys, bool pinned) {
  std::lock_guard<std::mutex> lock(index_mu_);
  for (const BlockKey& key : keys) {
    const Key k = encode_key(key);
    if (pinned) {
      ++pin_counts_[k];
    } else if (auto it = pin_counts_.find(k); it != pin_counts_.end() && --it->second <= 0) {
      pin_counts_.erase(it);
    }
  }
}

uint64_t DiskTier::pinned_blocks() const {
  std::lock_guard<std::mutex> lock(index_mu_);
  uint64_t n = 0;
  for (const auto& [k, count] : pin_counts_) n += index_.count(k);
  return n;
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lock(index_mu_);
  return stats_;
}

Status DiskTier::debug_overwrite_signed(const BlockKey& key, std::span<const uint8_t> record) {
  return debug_overwrite_value(key, sign_record_value(*mac_, record));
}

Status DiskTier::debug_overwrite_value(const BlockKey& key, std::span<const uint8_t> bytes) {
  const Key k = encode_key(key);
  std::lock_guard<std::mutex> write_lock(write_mu_);
  rocksdb::Status s =
      db_->Put(no_wal(), records_cf_, key_slice(k), bytes_slice(bytes.data(), bytes.size()));
  if (!s.ok()) return rocks_error("debug overwrite", s);
  return Status::ok_status();
}

}  // namespace prefixd
