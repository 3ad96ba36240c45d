// Small block records for the storage tier tests (disk, remote): a fixed
// model fingerprint and geometry, and make_block(i), a valid record whose
// key, tokens, parent and payload all follow from i.
// Include after doctest (REQUIRE) and the storage headers.
#pragma once

#include <cstdint>
#include <vector>

#include "storage/block_record.h"

namespace prefixd::testing {

inline const Hash128 kFingerprint{0x0123456789ABCDEFull, 0xFEDCBA9876543210ull};
inline const BlockGeometry kGeom{4, 2, 2, 8, kKvDtypeF16};  // 512-byte payload, 640-byte record

struct TestBlock {
  BlockKey key;
  std::vector<int32_t> tokens;  // [4]
  Hash128 parent;
  RecordPtr record;
  RecordExpectations expect() const {
    BlockRecordInfo info{kFingerprint, key.namespace_seed, kGeom, key.block_hash, parent};
    return RecordExpectations{info, tokens};
  }
};

inline TestBlock make_block(uint64_t i, uint64_t ns = 99) {
  TestBlock b;
  b.key = BlockKey{ns, Hash128{0x1000 + i, 0x2000 + i}};
  b.tokens = {static_cast<int32_t>(i), 1, 2, 3};
  b.parent = Hash128{i, 0};
  std::vector<uint8_t> payload(kGeom.payload_bytes());
  for (size_t j = 0; j < payload.size(); ++j) payload[j] = static_cast<uint8_t>(i * 13 + j);
  BlockRecordInfo info{kFingerprint, ns, kGeom, b.key.block_hash, b.parent};
  b.record = encode_block_record(info, b.tokens, payload);
  REQUIRE(b.record != nullptr);
  return b;
}

}  // namespace prefixd::testing
