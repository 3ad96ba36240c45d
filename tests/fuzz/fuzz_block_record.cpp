// libFuzzer target for the block record parser: arbitrary bytes, and the same
// bytes with their checksums repaired so the fuzzer reaches the field checks.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "storage/block_record.h"

namespace {

using namespace prefixd;

void exercise(const uint8_t* data, size_t size) {
  BlockRecordView view;
  if (check_block_record_integrity(data, size, &view) == RecordCheck::kOk) {
    // Touch every token and payload byte the view points at.
    uint64_t sum = 0;
    for (int32_t i = 0; i < view.info.geometry.block_size; ++i) sum += view.token(i);
    for (uint64_t i = 0; i < view.payload_bytes; ++i) sum += view.payload[i];
    static volatile uint64_t sink;
    sink = sum;
    if (block_record_bytes(view.info.geometry) != size) __builtin_trap();
  }
  // Expectations of the small geometry used for the seed record.
  static const std::vector<int32_t> tokens = {1, 2, 3, 4};
  RecordExpectations e;
  e.info.geometry = BlockGeometry{4, 2, 2, 8, kKvDtypeF16};
  e.token_ids = tokens;
  const RecordCheck c = check_block_record(data, size, e, &view);
  if (c == RecordCheck::kOk && view.payload_bytes != e.info.geometry.payload_bytes()) {
    __builtin_trap();
  }
  (void)parse_block_record(data, size, e);
}

// Rewrites the payload and header checksums in place when the header's token
// count fits, mirroring the writer.
void repair_checksums(std::vector<uint8_t>& b) {
  if (b.size() < kBlockRecordHeaderBytes) return;
  uint32_t block_size;
  std::memcpy(&block_size, b.data() + 64, 4);
  if (block_size == 0 || block_size > 4096) return;
  const size_t tokens_end = kBlockRecordHeaderBytes + 4ull * block_size;
  if (b.size() < tokens_end) return;
  const uint64_t payload_sum = XXH3_64bits(b.data() + tokens_end, b.size() - tokens_end);
  std::memcpy(b.data() + 96, &payload_sum, 8);  // little-endian hosts only (x86-64)
  const uint64_t seed = XXH3_64bits(b.data(), 104);
  const uint64_t header_sum = XXH3_64bits_withSeed(b.data() + kBlockRecordHeaderBytes,
                                                   4ull * block_size, seed);
  std::memcpy(b.data() + 104, &header_sum, 8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::vector<uint8_t> exact(data, data + size);  // exact size: overreads are caught
    exercise(exact.data(), exact.size());
  }
  std::vector<uint8_t> repaired(data, data + size);
  repair_checksums(repaired);
  exercise(repaired.data(), repaired.size());
  return 0;
}
