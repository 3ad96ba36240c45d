// State snapshot pages: how the recurrent state of one sequence at a block
// boundary (Qwen3.5's DeltaNet state, F32 bytes the engine produces) is
// stored in the tiers. A snapshot is split into pages; each page is an
// ordinary block record of the tiers' geometry (same size, same slab slot,
// same MAC, LRU and eviction as a KV block), told apart from KV blocks by
// three things: its block hash is derived from the snapshot key by a
// domain-separated hash no chain hash can equal, its parent hash is the
// constant kSnapshotPageParent, and its token ids are all kSnapshotPageToken
// (-1, never a token). A KV lookup of a page fails its parent/token checks;
// a page lookup of a KV record fails the same checks and the page magic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/hash128.h"
#include "common/result.h"
#include "storage/block_record.h"

namespace prefixd {

// Page payload layout (the block record's payload; integers little-endian):
//   0 magic u32 'PFXS'       4 version u16 (=1)        6 header_bytes u16 (=64)
//   8 snapshot block_hash 16 (chain hash of the last block the state covers)
//  24 page_index u32        28 page_count u32
//  32 total_bytes u64       40 content_checksum u64 (XXH3-64 of the whole state)
//  48 page_data_bytes u64   56 namespace_seed u64
//  64 state bytes [page_index * capacity, + page_data_bytes); the rest of the
//     payload is zero.
constexpr uint32_t kSnapshotPageMagic = 0x53584650;  // "PFXS" in memory order
constexpr uint16_t kSnapshotPageVersion = 1;
constexpr size_t kSnapshotPageHeaderBytes = 64;
constexpr int32_t kSnapshotPageToken = -1;
// The parent hash every page record carries ("PFXSNAPSHOTPAGE1" as bytes).
constexpr Hash128 kSnapshotPageParent{0x534E415053584650ull, 0x3145474150544F48ull};

// State bytes one page holds: payload_bytes - header; 0 when the geometry
// cannot hold a page.
uint64_t snapshot_page_capacity(const BlockGeometry& geometry);
// Pages of a snapshot of n_bytes (ceil; 0 when n_bytes == 0 or no capacity).
uint32_t snapshot_page_count(const BlockGeometry& geometry, uint64_t n_bytes);
// The block hash page `index` of the snapshot (key, n_bytes) is stored under:
// XXH3-128 of ("prefixd state snapshot page v1", namespace seed, key hash,
// index, n_bytes).
Hash128 snapshot_page_hash(const BlockKey& key, uint32_t index, uint64_t n_bytes);
inline BlockKey snapshot_page_key(const BlockKey& key, uint32_t index, uint64_t n_bytes) {
  return BlockKey{key.namespace_seed, snapshot_page_hash(key, index, n_bytes)};
}

// What a page record must be. token_storage holds the token ids the
// expectations point at (keep it alive while they are used).
RecordExpectations snapshot_page_expectations(const Hash128& model_fingerprint,
                                              const BlockGeometry& geometry, const BlockKey& key,
                                              uint32_t index, uint64_t n_bytes,
                                              std::vector<int32_t>& token_storage);

// Every page record of a snapshot, sealed. Empty when state is empty, the
// geometry holds no page, or the allocator fails.
std::vector<RecordPtr> encode_snapshot_pages(const Hash128& model_fingerprint,
                                             const BlockGeometry& geometry, const BlockKey& key,
                                             std::span<const uint8_t> state,
                                             const HostAllocator& allocator);

// Why a snapshot read was not served.
enum class SnapshotCheck : uint8_t {
  kOk = 0,
  kMissing,      // a page is in no tier
  kDamaged,      // a page failed a record check, the MAC, the page header, or
                 // the pages do not form one write (content checksum)
  kWrongSize,    // pages of another total size
  kOtherModel,   // pages of another model fingerprint or geometry
};
const char* snapshot_check_name(SnapshotCheck check);

// Checks a page record's bytes fully (record checks with payload, then the
// page header) as page `index` of (key, n_bytes). On kOk *content_checksum
// (not null) is the snapshot checksum the page names.
SnapshotCheck check_snapshot_page(std::span<const uint8_t> record, const Hash128& model_fingerprint,
                                  const BlockGeometry& geometry, const BlockKey& key,
                                  uint32_t index, uint64_t n_bytes, uint64_t* content_checksum);

// Assembles checked pages [page_count] (in order) into the state; checks
// that every page names the same content checksum and that it matches the
// assembled bytes (kDamaged when not). Pages must have passed check_snapshot_page.
SnapshotCheck assemble_snapshot(std::span<const RecordPtr> pages, uint64_t n_bytes,
                                std::vector<uint8_t>* state);

}  // namespace prefixd
