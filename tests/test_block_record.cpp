// Tests for the BlockRecord format: round trip, and every check failing for
// the right reason (field mismatches, byte flips, truncation at every length).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "storage/block_record.h"

using namespace prefixd;

namespace {

// block_size 4, 2 layers, 2 kv heads, head_dim 8, f16: payload 2*2*4*2*8*2 = 512 bytes.
BlockRecordInfo small_info() {
  BlockRecordInfo info;
  info.model_fingerprint = Hash128{0x1111222233334444ull, 0x5555666677778888ull};
  info.namespace_seed = 0xABCDEF0123456789ull;
  info.geometry = BlockGeometry{4, 2, 2, 8, kKvDtypeF16};
  info.block_hash = Hash128{0xA1A2A3A4A5A6A7A8ull, 0xB1B2B3B4B5B6B7B8ull};
  info.parent_hash = Hash128{0xC1C2C3C4C5C6C7C8ull, 0xD1D2D3D4D5D6D7D8ull};
  return info;
}
const std::vector<int32_t> kTokens = {17, -3, 65535, 1 << 30};

std::vector<uint8_t> payload_for(const BlockGeometry& g) {
  std::vector<uint8_t> p(g.payload_bytes());  // (n_layers, 2, block_size, heads, dim) f16 bytes
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 31 + 7);
  return p;
}

std::vector<uint8_t> encode_small() {
  const BlockRecordInfo info = small_info();
  RecordPtr rec = encode_block_record(info, kTokens, payload_for(info.geometry));
  REQUIRE(rec != nullptr);
  return std::vector<uint8_t>(rec->data(), rec->data() + rec->size());
}

RecordExpectations expect_small(const std::vector<int32_t>& tokens = kTokens) {
  return RecordExpectations{small_info(), tokens};
}

RecordCheck check(const std::vector<uint8_t>& bytes, const RecordExpectations& e) {
  return check_block_record(bytes.data(), bytes.size(), e, nullptr);
}

// Recomputes the header checksum after a deliberate header edit (a forged record).
void reseal_header(std::vector<uint8_t>& bytes, uint32_t block_size) {
  const uint64_t seed = XXH3_64bits(bytes.data(), 104);
  const uint64_t sum = XXH3_64bits_withSeed(bytes.data() + 112, 4ull * block_size, seed);
  for (int i = 0; i < 8; ++i) bytes[104 + i] = static_cast<uint8_t>(sum >> (8 * i));
}

}  // namespace

TEST_CASE("record_round_trip_preserves_every_field") {
  const std::vector<uint8_t> bytes = encode_small();
  CHECK(bytes.size() == 112 + 4 * 4 + 512);
  CHECK(bytes.size() == block_record_bytes(small_info().geometry));
  auto parsed = parse_block_record(bytes.data(), bytes.size(), expect_small());
  REQUIRE(parsed.ok());
  const BlockRecordView& v = parsed.value();
  const BlockRecordInfo info = small_info();
  CHECK(v.info.model_fingerprint == info.model_fingerprint);
  CHECK(v.info.namespace_seed == info.namespace_seed);
  CHECK(v.info.geometry == info.geometry);
  CHECK(v.info.block_hash == info.block_hash);
  CHECK(v.info.parent_hash == info.parent_hash);
  for (int i = 0; i < 4; ++i) CHECK(v.token(i) == kTokens[i]);
  const std::vector<uint8_t> payload = payload_for(info.geometry);
  REQUIRE(v.payload_bytes == payload.size());
  CHECK(std::memcmp(v.payload, payload.data(), payload.size()) == 0);
  CHECK(v.payload == bytes.data() + 128);
  CHECK(check_block_record_integrity(bytes.data(), bytes.size(), nullptr) == RecordCheck::kOk);
}

TEST_CASE("two_step_encoding_equals_one_step_encoding") {
  const BlockRecordInfo info = small_info();
  const std::vector<uint8_t> payload = payload_for(info.geometry);
  auto rec = start_block_record(info, kTokens, default_host_allocator());
  REQUIRE(rec != nullptr);
  std::memcpy(block_record_payload(*rec), payload.data(), payload.size());
  seal_block_record(*rec);
  const std::vector<uint8_t> one_step = encode_small();
  REQUIRE(rec->size() == one_step.size());
  CHECK(std::memcmp(rec->data(), one_step.data(), one_step.size()) == 0);
}

TEST_CASE("smol_block_record_size") {
  // smol-135m at block size 16: 30 layers x K,V x 16 x 3 heads x 64 x f16.
  const BlockGeometry g{16, 30, 3, 64, kKvDtypeF16};
  CHECK(g.payload_bytes() == 368640);
  CHECK(block_record_bytes(g) == 368640 + 112 + 64);
  CHECK(BlockGeometry{16, 30, 3, 64, kKvDtypeF32}.payload_bytes() == 737280);
  CHECK(BlockGeometry{16, 30, 3, 64, 3}.payload_bytes() == 0);
  CHECK(BlockGeometry{0, 30, 3, 64, kKvDtypeF16}.payload_bytes() == 0);
}

TEST_CASE("encode_rejects_wrong_token_count_and_payload_size") {
  const BlockRecordInfo info = small_info();
  const std::vector<uint8_t> payload = payload_for(info.geometry);
  const std::vector<int32_t> three = {1, 2, 3};
  CHECK(encode_block_record(info, three, payload) == nullptr);
  CHECK(encode_block_record(info, kTokens, std::span<const uint8_t>(payload).first(511)) ==
        nullptr);
  BlockRecordInfo bad = info;
  bad.geometry.dtype_code = 9;
  CHECK(encode_block_record(bad, kTokens, payload) == nullptr);
}

TEST_CASE("each_expectation_mismatch_fails_with_its_own_reason") {
  const std::vector<uint8_t> bytes = encode_small();
  CHECK(check(bytes, expect_small()) == RecordCheck::kOk);
  {
    RecordExpectations e = expect_small();
    e.info.model_fingerprint.hi ^= 1;
    CHECK(check(bytes, e) == RecordCheck::kFingerprint);
  }
  {
    RecordExpectations e = expect_small();
    e.info.namespace_seed += 1;
    CHECK(check(bytes, e) == RecordCheck::kNamespace);
  }
  for (int field = 0; field < 4; ++field) {
    RecordExpectations e = expect_small();
    int32_t* f[4] = {&e.info.geometry.block_size, &e.info.geometry.n_layers,
                     &e.info.geometry.n_kv_heads, &e.info.geometry.head_dim};
    *f[field] += 1;
    CHECK(check(bytes, e) == RecordCheck::kGeometry);
  }
  {
    RecordExpectations e = expect_small();
    e.info.geometry.dtype_code = kKvDtypeBF16;
    CHECK(check(bytes, e) == RecordCheck::kDtype);
  }
  {
    RecordExpectations e = expect_small();
    e.info.block_hash.lo ^= 1ull << 63;
    CHECK(check(bytes, e) == RecordCheck::kBlockHash);
  }
  {
    RecordExpectations e = expect_small();
    e.info.parent_hash = Hash128{};
    CHECK(check(bytes, e) == RecordCheck::kParentHash);
  }
  {
    const std::vector<int32_t> other = {17, -3, 65535, (1 << 30) + 1};
    CHECK(check(bytes, expect_small(other)) == RecordCheck::kTokens);
    const std::vector<int32_t> short_tokens = {17, -3, 65535};
    CHECK(check(bytes, expect_small(short_tokens)) == RecordCheck::kTokens);
  }
  auto parsed = parse_block_record(bytes.data(), bytes.size(), expect_small({0, 0, 0, 0}));
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.message().rfind("tokens:", 0) == 0);
}

TEST_CASE("flipping_any_header_or_token_byte_fails_the_header_checks") {
  const std::vector<uint8_t> good = encode_small();
  const size_t n_header_and_tokens = 112 + 16;
  for (size_t i = 0; i < n_header_and_tokens; ++i) {
    std::vector<uint8_t> bytes = good;
    bytes[i] ^= 0x01;
    RecordCheck want = RecordCheck::kHeaderChecksum;
    if (i < 4) want = RecordCheck::kMagic;
    if (i >= 4 && i < 8) want = RecordCheck::kVersion;
    if (i >= 64 && i < 68) {
      // block_size claims more token bytes than the record has: truncated.
      uint32_t bs;
      std::memcpy(&bs, bytes.data() + 64, 4);
      if (bs >= 1 && bs <= 4096 && 112 + 4ull * bs > bytes.size()) want = RecordCheck::kTruncated;
    }
    CAPTURE(i);
    CHECK(check(bytes, expect_small()) == want);
    CHECK(check_block_record_integrity(bytes.data(), bytes.size(), nullptr) == want);
  }
}

TEST_CASE("flipping_any_payload_byte_fails_the_payload_checksum") {
  const std::vector<uint8_t> good = encode_small();
  for (size_t i = 128; i < good.size(); ++i) {
    std::vector<uint8_t> bytes = good;
    bytes[i] ^= 0x80;
    CAPTURE(i);
    CHECK(check(bytes, expect_small()) == RecordCheck::kPayloadChecksum);
  }
  // Header-only checks (verify_payload = false) do not read the payload.
  std::vector<uint8_t> bytes = good;
  bytes.back() ^= 1;
  CHECK(check_block_record(bytes.data(), bytes.size(), expect_small(), nullptr, false) ==
        RecordCheck::kOk);
  CHECK(check_block_record_integrity(bytes.data(), bytes.size(), nullptr) ==
        RecordCheck::kPayloadChecksum);
}

TEST_CASE("truncation_at_every_length_fails_as_truncated") {
  const std::vector<uint8_t> good = encode_small();
  for (size_t n = 0; n < good.size(); ++n) {
    // A fresh exact-size copy so that AddressSanitizer catches any overread.
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    CAPTURE(n);
    CHECK(check_block_record(cut.data(), cut.size(), expect_small(), nullptr) ==
          RecordCheck::kTruncated);
  }
  CHECK(check_block_record(nullptr, 0, expect_small(), nullptr) == RecordCheck::kTruncated);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  CHECK(check(longer, expect_small()) == RecordCheck::kLength);
}

TEST_CASE("forged_headers_with_valid_checksums_fail_on_geometry_dtype_and_length") {
  const std::vector<uint8_t> good = encode_small();
  {
    std::vector<uint8_t> bytes = good;
    bytes[68] = 0x00;  // n_layers = 0x10000 (> 4096)
    bytes[70] = 0x01;
    reseal_header(bytes, 4);
    CHECK(check(bytes, expect_small()) == RecordCheck::kGeometry);
  }
  {
    std::vector<uint8_t> bytes = good;
    bytes[80] = 7;  // unknown dtype code
    reseal_header(bytes, 4);
    CHECK(check(bytes, expect_small()) == RecordCheck::kDtype);
  }
  {
    std::vector<uint8_t> bytes = good;
    bytes[88] ^= 0x02;  // payload_bytes disagrees with the geometry
    reseal_header(bytes, 4);
    CHECK(check(bytes, expect_small()) == RecordCheck::kLength);
  }
  {
    std::vector<uint8_t> bytes = good;
    bytes[72] = 1;  // n_kv_heads 2 -> 1: payload_bytes no longer matches
    reseal_header(bytes, 4);
    CHECK(check(bytes, expect_small()) == RecordCheck::kLength);
  }
}

namespace {
int g_allocs = 0;
int g_frees = 0;
void* counting_alloc(size_t n, void* ctx) {
  ++g_allocs;
  *static_cast<size_t*>(ctx) += n;
  return std::malloc(n);
}
void counting_free(void* p, size_t, void*) {
  ++g_frees;
  std::free(p);
}
}  // namespace

TEST_CASE("records_use_the_allocator_hook") {
  size_t n_bytes = 0;
  const HostAllocator alloc{counting_alloc, counting_free, &n_bytes};
  const BlockRecordInfo info = small_info();
  {
    RecordPtr rec = encode_block_record(info, kTokens, payload_for(info.geometry), alloc);
    REQUIRE(rec != nullptr);
    CHECK(g_allocs == 1);
    CHECK(n_bytes == rec->size());
    CHECK(g_frees == 0);
  }
  CHECK(g_frees == 1);
}
