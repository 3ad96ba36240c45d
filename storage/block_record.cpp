// BlockRecord encoding and checking. Every read of untrusted bytes is bounds
// checked against n_bytes before it happens; nothing here trusts the header.
#include "storage/block_record.h"

#include <xxhash.h>

#include <cstdlib>
#include <cstring>

namespace prefixd {
namespace {

// Geometry limits: large enough for any real model, small enough that
// payload_bytes cannot overflow 64 bits (2^12 * 2^12 * 2^12 * 2^14 * 2 * 4).
constexpr int64_t kMaxBlockSize = 4096;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxKvHeads = 4096;
constexpr int64_t kMaxHeadDim = 16384;

constexpr size_t kOffFingerprint = 8;
constexpr size_t kOffNamespace = 24;
constexpr size_t kOffBlockHash = 32;
constexpr size_t kOffParentHash = 48;
constexpr size_t kOffBlockSize = 64;
constexpr size_t kOffLayers = 68;
constexpr size_t kOffKvHeads = 72;
constexpr size_t kOffHeadDim = 76;
constexpr size_t kOffDtype = 80;
constexpr size_t kOffPayloadBytes = 88;
constexpr size_t kOffPayloadChecksum = 96;
constexpr size_t kOffHeaderChecksum = 104;

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
void put_hash(uint8_t* p, const Hash128& h) {
  put_u64(p, h.lo);
  put_u64(p + 8, h.hi);
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
Hash128 get_hash(const uint8_t* p) { return Hash128{get_u64(p), get_u64(p + 8)}; }

uint64_t header_checksum(const uint8_t* record, size_t n_token_bytes) {
  const uint64_t seed = XXH3_64bits(record, kOffHeaderChecksum);
  return XXH3_64bits_withSeed(record + kBlockRecordHeaderBytes, n_token_bytes, seed);
}

void* malloc_alloc(size_t n_bytes, void*) { return std::malloc(n_bytes == 0 ? 1 : n_bytes); }
void malloc_free(void* ptr, size_t, void*) { std::free(ptr); }

// Magic, version, header checksum, geometry limits, exact length. Fills view
// (payload checksum not yet verified).
RecordCheck check_structure(const uint8_t* data, size_t n_bytes, BlockRecordView* view) {
  if (data == nullptr || n_bytes < kBlockRecordHeaderBytes) return RecordCheck::kTruncated;
  if (get_u32(data) != kBlockRecordMagic) return RecordCheck::kMagic;
  if (get_u16(data + 4) != kBlockRecordVersion ||
      get_u16(data + 6) != kBlockRecordHeaderBytes) {
    return RecordCheck::kVersion;
  }
  // The token count comes from the (not yet verified) header: bound it first.
  const uint32_t block_size = get_u32(data + kOffBlockSize);
  if (block_size == 0 || block_size > kMaxBlockSize) return RecordCheck::kHeaderChecksum;
  const size_t n_token_bytes = 4ull * block_size;
  if (n_bytes < kBlockRecordHeaderBytes + n_token_bytes) return RecordCheck::kTruncated;
  if (header_checksum(data, n_token_bytes) != get_u64(data + kOffHeaderChecksum)) {
    return RecordCheck::kHeaderChecksum;
  }
  BlockRecordInfo info;
  info.model_fingerprint = get_hash(data + kOffFingerprint);
  info.namespace_seed = get_u64(data + kOffNamespace);
  info.block_hash = get_hash(data + kOffBlockHash);
  info.parent_hash = get_hash(data + kOffParentHash);
  info.geometry.block_size = static_cast<int32_t>(block_size);
  const uint32_t n_layers = get_u32(data + kOffLayers);
  const uint32_t n_kv_heads = get_u32(data + kOffKvHeads);
  const uint32_t head_dim = get_u32(data + kOffHeadDim);
  // Values above INT32_MAX would turn negative: treat them as a bad header
  // (the checksum matched, so this is a writer bug or a forged record).
  if (n_layers > kMaxLayers || n_kv_heads > kMaxKvHeads || head_dim > kMaxHeadDim) {
    return RecordCheck::kGeometry;
  }
  info.geometry.n_layers = static_cast<int32_t>(n_layers);
  info.geometry.n_kv_heads = static_cast<int32_t>(n_kv_heads);
  info.geometry.head_dim = static_cast<int32_t>(head_dim);
  info.geometry.dtype_code = data[kOffDtype];
  if (kv_dtype_bytes(info.geometry.dtype_code) == 0) return RecordCheck::kDtype;
  if (!info.geometry.valid()) return RecordCheck::kGeometry;
  const uint64_t payload_bytes = get_u64(data + kOffPayloadBytes);
  if (payload_bytes != info.geometry.payload_bytes()) return RecordCheck::kLength;
  if (static_cast<uint64_t>(n_bytes) != kBlockRecordHeaderBytes + n_token_bytes + payload_bytes) {
    return n_bytes < kBlockRecordHeaderBytes + n_token_bytes + payload_bytes
               ? RecordCheck::kTruncated
               : RecordCheck::kLength;
  }
  view->info = info;
  view->token_bytes = data + kBlockRecordHeaderBytes;
  view->payload = data + kBlockRecordHeaderBytes + n_token_bytes;
  view->payload_bytes = payload_bytes;
  return RecordCheck::kOk;
}

bool payload_intact(const uint8_t* data, const BlockRecordView& view) {
  return XXH3_64bits(view.payload, view.payload_bytes) == get_u64(data + kOffPayloadChecksum);
}

}  // namespace

size_t kv_dtype_bytes(uint8_t dtype_code) {
  switch (dtype_code) {
    case kKvDtypeF32:
      return 4;
    case kKvDtypeF16:
    case kKvDtypeBF16:
      return 2;
    default:
      return 0;
  }
}

bool BlockGeometry::valid() const {
  return block_size > 0 && block_size <= kMaxBlockSize && n_layers > 0 &&
         n_layers <= kMaxLayers && n_kv_heads > 0 && n_kv_heads <= kMaxKvHeads &&
         head_dim > 0 && head_dim <= kMaxHeadDim && kv_dtype_bytes(dtype_code) != 0;
}

uint64_t BlockGeometry::payload_bytes() const {
  if (!valid()) return 0;
  return 2ull * static_cast<uint64_t>(n_layers) * static_cast<uint64_t>(block_size) *
         static_cast<uint64_t>(n_kv_heads) * static_cast<uint64_t>(head_dim) *
         kv_dtype_bytes(dtype_code);
}

uint64_t block_record_bytes(const BlockGeometry& geometry) {
  if (!geometry.valid()) return 0;
  return kBlockRecordHeaderBytes + 4ull * geometry.block_size + geometry.payload_bytes();
}

HostAllocator default_host_allocator() { return HostAllocator{malloc_alloc, malloc_free, nullptr}; }

std::shared_ptr<RecordBuffer> RecordBuffer::allocate(size_t n_bytes,
                                                     const HostAllocator& allocator) {
  PREFIXD_CHECK(allocator.alloc != nullptr && allocator.free != nullptr,
                "HostAllocator needs alloc and free");
  void* p = allocator.alloc(n_bytes, allocator.ctx);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<RecordBuffer>(
      new RecordBuffer(static_cast<uint8_t*>(p), n_bytes, allocator));
}

RecordBuffer::~RecordBuffer() { allocator_.free(data_, n_bytes_, allocator_.ctx); }

std::shared_ptr<RecordBuffer> start_block_record(const BlockRecordInfo& info,
                                                 std::span<const int32_t> token_ids,
                                                 const HostAllocator& allocator) {
  const BlockGeometry& g = info.geometry;
  if (!g.valid() || token_ids.size() != static_cast<size_t>(g.block_size)) return nullptr;
  auto record = RecordBuffer::allocate(block_record_bytes(g), allocator);
  if (!record) return nullptr;
  uint8_t* p = record->mutable_data();
  std::memset(p, 0, kBlockRecordHeaderBytes);
  put_u32(p, kBlockRecordMagic);
  put_u16(p + 4, kBlockRecordVersion);
  put_u16(p + 6, static_cast<uint16_t>(kBlockRecordHeaderBytes));
  put_hash(p + kOffFingerprint, info.model_fingerprint);
  put_u64(p + kOffNamespace, info.namespace_seed);
  put_hash(p + kOffBlockHash, info.block_hash);
  put_hash(p + kOffParentHash, info.parent_hash);
  put_u32(p + kOffBlockSize, static_cast<uint32_t>(g.block_size));
  put_u32(p + kOffLayers, static_cast<uint32_t>(g.n_layers));
  put_u32(p + kOffKvHeads, static_cast<uint32_t>(g.n_kv_heads));
  put_u32(p + kOffHeadDim, static_cast<uint32_t>(g.head_dim));
  p[kOffDtype] = g.dtype_code;
  put_u64(p + kOffPayloadBytes, g.payload_bytes());
  for (size_t i = 0; i < token_ids.size(); ++i) {
    put_u32(p + kBlockRecordHeaderBytes + 4 * i, static_cast<uint32_t>(token_ids[i]));
  }
  return record;
}

uint8_t* block_record_payload(RecordBuffer& record) {
  PREFIXD_CHECK(record.size() >= kBlockRecordHeaderBytes, "not a started block record");
  const uint32_t block_size = get_u32(record.data() + kOffBlockSize);
  return record.mutable_data() + kBlockRecordHeaderBytes + 4ull * block_size;
}

void seal_block_record(RecordBuffer& record) {
  PREFIXD_CHECK(record.size() >= kBlockRecordHeaderBytes, "not a started block record");
  uint8_t* p = record.mutable_data();
  const size_t n_token_bytes = 4ull * get_u32(p + kOffBlockSize);
  const uint64_t payload_bytes = get_u64(p + kOffPayloadBytes);
  PREFIXD_CHECK(record.size() == kBlockRecordHeaderBytes + n_token_bytes + payload_bytes,
                "record size does not match its header");
  put_u64(p + kOffPayloadChecksum,
          XXH3_64bits(p + kBlockRecordHeaderBytes + n_token_bytes, payload_bytes));
  put_u64(p + kOffHeaderChecksum, header_checksum(p, n_token_bytes));
}

RecordPtr encode_block_record(const BlockRecordInfo& info, std::span<const int32_t> token_ids,
                              std::span<const uint8_t> payload,
                              const HostAllocator& allocator) {
  if (payload.size() != info.geometry.payload_bytes()) return nullptr;
  auto record = start_block_record(info, token_ids, allocator);
  if (!record) return nullptr;
  if (!payload.empty()) std::memcpy(block_record_payload(*record), payload.data(), payload.size());
  seal_block_record(*record);
  return record;
}

const char* record_check_name(RecordCheck check) {
  switch (check) {
    case RecordCheck::kOk: return "ok";
    case RecordCheck::kTruncated: return "truncated";
    case RecordCheck::kMagic: return "magic";
    case RecordCheck::kVersion: return "version";
    case RecordCheck::kHeaderChecksum: return "header_checksum";
    case RecordCheck::kLength: return "length";
    case RecordCheck::kFingerprint: return "fingerprint";
    case RecordCheck::kNamespace: return "namespace";
    case RecordCheck::kGeometry: return "geometry";
    case RecordCheck::kDtype: return "dtype";
    case RecordCheck::kBlockHash: return "block_hash";
    case RecordCheck::kParentHash: return "parent_hash";
    case RecordCheck::kTokens: return "tokens";
    case RecordCheck::kPayloadChecksum: return "payload_checksum";
  }
  return "unknown";
}

int32_t BlockRecordView::token(int32_t i) const {
  PREFIXD_CHECK(i >= 0 && i < info.geometry.block_size, "token index out of range");
  return static_cast<int32_t>(get_u32(token_bytes + 4ull * i));
}

RecordCheck check_block_record_integrity(const uint8_t* data, size_t n_bytes,
                                         BlockRecordView* view) {
  BlockRecordView local;
  const RecordCheck check = check_structure(data, n_bytes, &local);
  if (check != RecordCheck::kOk) return check;
  if (!payload_intact(data, local)) return RecordCheck::kPayloadChecksum;
  if (view != nullptr) *view = local;
  return RecordCheck::kOk;
}

RecordCheck check_block_record(const uint8_t* data, size_t n_bytes,
                               const RecordExpectations& expected, BlockRecordView* view,
                               bool verify_payload) {
  BlockRecordView local;
  const RecordCheck check = check_structure(data, n_bytes, &local);
  if (check != RecordCheck::kOk) return check;
  const BlockRecordInfo& want = expected.info;
  const BlockRecordInfo& got = local.info;
  if (got.model_fingerprint != want.model_fingerprint) return RecordCheck::kFingerprint;
  if (got.namespace_seed != want.namespace_seed) return RecordCheck::kNamespace;
  const BlockGeometry& gg = got.geometry;
  const BlockGeometry& wg = want.geometry;
  if (gg.block_size != wg.block_size || gg.n_layers != wg.n_layers ||
      gg.n_kv_heads != wg.n_kv_heads || gg.head_dim != wg.head_dim) {
    return RecordCheck::kGeometry;
  }
  if (gg.dtype_code != wg.dtype_code) return RecordCheck::kDtype;
  if (got.block_hash != want.block_hash) return RecordCheck::kBlockHash;
  if (got.parent_hash != want.parent_hash) return RecordCheck::kParentHash;
  if (expected.token_ids.size() != static_cast<size_t>(gg.block_size)) return RecordCheck::kTokens;
  for (int32_t i = 0; i < gg.block_size; ++i) {
    if (local.token(i) != expected.token_ids[i]) return RecordCheck::kTokens;
  }
  if (verify_payload && !payload_intact(data, local)) return RecordCheck::kPayloadChecksum;
  if (view != nullptr) *view = local;
  return RecordCheck::kOk;
}

Result<BlockRecordView> parse_block_record(const uint8_t* data, size_t n_bytes,
                                           const RecordExpectations& expected) {
  BlockRecordView view;
  const RecordCheck check = check_block_record(data, n_bytes, expected, &view);
  if (check != RecordCheck::kOk) {
    return Status::error(std::string(record_check_name(check)) +
                         ": block record failed its check");
  }
  return view;
}

}  // namespace prefixd
