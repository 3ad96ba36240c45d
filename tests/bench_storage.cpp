// Benchmark: host and disk tier write/read bandwidth for smol-135m-sized block
// records (block size 16: 30 layers x K,V x 16 x 3 heads x 64 x f16 = 368640
// payload bytes), plus TierManager onboarding of a 2000-token chain.
// Usage: bench_storage [n_blocks=256] [dir=/tmp]. The page cache is not dropped:
// disk reads after reopen are mostly served from it (says so in the output).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "storage/disk_tier.h"
#include "storage/host_tier.h"
#include "storage/record_slab_allocator.h"
#include "storage/tier_manager.h"

using namespace prefixd;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const BlockGeometry kSmol{16, 30, 3, 64, kKvDtypeF16};
const Hash128 kFingerprint{0xF00D, 0xBEEF};
constexpr uint64_t kNs = 77;

struct Blocks {
  std::vector<Hash128> hashes;     // [n]
  std::vector<int32_t> tokens;     // [n * 16]
  std::vector<uint8_t> payload;    // (30, 2, 16, 3, 64) f16 bytes: one block's K/V
};

Blocks make_blocks(int n) {
  Blocks b;
  for (int i = 0; i < n; ++i) {
    b.hashes.push_back(Hash128{0x9000ull + i, 0x1234ull * (i + 1)});
    for (int t = 0; t < 16; ++t) b.tokens.push_back(i * 16 + t);
  }
  b.payload.resize(kSmol.payload_bytes());
  for (size_t j = 0; j < b.payload.size(); ++j) b.payload[j] = static_cast<uint8_t>(j * 7 + 3);
  return b;
}

RecordExpectations expect(const Blocks& b, int i) {
  BlockRecordInfo info{kFingerprint, kNs, kSmol, b.hashes[i], i == 0 ? Hash128{} : b.hashes[i - 1]};
  return RecordExpectations{info, std::span<const int32_t>(b.tokens).subspan(i * 16, 16)};
}

RecordPtr make_record(const Blocks& b, int i, const HostAllocator& allocator = default_host_allocator()) {
  const RecordExpectations e = expect(b, i);
  auto rec = start_block_record(e.info, e.token_ids, allocator);
  std::memcpy(block_record_payload(*rec), b.payload.data(), b.payload.size());  // "read_block"
  seal_block_record(*rec);
  return rec;
}

void report(const char* what, uint64_t n_bytes, double seconds) {
  std::printf("%-46s %8.1f MB in %8.4f s  %7.2f GB/s\n", what, n_bytes / 1e6, seconds,
              n_bytes / seconds / 1e9);
}

// Host tier writes: encode (payload copy + checksums) and insert into `host`;
// the same through the slab allocator (first fill, then reused slots); and
// the checksums alone.
void bench_host_writes(const Blocks& blocks, int n, HostTier& host) {
  const uint64_t record_bytes = block_record_bytes(kSmol);
  const uint64_t total = record_bytes * n;
  double t0 = now_s();
  for (int i = 0; i < n; ++i) host.insert(BlockKey{kNs, blocks.hashes[i]}, make_record(blocks, i));
  report("host write (encode+checksum+insert)", total, now_s() - t0);
  {
    // The same through the tier manager's slab allocator: first fill (huge
    // pages), then refill of freed slots (what a full host tier does).
    RecordSlabAllocator slabs(record_bytes, default_host_allocator());
    HostTier slab_host(HostTierOptions{total});
    t0 = now_s();
    for (int i = 0; i < n; ++i) slab_host.insert(BlockKey{kNs, blocks.hashes[i]}, make_record(blocks, i, slabs.allocator()));
    report("host write, slab allocator (first fill)", total, now_s() - t0);
    slab_host.clear();
    t0 = now_s();
    for (int i = 0; i < n; ++i) slab_host.insert(BlockKey{kNs, blocks.hashes[i]}, make_record(blocks, i, slabs.allocator()));
    report("host write, slab allocator (reused slots)", total, now_s() - t0);
    slab_host.clear();
  }
  // The checksum part alone, on a record whose pages are already touched.
  auto rec = start_block_record(expect(blocks, 0).info, expect(blocks, 0).token_ids,
                                default_host_allocator());
  std::memcpy(block_record_payload(*rec), blocks.payload.data(), blocks.payload.size());
  t0 = now_s();
  for (int i = 0; i < n; ++i) seal_block_record(*rec);
  report("  of which seal (XXH3 checksums) alone", total, now_s() - t0);
}

// Host tier reads: look up, verify every check and copy the payload out
// (what write_block does on CPU). False when a record fails.
bool bench_host_reads(const Blocks& blocks, int n, HostTier& host) {
  std::vector<uint8_t> pool_block(kSmol.payload_bytes());  // one pool block, f16 bytes
  const double t0 = now_s();
  for (int i = 0; i < n; ++i) {
    RecordPtr rec = host.lookup(BlockKey{kNs, blocks.hashes[i]});
    auto view = parse_block_record(rec->data(), rec->size(), expect(blocks, i));
    if (!view.ok()) return false;
    std::memcpy(pool_block.data(), view->payload, view->payload_bytes);
  }
  report("host read (lookup+verify+copy out)", block_record_bytes(kSmol) * n, now_s() - t0);
  return true;
}

// Disk tier in `dir`: put and flush, then reopen and get every record. False on a failure.
bool bench_disk(const Blocks& blocks, int n, const std::string& dir) {
  const uint64_t total = block_record_bytes(kSmol) * n;
  std::vector<RecordPtr> records;
  for (int i = 0; i < n; ++i) records.push_back(make_record(blocks, i));
  DiskTierOptions o;
  o.path = dir;
  o.capacity_bytes = 2 * total;
  {
    auto disk = std::move(DiskTier::open(o)).value();
    const double t0 = now_s();
    for (int i = 0; i < n; ++i) {
      if (!disk->put(BlockKey{kNs, blocks.hashes[i]}, records[i]->bytes()).ok()) return false;
    }
    const double t_put = now_s() - t0;
    if (!disk->flush().ok()) return false;
    report("disk write (put, WAL off)", total, t_put);
    report("disk write (put + flush to blob files)", total, now_s() - t0);
  }
  double t0 = now_s();
  auto disk = std::move(DiskTier::open(o)).value();
  std::printf("%-46s %8.4f s (%llu blocks indexed)\n", "disk reopen", now_s() - t0,
              static_cast<unsigned long long>(disk->stats().blocks));
  t0 = now_s();
  for (int i = 0; i < n; ++i) {
    const RecordExpectations e = expect(blocks, i);
    if (disk->get(BlockKey{kNs, blocks.hashes[i]}, &e) == nullptr) return false;
  }
  report("disk read after reopen (get+verify, page cache)", total, now_s() - t0);
  return true;
}

// TierManager: onboard a 125-block (2000-token) chain from disk (in `dir`),
// then from host. False when an onboard comes back short.
bool bench_onboard(const Blocks& blocks, int n, const std::string& dir) {
  const uint64_t record_bytes = block_record_bytes(kSmol);
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kSmol;
  o.host_capacity_bytes = 2 * record_bytes * n;
  DiskTierOptions d;
  d.path = dir;
  d.capacity_bytes = 2 * record_bytes * n;
  o.disk = d;
  auto tm = std::move(TierManager::create(o)).value();
  ChainQuery q;
  q.namespace_seed = kNs;
  q.hashes.assign(blocks.hashes.begin(), blocks.hashes.begin() + 125);
  q.token_ids.assign(blocks.tokens.begin(), blocks.tokens.begin() + 125 * 16);
  for (const char* from : {"disk", "host"}) {
    const double t0 = now_s();
    tm->request_onboard(1, q);
    std::vector<OnboardCompletion> done;
    while ((done = tm->poll_completions()).empty()) std::this_thread::yield();
    const double dt = now_s() - t0;
    if (done[0].records.size() != 125) return false;
    char label[96];
    std::snprintf(label, sizeof(label), "onboard 125 blocks from %s (tier manager)", from);
    report(label, 125 * record_bytes, dt);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const std::string base = argc > 2 ? argv[2] : "/tmp";
  if (n < 125) {
    std::fprintf(stderr, "n_blocks must be >= 125\n");
    return 2;
  }
  const uint64_t record_bytes = block_record_bytes(kSmol);
  std::printf("record: %llu bytes (payload %llu), %d records\n",
              static_cast<unsigned long long>(record_bytes),
              static_cast<unsigned long long>(kSmol.payload_bytes()), n);
  const Blocks blocks = make_blocks(n);
  HostTier host(HostTierOptions{record_bytes * n});
  bench_host_writes(blocks, n, host);
  if (!bench_host_reads(blocks, n, host)) return 1;

  char tmpl[4096];
  std::snprintf(tmpl, sizeof(tmpl), "%s/prefixd_bench_storage_XXXXXX", base.c_str());
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  if (!bench_disk(blocks, n, dir) || !bench_onboard(blocks, n, dir)) return 1;
  std::filesystem::remove_all(dir);
  return 0;
}
