// State snapshot pages (state_snapshot.h): encoding, key derivation, checks
// and assembly.
#include "storage/state_snapshot.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace prefixd {
namespace {

constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffHeaderBytes = 6;
constexpr size_t kOffSnapshotHash = 8;
constexpr size_t kOffIndex = 24;
constexpr size_t kOffCount = 28;
constexpr size_t kOffTotal = 32;
constexpr size_t kOffContent = 40;
constexpr size_t kOffDataBytes = 48;
constexpr size_t kOffNamespace = 56;

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

BlockRecordInfo page_info(const Hash128& fingerprint, const BlockGeometry& geometry,
                          const BlockKey& key, uint32_t index, uint64_t n_bytes) {
  BlockRecordInfo info;
  info.model_fingerprint = fingerprint;
  info.namespace_seed = key.namespace_seed;
  info.geometry = geometry;
  info.block_hash = snapshot_page_hash(key, index, n_bytes);
  info.parent_hash = kSnapshotPageParent;
  return info;
}

}  // namespace

uint64_t snapshot_page_capacity(const BlockGeometry& geometry) {
  if (!geometry.valid()) return 0;
  const uint64_t payload = geometry.payload_bytes();
  return payload > kSnapshotPageHeaderBytes ? payload - kSnapshotPageHeaderBytes : 0;
}

uint32_t snapshot_page_count(const BlockGeometry& geometry, uint64_t n_bytes) {
  const uint64_t cap = snapshot_page_capacity(geometry);
  if (cap == 0 || n_bytes == 0) return 0;
  const uint64_t n = (n_bytes + cap - 1) / cap;
  return n > UINT32_MAX ? 0 : static_cast<uint32_t>(n);
}

Hash128 snapshot_page_hash(const BlockKey& key, uint32_t index, uint64_t n_bytes) {
  static constexpr char kDomain[] = "prefixd state snapshot page v1";
  uint8_t buf[sizeof(kDomain) + 8 + 16 + 4 + 8];
  std::memcpy(buf, kDomain, sizeof(kDomain));
  uint8_t* p = buf + sizeof(kDomain);
  put_u64(p, key.namespace_seed);
  put_u64(p + 8, key.block_hash.lo);
  put_u64(p + 16, key.block_hash.hi);
  put_u32(p + 24, index);
  put_u64(p + 28, n_bytes);
  const XXH128_hash_t h = XXH3_128bits(buf, sizeof(buf));
  return Hash128{h.low64, h.high64};
}

RecordExpectations snapshot_page_expectations(const Hash128& model_fingerprint,
                                              const BlockGeometry& geometry, const BlockKey& key,
                                              uint32_t index, uint64_t n_bytes,
                                              std::vector<int32_t>& token_storage) {
  token_storage.assign(static_cast<size_t>(std::max(geometry.block_size, 0)), kSnapshotPageToken);
  RecordExpectations e;
  e.info = page_info(model_fingerprint, geometry, key, index, n_bytes);
  e.token_ids = token_storage;
  return e;
}

std::vector<RecordPtr> encode_snapshot_pages(const Hash128& model_fingerprint,
                                             const BlockGeometry& geometry, const BlockKey& key,
                                             std::span<const uint8_t> state,
                                             const HostAllocator& allocator) {
  const uint32_t n_pages = snapshot_page_count(geometry, state.size());
  if (n_pages == 0) return {};
  const uint64_t cap = snapshot_page_capacity(geometry);
  const uint64_t content = XXH3_64bits(state.data(), state.size());
  const std::vector<int32_t> tokens(static_cast<size_t>(geometry.block_size), kSnapshotPageToken);
  std::vector<RecordPtr> pages;
  pages.reserve(n_pages);
  for (uint32_t i = 0; i < n_pages; ++i) {
    auto rec = start_block_record(page_info(model_fingerprint, geometry, key, i, state.size()),
                                  tokens, allocator);
    if (rec == nullptr) return {};
    uint8_t* payload = block_record_payload(*rec);  // [payload_bytes]
    const uint64_t begin = i * cap;
    const uint64_t n = std::min<uint64_t>(cap, state.size() - begin);
    std::memset(payload, 0, geometry.payload_bytes());
    put_u32(payload + kOffMagic, kSnapshotPageMagic);
    put_u16(payload + kOffVersion, kSnapshotPageVersion);
    put_u16(payload + kOffHeaderBytes, static_cast<uint16_t>(kSnapshotPageHeaderBytes));
    put_u64(payload + kOffSnapshotHash, key.block_hash.lo);
    put_u64(payload + kOffSnapshotHash + 8, key.block_hash.hi);
    put_u32(payload + kOffIndex, i);
    put_u32(payload + kOffCount, n_pages);
    put_u64(payload + kOffTotal, state.size());
    put_u64(payload + kOffContent, content);
    put_u64(payload + kOffDataBytes, n);
    put_u64(payload + kOffNamespace, key.namespace_seed);
    std::memcpy(payload + kSnapshotPageHeaderBytes, state.data() + begin, n);
    seal_block_record(*rec);
    pages.push_back(std::move(rec));
  }
  return pages;
}

const char* snapshot_check_name(SnapshotCheck check) {
  switch (check) {
    case SnapshotCheck::kOk: return "ok";
    case SnapshotCheck::kMissing: return "missing";
    case SnapshotCheck::kDamaged: return "damaged";
    case SnapshotCheck::kWrongSize: return "wrong_size";
    case SnapshotCheck::kOtherModel: return "other_model";
  }
  return "unknown";
}

SnapshotCheck check_snapshot_page(std::span<const uint8_t> record, const Hash128& model_fingerprint,
                                  const BlockGeometry& geometry, const BlockKey& key,
                                  uint32_t index, uint64_t n_bytes, uint64_t* content_checksum) {
  std::vector<int32_t> tokens;
  const RecordExpectations e =
      snapshot_page_expectations(model_fingerprint, geometry, key, index, n_bytes, tokens);
  BlockRecordView view;
  const RecordCheck rc = check_block_record(record.data(), record.size(), e, &view);
  if (rc == RecordCheck::kFingerprint || rc == RecordCheck::kGeometry || rc == RecordCheck::kDtype) {
    return SnapshotCheck::kOtherModel;
  }
  if (rc != RecordCheck::kOk) return SnapshotCheck::kDamaged;
  const uint64_t cap = snapshot_page_capacity(geometry);
  const uint32_t n_pages = snapshot_page_count(geometry, n_bytes);
  if (view.payload_bytes < kSnapshotPageHeaderBytes || cap == 0) return SnapshotCheck::kDamaged;
  const uint8_t* p = view.payload;
  if (get_u32(p + kOffMagic) != kSnapshotPageMagic || get_u16(p + kOffVersion) != kSnapshotPageVersion ||
      get_u16(p + kOffHeaderBytes) != kSnapshotPageHeaderBytes) {
    return SnapshotCheck::kDamaged;
  }
  if (get_u64(p + kOffSnapshotHash) != key.block_hash.lo ||
      get_u64(p + kOffSnapshotHash + 8) != key.block_hash.hi ||
      get_u64(p + kOffNamespace) != key.namespace_seed || get_u32(p + kOffIndex) != index) {
    return SnapshotCheck::kDamaged;
  }
  if (get_u64(p + kOffTotal) != n_bytes || get_u32(p + kOffCount) != n_pages) {
    return SnapshotCheck::kWrongSize;
  }
  const uint64_t expect_data = std::min<uint64_t>(cap, n_bytes - static_cast<uint64_t>(index) * cap);
  if (get_u64(p + kOffDataBytes) != expect_data) return SnapshotCheck::kDamaged;
  if (content_checksum != nullptr) *content_checksum = get_u64(p + kOffContent);
  return SnapshotCheck::kOk;
}

SnapshotCheck assemble_snapshot(std::span<const RecordPtr> pages, uint64_t n_bytes,
                                std::vector<uint8_t>* state) {
  std::vector<uint8_t> out(n_bytes);
  uint64_t content = 0;
  uint64_t at = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    BlockRecordView view;
    if (pages[i] == nullptr ||
        check_block_record_integrity(pages[i]->data(), pages[i]->size(), &view) != RecordCheck::kOk ||
        view.payload_bytes < kSnapshotPageHeaderBytes) {
      return SnapshotCheck::kDamaged;
    }
    const uint64_t c = get_u64(view.payload + kOffContent);
    if (i == 0) content = c;
    if (c != content) return SnapshotCheck::kDamaged;
    const uint64_t n = get_u64(view.payload + kOffDataBytes);
    if (n > view.payload_bytes - kSnapshotPageHeaderBytes || n > n_bytes - at) return SnapshotCheck::kDamaged;
    std::memcpy(out.data() + at, view.payload + kSnapshotPageHeaderBytes, n);
    at += n;
  }
  if (at != n_bytes || XXH3_64bits(out.data(), out.size()) != content) return SnapshotCheck::kDamaged;
  *state = std::move(out);
  return SnapshotCheck::kOk;
}

}  // namespace prefixd
