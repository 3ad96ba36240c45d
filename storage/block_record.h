// BlockRecord: the one self-describing, versioned, checksummed serialization of
// a KV block. The host tier and the disk tier keep the same bytes; moving a
// block down a tier never reformats it. Also: block keys and record buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/hash128.h"
#include "common/result.h"

namespace prefixd {

// Identifies a block in the host and disk tiers: the namespace seed of the
// request (model, dtype, block size, deployment secret and cache salt mixed
// into one u64) and the block's chain hash.
struct BlockKey {
  uint64_t namespace_seed = 0;
  Hash128 block_hash;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
};

struct BlockKeyHasher {
  size_t operator()(const BlockKey& k) const {
    return static_cast<size_t>(k.block_hash.lo ^ (k.namespace_seed * 0x9E3779B97F4A7C15ull));
  }
};

// KV dtype codes stored in records; equal to kernels/dtype.h DType values.
// (storage/ does not include kernels/, so they are plain integers here.)
constexpr uint8_t kKvDtypeF32 = 0;
constexpr uint8_t kKvDtypeF16 = 1;
constexpr uint8_t kKvDtypeBF16 = 2;
// Bytes of one element of a dtype code; 0 for an unknown code.
size_t kv_dtype_bytes(uint8_t dtype_code);

// Layer and head geometry of one block. Payload layout (what the backend's
// read_block produces): for layer 0..n_layers-1: K then V, each
// (block_size, n_kv_heads, head_dim) in dtype_code.
struct BlockGeometry {
  int32_t block_size = 16;
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  uint8_t dtype_code = kKvDtypeF16;
  friend bool operator==(const BlockGeometry&, const BlockGeometry&) = default;

  // Bytes of K and V over all layers; 0 when a field is out of range.
  uint64_t payload_bytes() const;
  // Geometry limits accepted by the record format (guards against overflow).
  bool valid() const;
};

// Everything a record says about itself besides its token ids and payload.
struct BlockRecordInfo {
  Hash128 model_fingerprint;  // hash of the model file (metadata + tensors)
  uint64_t namespace_seed = 0;  // == BlockKey::namespace_seed
  BlockGeometry geometry;
  Hash128 block_hash;
  Hash128 parent_hash;  // 16 zero bytes for the first block of a prompt
};

// --- on-disk layout (all integers little-endian) ------------------------------
//   0 magic u32 'PFXB'       4 format_version u16     6 header_bytes u16 (=112)
//   8 model_fingerprint 16  24 namespace_seed u64    32 block_hash 16
//  48 parent_hash 16        64 block_size u32        68 n_layers u32
//  72 n_kv_heads u32        76 head_dim u32          80 kv_dtype u8 + 7 zero bytes
//  88 payload_bytes u64     96 payload_checksum u64 (XXH3-64 of the payload)
// 104 header_checksum u64 = XXH3_64bits_withSeed(token bytes, XXH3_64bits(bytes [0,104)))
// 112 token ids: block_size x int32
// 112 + 4 * block_size: payload (payload_bytes)
constexpr uint32_t kBlockRecordMagic = 0x42584650;  // "PFXB" in memory order
constexpr uint16_t kBlockRecordVersion = 1;
constexpr size_t kBlockRecordHeaderBytes = 112;

// Total record bytes for a geometry (header + token ids + payload).
uint64_t block_record_bytes(const BlockGeometry& geometry);

// Allocator hook for record memory, so that the CUDA backend can supply pinned
// host memory (cudaHostAlloc / cudaFreeHost). Both functions must be
// thread-safe. alloc returns nullptr on failure.
struct HostAllocator {
  void* (*alloc)(size_t n_bytes, void* ctx) = nullptr;
  void (*free)(void* ptr, size_t n_bytes, void* ctx) = nullptr;
  void* ctx = nullptr;
};
// malloc / free.
HostAllocator default_host_allocator();

// A contiguous byte buffer that holds one record, allocated through a
// HostAllocator. Filled once by its creator, then shared read-only
// (RecordPtr) by the tiers and the engine; never modified after sharing.
class RecordBuffer {
 public:
  // Returns nullptr when the allocator fails.
  static std::shared_ptr<RecordBuffer> allocate(size_t n_bytes,
                                                const HostAllocator& allocator);
  ~RecordBuffer();
  RecordBuffer(const RecordBuffer&) = delete;
  RecordBuffer& operator=(const RecordBuffer&) = delete;

  const uint8_t* data() const { return data_; }
  uint8_t* mutable_data() { return data_; }
  size_t size() const { return n_bytes_; }
  std::span<const uint8_t> bytes() const { return {data_, n_bytes_}; }

 private:
  RecordBuffer(uint8_t* data, size_t n_bytes, const HostAllocator& allocator)
      : data_(data), n_bytes_(n_bytes), allocator_(allocator) {}
  uint8_t* data_;  // [n_bytes_] record bytes
  size_t n_bytes_;
  HostAllocator allocator_;
};
using RecordPtr = std::shared_ptr<const RecordBuffer>;

// Two-step encoding without a payload copy (the engine lets the backend's
// read_block write straight into the record):
//   auto rec = start_block_record(info, tokens, alloc);   // header + tokens
//   backend.read_block(pool, id, block_record_payload(*rec));
//   seal_block_record(*rec);                               // checksums
// start_block_record returns nullptr when the geometry is invalid, the token
// count differs from geometry.block_size, or the allocator fails.
std::shared_ptr<RecordBuffer> start_block_record(const BlockRecordInfo& info,
                                                 std::span<const int32_t> token_ids,
                                                 const HostAllocator& allocator);
uint8_t* block_record_payload(RecordBuffer& record);
void seal_block_record(RecordBuffer& record);

// One step: copies `payload` (geometry.payload_bytes() bytes).
// Returns nullptr for the same reasons as start_block_record, or when the
// payload size does not match the geometry.
RecordPtr encode_block_record(const BlockRecordInfo& info, std::span<const int32_t> token_ids,
                              std::span<const uint8_t> payload,
                              const HostAllocator& allocator = default_host_allocator());

// Which check a record failed (kOk when none).
enum class RecordCheck : uint8_t {
  kOk = 0,
  kTruncated,        // shorter than the header
  kMagic,            // not a block record
  kVersion,          // unknown format version or header size
  kHeaderChecksum,   // header or token ids damaged
  kLength,           // total length differs from header + tokens + payload
  kFingerprint,      // another model
  kNamespace,        // another namespace seed
  kGeometry,         // block size, layers, heads or head_dim differ
  kDtype,            // KV dtype differs
  kBlockHash,        // another block
  kParentHash,       // same hash, different parent (collision)
  kTokens,           // same hash, different tokens (collision)
  kPayloadChecksum,  // K/V bytes damaged
};
const char* record_check_name(RecordCheck check);

// A parsed record; pointers alias the parsed bytes (valid while they are).
struct BlockRecordView {
  BlockRecordInfo info;
  const uint8_t* token_bytes = nullptr;  // [block_size] int32 LE, maybe unaligned
  const uint8_t* payload = nullptr;      // [payload_bytes] layout of BlockGeometry
  uint64_t payload_bytes = 0;
  int32_t token(int32_t i) const;
};

// What the caller expects the record to be.
struct RecordExpectations {
  BlockRecordInfo info;
  std::span<const int32_t> token_ids;  // [info.geometry.block_size]
};

// Checks that the bytes form an intact record (magic, version, header
// checksum, exact length, geometry limits, payload checksum) without
// expectations. Fills *view when it returns kOk and view is not null.
// Never reads outside [data, data + n_bytes).
RecordCheck check_block_record_integrity(const uint8_t* data, size_t n_bytes,
                                         BlockRecordView* view);
// Integrity, then every field against `expected`. `verify_payload = false`
// skips the payload checksum (for cheap header-only lookups).
RecordCheck check_block_record(const uint8_t* data, size_t n_bytes,
                               const RecordExpectations& expected, BlockRecordView* view,
                               bool verify_payload = true);
// The same, as a Result whose message starts with record_check_name().
Result<BlockRecordView> parse_block_record(const uint8_t* data, size_t n_bytes,
                                           const RecordExpectations& expected);

}  // namespace prefixd
